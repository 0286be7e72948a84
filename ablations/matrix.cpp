// ablations/matrix.cpp: matrix TOML -> MatrixSpec -> cells, validated against the base experiment.
// The matrix only ever produces `--set` overrides for the base spec, so the spec parser stays the one
// authority on what a valid experiment is; this file only maps its errors back to matrix lines.
// Tests: tests/ablations/matrix_test.cpp.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0  // as in spec/spec.cpp: toml++ must be configured alike in every TU
#include <toml++/toml.h>

#include "ablations/matrix.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "spec/spec.h"
#include "spec/toml_types.h"

namespace ablate::ablations {
namespace {

using spec::SpecError;
using spec::SpecIssue;

std::string type_name(const toml::node& n) { return spec::toml_type_name(n); }

// TOML basic-string quoting; control characters as \uXXXX so the literal survives argv unchanged.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A float literal that reads back as a float with the same value (shortest round-trip digits).
std::string float_literal(double d) {
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "n": inf/nan are already floats
  return s;
}

// The TOML literal of a scalar (or, when `arrays`, an array of scalars); nullopt for anything else.
std::optional<std::string> literal(const toml::node& n, bool arrays) {
  if (auto s = n.as_string()) return quote(s->get());
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto f = n.as_floating_point()) return float_literal(f->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (auto a = n.as_array(); a && arrays) {
    std::vector<std::string> items;
    for (const auto& el : *a) {
      auto lit = literal(el, false);
      if (!lit) return std::nullopt;
      items.push_back(*lit);
    }
    return fmt::format("[{}]", fmt::join(items, ", "));
  }
  return std::nullopt;
}

bool before(const toml::source_region& a, const toml::source_region& b) {
  return std::pair(a.begin.line, a.begin.column) < std::pair(b.begin.line, b.begin.column);
}

class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  MatrixSpec parse(const std::string& text, const MatrixOverrides& overrides) {
    MatrixSpec m;
    m.source_path = source_;
    auto result = toml::parse(std::string_view(text), std::string_view(source_));
    if (!result) {
      issue(result.error().source(), std::string(result.error().description()) + " (malformed TOML)");
      throw SpecError(issues_);
    }
    const toml::table root = std::move(result).table();
    // An experiment file given where a matrix belongs: one error saying so, not one per section.
    if (root.contains("experiment") && !root.contains("matrix")) {
      issue(root["experiment"].node()->source(),
            fmt::format("this is an experiment file ([experiment]), not an ablation matrix: run it with `ablate run {}`; "
                        "a matrix file has [matrix] (name, base = this file, mode, repeats), [axes] and [set]",
                        source_));
      throw SpecError(issues_);
    }
    for (auto&& [key, node] : root) {
      const std::string k(key.str());
      if (k != "matrix" && k != "axes" && k != "set")
        issue(key.source(), fmt::format("unknown section [{}]: a matrix file has [matrix], [axes] and [set]", k));
      else if (!node.is_table())
        issue(node.source(), fmt::format("[{}] must be a table, got {}", k, type_name(node)));
    }
    if (auto* t = root["matrix"].as_table()) {
      read_matrix_section(*t, m);
    } else if (!root.contains("matrix")) {
      issue({}, "missing [matrix] section (name, base, mode, repeats)");
    }
    if (auto* t = root["axes"].as_table()) collect(*t, "", axes_nodes_);
    if (auto* t = root["set"].as_table()) collect(*t, "", fixed_nodes_);
    read_axes(m);
    read_fixed(m);
    apply_command_line(overrides, m);
    if (overrides.repeats) {
      if (*overrides.repeats < 1) issues_.push_back({"--repeats", "expected at least 1"});
      m.repeats = *overrides.repeats;
    }
    check_conflicts(m);
    if (m.mode == Mode::zip && issues_.empty()) check_zip(m);
    if (!issues_.empty()) throw SpecError(issues_);
    return m;
  }

 private:
  // (dotted key, key node region, value node) of a table's leaves, nested tables flattened so both
  // `"backends.loss" = [...]` and `backends.loss = [...]` name the same key.
  using Leaves = std::vector<std::tuple<std::string, toml::source_region, const toml::node*>>;

  std::string source_;
  std::vector<SpecIssue> issues_;
  Leaves axes_nodes_, fixed_nodes_;

  std::string where(const toml::source_region& r) const {
    if (r.begin.line == 0) return source_;
    return fmt::format("{}:{}:{}", source_, r.begin.line, r.begin.column);
  }
  void issue(const toml::source_region& r, std::string msg) { issues_.push_back({where(r), std::move(msg)}); }

  void collect(const toml::table& t, const std::string& prefix, Leaves& out) {
    for (auto&& [key, node] : t) {
      const std::string dotted = prefix + std::string(key.str());
      if (auto* sub = node.as_table())
        collect(*sub, dotted + ".", out);
      else
        out.emplace_back(dotted, key.source(), &node);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return before(std::get<1>(a), std::get<1>(b)); });
  }

  void read_matrix_section(const toml::table& t, MatrixSpec& m) {
    static const std::vector<std::string> known = {"name", "base", "mode", "repeats", "seeds"};
    for (auto&& [key, node] : t) {
      const std::string k(key.str());
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        issue(key.source(), fmt::format("unknown key '{}' in [matrix]: known keys are {}", k, fmt::join(known, ", ")));
        continue;
      }
      if (k == "name" || k == "base" || k == "mode") {
        auto* s = node.as_string();
        if (!s || s->get().empty()) {
          issue(node.source(), fmt::format("matrix.{}: expected a non-empty string, got {}", k, s ? "\"\"" : type_name(node)));
          continue;
        }
        if (k == "name") m.name = s->get();
        if (k == "base") m.base = s->get();
        if (k == "mode") {
          if (s->get() == "one-at-a-time")
            m.mode = Mode::one_at_a_time;
          else if (s->get() == "factorial")
            m.mode = Mode::factorial;
          else if (s->get() == "zip")
            m.mode = Mode::zip;
          else
            issue(node.source(), fmt::format("matrix.mode: expected \"one-at-a-time\", \"factorial\" or \"zip\", got \"{}\"", s->get()));
        }
      } else if (k == "repeats") {
        auto v = node.value_exact<int64_t>();
        if (!v || *v < 1)
          issue(node.source(), fmt::format("matrix.repeats: expected an integer >= 1, got {}", v ? std::to_string(*v) : type_name(node)));
        else
          m.repeats = *v;
      } else {  // seeds
        auto* a = node.as_array();
        if (!a) {
          issue(node.source(), fmt::format("matrix.seeds: expected an array of integers, got {}", type_name(node)));
          continue;
        }
        for (const auto& el : *a) {
          auto v = el.value_exact<int64_t>();
          if (!v || *v < 0) {
            issue(el.source(), fmt::format("matrix.seeds: expected integers >= 0, got {}", v ? std::to_string(*v) : type_name(el)));
            continue;
          }
          m.seeds.push_back({"experiment.seed", std::to_string(*v), std::to_string(*v), where(el.source())});
        }
      }
    }
    if (m.name.empty() && !t.contains("name")) issue(t.source(), "[matrix] needs a name");
    if (m.base.empty() && !t.contains("base")) issue(t.source(), "[matrix] needs a base experiment (base = \"experiments/x.toml\")");
    if (!m.base.empty()) {
      namespace fs = std::filesystem;
      const fs::path base(m.base);
      m.base_path = (base.is_absolute() ? base : fs::path(source_).parent_path() / base).lexically_normal().string();
    }
  }

  // An axis from a TOML array, the file's or an --axis argument's: each value a scalar, none twice (under
  // zip a value may repeat: the cells, not the values, must differ); a bad one is an issue (`prefix` +
  // message at at(element)) and left out.
  template <class At>
  Axis read_axis_values(const std::string& key, const toml::array& values, Mode mode, const std::string& prefix, At at) {
    Axis axis{key, {}};
    std::set<std::string> seen;
    for (const auto& el : values) {
      const auto lit = literal(el, false);
      if (!lit) {
        issues_.push_back({at(el), fmt::format("{}values must be strings, numbers or booleans, got {}", prefix, type_name(el))});
        continue;
      }
      if (!seen.insert(*lit).second && mode != Mode::zip) {
        issues_.push_back({at(el), fmt::format("{}duplicate value {}", prefix, *lit)});
        continue;
      }
      axis.values.push_back({key, *lit, el.is_string() ? *el.value<std::string>() : *lit, at(el)});
    }
    return axis;
  }

  static std::vector<Axis>::iterator find_axis(MatrixSpec& m, const std::string& key) {
    return std::find_if(m.axes.begin(), m.axes.end(), [&](const Axis& a) { return a.key == key; });
  }

  static bool valid_key(const std::string& dotted) { return dotted.find('.') != std::string::npos && dotted.front() != '.' && dotted.back() != '.'; }

  void read_axes(MatrixSpec& m) {
    for (const auto& [key, key_region, node] : axes_nodes_) {
      if (!valid_key(key)) {
        issue(key_region, fmt::format("axis '{}' is not a section.key path (for example \"backends.loss\")", key));
        continue;
      }
      auto* a = node->as_array();
      if (!a || a->empty()) {
        issue(node->source(), fmt::format("axes.{}: expected a non-empty array of values, got {}", key, a ? "[]" : type_name(*node)));
        continue;
      }
      Axis axis = read_axis_values(key, *a, m.mode, "axes." + key + ": ", [&](const toml::node& el) { return where(el.source()); });
      if (!axis.values.empty()) m.axes.push_back(std::move(axis));
    }
  }

  void read_fixed(MatrixSpec& m) {
    for (const auto& [key, key_region, node] : fixed_nodes_) {
      if (!valid_key(key)) {
        issue(key_region, fmt::format("set key '{}' is not a section.key path (for example \"train.steps\")", key));
        continue;
      }
      auto lit = literal(*node, true);
      if (!lit) {
        issue(node->source(), fmt::format("set.{}: expected a string, number, boolean or array of them, got {}", key, type_name(*node)));
        continue;
      }
      m.fixed.push_back({key, *lit, *lit, where(node->source())});
    }
  }

  // The command line's --name, --axis and --set (MatrixOverrides), each checked as the file's own keys are;
  // an error points at the argument ("--set KEY=VALUE").
  void apply_command_line(const MatrixOverrides& ov, MatrixSpec& m) {
    if (ov.name) {
      if (ov.name->empty()) {
        issues_.push_back({"--name", "expected a non-empty matrix name"});
      } else {
        m.name = *ov.name;
        m.command_line.push_back("--name " + *ov.name);
      }
    }
    std::set<std::string> given;  // each key once on the command line
    // `example` is the argument's form, as the message shows it.
    auto split = [&](const std::string& arg, const std::string& where,
                     const char* example) -> std::optional<std::pair<std::string, std::string>> {
      const size_t eq = arg.find('=');
      const std::string key = arg.substr(0, eq);
      if (eq == std::string::npos || !valid_key(key)) {
        issues_.push_back({where, fmt::format("expected {}", example)});
        return std::nullopt;
      }
      if (!given.insert(key).second) {
        issues_.push_back({where, fmt::format("'{}' is given twice on the command line: give each key once", key)});
        return std::nullopt;
      }
      return std::pair(key, arg.substr(eq + 1));
    };
    for (const auto& arg : ov.axes) {
      const std::string where = "--axis " + arg;
      const auto kv = split(arg, where, "section.key=[V1, V2, ...] (for example 'train.steps=[20, 40]')");
      if (!kv) continue;
      const auto& [key, text] = *kv;
      const auto value = parse_value(text);
      const toml::array* array = value ? value->get("v")->as_array() : nullptr;
      if (!array || array->empty()) {
        issues_.push_back({where, fmt::format("expected a non-empty TOML array of values, for example {}=[1, 2] or {}='[\"a\", \"b\"]'", key, key)});
        continue;
      }
      const size_t issues_before = issues_.size();
      Axis axis = read_axis_values(key, *array, m.mode, "", [&](const toml::node&) { return where; });
      if (issues_.size() != issues_before) continue;
      m.command_line.push_back(where);
      std::erase_if(m.fixed, [&](const Override& o) { return o.key == key; });
      const auto it = find_axis(m, key);
      if (it != m.axes.end())
        it->values = std::move(axis.values);
      else
        m.axes.push_back(std::move(axis));
    }
    for (const auto& arg : ov.set) {
      const std::string where = "--set " + arg;
      const auto kv = split(arg, where, "section.key=VALUE (for example train.steps=20)");
      if (!kv) continue;
      const auto& [key, text] = *kv;
      if (const auto axis = find_axis(m, key); axis != m.axes.end()) {
        issues_.push_back({where, fmt::format("'{}' is an axis of this matrix (declared at {}): --set cannot fix it; run one value "
                                              "with --axis '{}=[VALUE]'", key, axis->values.front().where, key)});
        continue;
      }
      std::string lit = quote(text);  // not one TOML value: a string, as `ablate run --set` reads it
      if (const auto value = parse_value(text)) {
        const auto parsed = literal(*value->get("v"), true);
        if (!parsed) {
          issues_.push_back({where, fmt::format("expected a string, number, boolean or array of them, got {}", type_name(*value->get("v")))});
          continue;
        }
        lit = *parsed;
      }
      m.command_line.push_back(where);
      const Override o{key, lit, lit, where};
      const auto it = std::find_if(m.fixed.begin(), m.fixed.end(), [&](const Override& f) { return f.key == key; });
      if (it != m.fixed.end())
        *it = o;
      else
        m.fixed.push_back(o);
    }
  }

  // Zip pairs the axes value by value: every axis as long as the first, and no two cells alike (a cell
  // given twice would pool two names' runs of one experiment). Errors point at the later declaration.
  void check_zip(const MatrixSpec& m) {
    if (m.axes.empty()) return;
    const Axis& first = m.axes.front();
    bool lengths_match = true;
    for (const Axis& a : m.axes)
      if (a.values.size() != first.values.size()) {
        lengths_match = false;
        issues_.push_back({a.values.front().where,
                           fmt::format("matrix.mode = \"zip\" pairs the axes value by value, and '{}' has {} values where '{}' has {}: "
                                       "give every axis the same number of values",
                                       a.key, a.values.size(), first.key, first.values.size())});
      }
    if (!lengths_match) return;
    std::map<std::vector<std::string>, size_t> cells;  // the values of a cell -> its index
    for (size_t i = 0; i < first.values.size(); ++i) {
      std::vector<std::string> values;
      for (const Axis& a : m.axes) values.push_back(a.values[i].value);
      if (const auto [it, fresh] = cells.emplace(values, i); !fresh)
        issues_.push_back({first.values[i].where,
                           fmt::format("matrix.mode = \"zip\": cell {} has the values of cell {} ({}): change or remove one", i,
                                       it->second, fmt::join(values, ", "))});
    }
  }

  // "v = VALUE" as TOML: a table with that one value, or nullopt when VALUE is not one TOML value.
  static std::optional<toml::table> parse_value(const std::string& value) {
    auto parsed = toml::parse(std::string_view("v = " + value), std::string_view("command line"));
    if (!parsed || parsed.table().size() != 1) return std::nullopt;
    return std::move(parsed).table();
  }

  // A key set in two places would silently let one win; a seed list with a seed override likewise.
  void check_conflicts(const MatrixSpec& m) {
    std::map<std::string, std::string> first;  // key -> where it was declared
    auto claim = [&](const std::string& key, const std::string& at) {
      auto [it, fresh] = first.emplace(key, at);
      if (!fresh) issues_.push_back({at, fmt::format("'{}' is already set at {}: set each key in one place", key, it->second)});
    };
    for (const auto& o : m.fixed) claim(o.key, o.where);
    for (const auto& a : m.axes) claim(a.key, a.values.front().where);
    if (!m.seeds.empty()) {
      claim("experiment.seed", m.seeds.front().where);
      if (static_cast<int64_t>(m.seeds.size()) < m.repeats)
        issues_.push_back({m.seeds.front().where, fmt::format("matrix.seeds has {} seeds for {} repeats: give one seed per repeat",
                                                              m.seeds.size(), m.repeats)});
    }
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError({{path, "cannot open the matrix file: check the path"}});
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> set_args(const std::vector<Override>& overrides) {
  std::vector<std::string> args;
  for (const auto& o : overrides) args.push_back(o.set_arg());
  return args;
}

std::string cell_name(const std::vector<Override>& overrides) {
  if (overrides.empty()) return "baseline";
  std::vector<std::string> parts;
  for (const auto& o : overrides) parts.push_back(o.key + "=" + o.label);
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::factorial: return "factorial";
    case Mode::zip: return "zip";
    case Mode::one_at_a_time: break;
  }
  return "one-at-a-time";
}

MatrixSpec parse_matrix_string(const std::string& text, const std::string& source_path, const MatrixOverrides& overrides) {
  return Parser(source_path).parse(text, overrides);
}

MatrixSpec parse_matrix_file(const std::string& path, const MatrixOverrides& overrides) {
  return parse_matrix_string(read_file(path), path, overrides);
}

std::vector<Cell> expand(const MatrixSpec& spec) {
  std::vector<Cell> cells;
  if (spec.mode == Mode::one_at_a_time) {
    // Every cell sets every axis, so the baseline is the axes' first values even where the base
    // spec says otherwise; the name shows only the value that differs from the baseline.
    std::vector<Override> baseline;
    for (const auto& axis : spec.axes) baseline.push_back(axis.values.front());
    cells.push_back({cell_name({}), baseline, ""});
    for (size_t a = 0; a < spec.axes.size(); ++a) {
      for (size_t v = 1; v < spec.axes[a].values.size(); ++v) {
        std::vector<Override> overrides = baseline;
        overrides[a] = spec.axes[a].values[v];
        cells.push_back({cell_name({overrides[a]}), overrides, ""});
      }
    }
    return cells;
  }
  if (spec.mode == Mode::zip && !spec.axes.empty()) {
    // The axes' i-th values together (parse checked their lengths and that no two cells are alike).
    for (size_t i = 0; i < spec.axes.front().values.size(); ++i) {
      std::vector<Override> overrides;
      for (const auto& axis : spec.axes) overrides.push_back(axis.values[i]);
      cells.push_back({cell_name(overrides), overrides, ""});
    }
    return cells;
  }
  // Factorial (and zip without axes): an odometer over the axes, last axis fastest. No axes: the single baseline cell.
  std::vector<size_t> digit(spec.axes.size(), 0);
  while (true) {
    std::vector<Override> overrides;
    for (size_t a = 0; a < spec.axes.size(); ++a) overrides.push_back(spec.axes[a].values[digit[a]]);
    cells.push_back({cell_name(overrides), overrides, ""});
    size_t a = spec.axes.size();
    while (a > 0 && ++digit[a - 1] == spec.axes[a - 1].values.size()) digit[--a] = 0;
    if (a == 0) return cells;
  }
}

std::vector<Override> run_overrides(const MatrixSpec& spec, const Cell& cell, int64_t repeat) {
  std::vector<Override> all = spec.fixed;
  all.insert(all.end(), cell.overrides.begin(), cell.overrides.end());
  if (!spec.seeds.empty()) all.push_back(spec.seeds.at(static_cast<size_t>(repeat)));
  return all;
}

Matrix load_matrix(const std::string& path, const MatrixOverrides& overrides) {
  Matrix m{parse_matrix_file(path, overrides), {}};
  m.cells = expand(m.spec);
  std::vector<SpecIssue> issues;
  std::set<std::pair<std::string, std::string>> seen;  // one report per problem, not one per cell
  auto check = [&](const Cell& cell, const std::vector<Override>& overrides) -> std::optional<spec::ExperimentSpec> {
    try {
      return spec::parse_spec_file(m.spec.base_path, set_args(overrides));
    } catch (const SpecError& e) {
      for (SpecIssue i : e.issues()) {
        // Point an error that a --set caused at the matrix line (or command-line argument) that declared
        // that value; the spec parser's account of which --set it was numbers the matrix's internal ones.
        for (const auto& o : overrides)
          if (i.where == "--set " + o.set_arg()) {
            i.where = o.where;
            constexpr std::string_view kBlame = " (it comes from --set argument ", kBlameEnd = ": fix or drop that --set)";
            const auto blame = i.message.find(kBlame);
            const auto end = blame == std::string::npos ? blame : i.message.find(kBlameEnd, blame);
            if (end != std::string::npos) i.message.erase(blame, end + kBlameEnd.size() - blame);
          }
        if (seen.emplace(i.where, i.message).second)
          issues.push_back({i.where, fmt::format("cell '{}' (base {}): {}", cell.name, m.spec.base_path, i.message)});
      }
      return std::nullopt;
    }
  };
  for (auto& cell : m.cells) {
    std::vector<Override> unseeded = m.spec.fixed;
    unseeded.insert(unseeded.end(), cell.overrides.begin(), cell.overrides.end());
    if (auto spec = check(cell, unseeded)) {
      cell.spec_hash = spec::spec_hash(*spec);
      cell.nproc = spec->distributed.nproc;
    }
    for (int64_t r = 0; r < m.spec.repeats && !m.spec.seeds.empty(); ++r) check(cell, run_overrides(m.spec, cell, r));
  }
  if (!issues.empty()) throw SpecError(std::move(issues));
  return m;
}

std::vector<Slot> run_order(const Matrix& matrix) {
  std::vector<Slot> order;
  for (int64_t r = 0; r < matrix.spec.repeats; ++r)
    for (size_t c = 0; c < matrix.cells.size(); ++c) order.push_back({c, r});
  return order;
}

nlohmann::json identity_json(const Matrix& matrix) {
  const MatrixSpec& s = matrix.spec;
  nlohmann::json j;
  j["name"] = s.name;
  j["base"] = s.base;
  j["mode"] = to_string(s.mode);
  j["seeds"] = nlohmann::json::array();
  for (const auto& o : s.seeds) j["seeds"].push_back(o.value);
  j["set"] = set_args(s.fixed);
  j["axes"] = nlohmann::json::array();
  for (const auto& a : s.axes) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& v : a.values) values.push_back(v.value);
    j["axes"].push_back({{"key", a.key}, {"values", values}});
  }
  j["cells"] = nlohmann::json::array();
  for (const auto& c : matrix.cells)
    j["cells"].push_back({{"name", c.name}, {"set", set_args(c.overrides)}, {"spec_hash", c.spec_hash}});
  if (!s.command_line.empty()) j["command_line"] = s.command_line;  // absent for the file as it is: its identity unchanged
  return j;
}

std::string describe(const Matrix& matrix) {
  const MatrixSpec& s = matrix.spec;
  std::string out = fmt::format("matrix {} ({}), base {}, {} cells x {} repeats = {} runs\n", s.name, to_string(s.mode),
                                s.base_path, matrix.cells.size(), s.repeats, matrix.cells.size() * s.repeats);
  if (!s.command_line.empty()) out += fmt::format("changed on the command line: {}\n", fmt::join(s.command_line, " "));
  if (!s.fixed.empty()) out += fmt::format("every cell: --set {}\n", fmt::join(set_args(s.fixed), " --set "));
  if (!s.seeds.empty()) {
    std::vector<std::string> seeds;
    for (const auto& o : s.seeds) seeds.push_back(o.value);
    out += fmt::format("seeds per repeat: {}\n", fmt::join(seeds, ", "));
  }
  out += "cells:\n";
  for (size_t c = 0; c < matrix.cells.size(); ++c) {
    const auto& cell = matrix.cells[c];
    out += fmt::format("  {:>3}  {:<40}  {}  {}\n", c, cell.name, cell.spec_hash.substr(0, 12),
                       cell.overrides.empty() ? std::string("(base spec as is)") : fmt::format("--set {}", fmt::join(set_args(cell.overrides), " --set ")));
  }
  out += "run order:";
  int64_t repeat = -1;
  for (const Slot& slot : run_order(matrix)) {
    if (slot.repeat != repeat) out += fmt::format("\n  r{}:", repeat = slot.repeat);
    out += " " + matrix.cells[slot.cell].name;
  }
  return out + "\n";
}

}  // namespace ablate::ablations
