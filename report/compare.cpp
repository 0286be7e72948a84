// report/compare.cpp: two groups of runs compared (see compare.h): evidence filtering, comparability,
// statistics, selectors, text and JSON rendering.
// Tests: tests/report/compare_test.cpp (report_tests).
#include "report/compare.h"
#include "report/json_fields.h"
#include "report/selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace ablate::report {
namespace {

using receipts::RunRow;
using receipts::RunStatus;
using nlohmann::json;

// Spec fields that name or describe an experiment without changing what it measures.
const std::set<std::string>& descriptive_spec_fields() {
  static const std::set<std::string> fields = {"spec.experiment.name", "spec.experiment.description",
                                               "spec.experiment.tags"};
  return fields;
}

}  // namespace

std::string absent_value(const std::string& field) {
  return field.rfind("spec.", 0) == 0 ? "(default)" : "(absent)";
}

std::string not_evidence_reason(const RunRow& run) {
  if (receipts::is_evidence(run)) return "";
  if (run.status != RunStatus::ok) {
    return fmt::format("status {}{}", receipts::to_string(run.status), run.error ? ": " + *run.error : "");
  }
  const auto& s = run.summary;
  std::vector<std::string> missing;
  if (run.spec_hash.empty()) missing.push_back("spec hash");
  if (!s.steps || *s.steps <= 0) missing.push_back("steps");
  if (!s.median_step_ms) missing.push_back("median step time");
  if (!s.tokens_per_s) missing.push_back("tokens/s");
  if (!s.goodput_pct) missing.push_back("goodput");
  if (!s.peak_memory_bytes) missing.push_back("peak memory");
  return missing.empty() ? "not evidence" : fmt::format("incomplete summary: no {}", fmt::join(missing, ", "));
}

namespace {

// Spec leaves as "spec.a.b" -> JSON text; a non-empty object is descended, anything else is a leaf.
void flatten_spec(const json& node, const std::string& path, std::map<std::string, std::string>& out) {
  if (node.is_object() && !node.empty()) {
    for (const auto& [key, child] : node.items()) flatten_spec(child, path + "." + key, out);
    return;
  }
  if (!descriptive_spec_fields().count(path)) out[path] = node.dump();
}


// Median of a summary value over the evidence runs that have it.
template <typename Getter>
std::optional<double> median_over(const std::vector<ComparedRun>& runs, Getter get) {
  std::vector<double> values;
  for (const auto& run : runs)
    if (const auto value = get(run.row.summary)) values.push_back(static_cast<double>(*value));
  if (values.empty()) return std::nullopt;
  return median(values);
}

// Median over the evidence runs with a goodput ledger of one of its SteadyGoodput values.
template <typename Getter>
std::optional<double> median_goodput(const std::vector<ComparedRun>& runs, Getter get) {
  std::vector<double> values;
  for (const auto& run : runs)
    if (run.goodput)
      if (const std::optional<double> value = get(*run.goodput)) values.push_back(*value);
  if (values.empty()) return std::nullopt;
  return median(values);
}

void summarize(Side& side) {
  side.median_step_ms = median_over(side.evidence, [](const auto& s) { return s.median_step_ms; });
  side.median_tokens_per_s = median_over(side.evidence, [](const auto& s) { return s.tokens_per_s; });
  side.median_goodput_pct = median_over(side.evidence, [](const auto& s) { return s.goodput_pct; });
  side.median_peak_memory_bytes = median_over(side.evidence, [](const auto& s) { return s.peak_memory_bytes; });
  side.median_gpu_needed_bytes = median_over(side.evidence, [](const auto& s) {
    return s.facts.memory ? std::optional<std::int64_t>(s.facts.memory->needed_bytes) : std::nullopt;
  });
  side.median_fixed_seconds =
      median_goodput(side.evidence, [](const SteadyGoodput& g) { return std::optional<double>(g.fixed_seconds); });
  side.median_fixed_share =
      median_goodput(side.evidence, [](const SteadyGoodput& g) { return std::optional<double>(g.fixed_share); });
  side.median_steady_goodput_pct = median_goodput(side.evidence, [](const SteadyGoodput& g) { return g.steady_pct; });
}

}  // namespace

std::map<std::string, std::string> comparable_fields(receipts::Store& store, std::int64_t run_id) {
  std::map<std::string, std::string> fields;
  std::map<std::string, std::string> env;
  for (const auto& row : store.query("SELECT key, value FROM run_env WHERE run_id = ?", {run_id}))
    env[row["key"].get<std::string>()] = row["value"].get<std::string>();
  for (const auto& key : compared_env_keys()) {
    const auto it = env.find(key);
    fields["env." + key] = it == env.end() ? absent_value("env." + key) : it->second;
  }
  fields.merge(spec_fields(store, run_id));
  return fields;
}

std::map<std::string, std::string> spec_fields(receipts::Store& store, std::int64_t run_id) {
  std::map<std::string, std::string> fields;
  const json spec = store.query("SELECT spec_json FROM run_spec WHERE run_id = ?", {run_id});
  if (!spec.empty()) flatten_spec(json::parse(spec[0]["spec_json"].get<std::string>()), "spec", fields);
  return fields;
}

std::map<std::string, double> goodput_seconds(receipts::Store& store, std::int64_t run_id) {
  std::map<std::string, double> seconds;
  for (const auto& row : store.query("SELECT category, seconds FROM goodput WHERE run_id = ?", {run_id}))
    seconds[row["category"].get<std::string>()] = row["seconds"].get<double>();
  return seconds;
}

std::optional<SteadyGoodput> steady_goodput(const std::map<std::string, double>& seconds) {
  double wall = 0, fixed = 0;
  for (const auto& [category, s] : seconds) {
    wall += s;
    if (category == "startup" || category == "data_prep" || category == "warmup") fixed += s;
  }
  if (!(wall > 0)) return std::nullopt;
  SteadyGoodput g{fixed, fixed / wall, std::nullopt};
  const auto productive = seconds.find("productive");
  if (wall - fixed > 0) g.steady_pct = (productive == seconds.end() ? 0.0 : productive->second) / (wall - fixed) * 100;
  return g;
}

std::vector<BackendShortfall> backend_shortfalls(receipts::Store& store, const std::vector<std::int64_t>& run_ids,
                                                 const std::string& seam) {
  std::vector<BackendShortfall> out;
  for (const auto& row : store.query("SELECT run_id, requested, chosen, observed, mismatch FROM run_backends WHERE "
                                     "seam = ? AND run_id IN (SELECT value FROM json_each(?)) ORDER BY run_id",
                                     {seam, json(run_ids).dump()})) {
    BackendShortfall s{row["run_id"].get<std::int64_t>(), seam, row["requested"].get<std::string>(),
                       row["chosen"].get<std::string>(), std::nullopt,
                       !row["mismatch"].is_null() && row["mismatch"].get<std::int64_t>() == 1};
    if (row["observed"].is_string()) s.observed = row["observed"].get<std::string>();
    if (s.fell_back() || s.mismatch) out.push_back(std::move(s));
  }
  return out;
}

Side load_side(receipts::Store& store, const std::vector<std::int64_t>& ids) {
  Side side;
  for (const std::int64_t id : ids) {
    RunRow row = store.get_run(id);
    if (receipts::is_evidence(row)) {
      side.evidence.push_back({std::move(row), comparable_fields(store, id), steady_goodput(goodput_seconds(store, id))});
    } else {
      side.excluded.push_back({id, row.status, not_evidence_reason(row)});
    }
  }
  summarize(side);
  return side;
}

namespace {

std::set<std::string> distinct_values(const Side& side, const std::string& field) {
  std::set<std::string> values;
  for (const auto& run : side.evidence) {
    const auto it = run.fields.find(field);
    values.insert(it == run.fields.end() ? absent_value(field) : it->second);
  }
  return values;
}

// Sorts every differing field into the factor under test or the mismatches.
void classify_differences(Comparison& c) {
  std::set<std::string> names;
  for (const Side* side : {&c.a, &c.b})
    for (const auto& run : side->evidence)
      for (const auto& [name, value] : run.fields) names.insert(name);
  for (const auto& name : names) {
    const auto a_values = distinct_values(c.a, name), b_values = distinct_values(c.b, name);
    // Seeds are repeats: a side may run several, and both sides the same ones (a matrix's `seeds`) pair
    // them. Other seed sets are a difference like any other.
    if (name == "spec.experiment.seed" && a_values == b_values) continue;
    FieldDifference diff{name, {a_values.begin(), a_values.end()}, {b_values.begin(), b_values.end()}, false};
    if (a_values.size() > 1 || b_values.size() > 1) {
      diff.within_side = true;
      c.mismatches.push_back(std::move(diff));
    } else if (!a_values.empty() && !b_values.empty() && a_values != b_values) {
      (name.starts_with("spec.") ? c.factor : c.mismatches).push_back(std::move(diff));
    }
  }
}

std::string describe(const FieldDifference& d) {
  return fmt::format("{}{}: A {} | B {}", d.field, d.within_side ? " (differs within a side)" : "",
                     fmt::join(d.a_values, " / "), fmt::join(d.b_values, " / "));
}

// The seams the factor under test names: spec.backends.<seam> fields that differ between the sides.
std::vector<std::string> factor_seams(const Comparison& c) {
  constexpr std::string_view prefix = "spec.backends.";
  std::vector<std::string> seams;
  for (const auto& d : c.factor)
    if (d.field.starts_with(prefix)) seams.push_back(d.field.substr(prefix.size()));
  return seams;
}

std::string shortfall_text(const BackendShortfall& s) {
  if (s.fell_back()) return fmt::format("requested {} at {} but ran {}", s.requested, s.seam, s.chosen);
  return fmt::format("chose {} at {} but its kernels matched {}", s.chosen, s.seam, s.observed.value_or("another backend"));
}

// Moves the side's evidence runs that did not run what they requested at a factor seam to its
// excluded runs, with why, and recomputes its medians.
void set_aside_shortfalls(receipts::Store& store, Side& side, const std::vector<std::string>& seams,
                          std::vector<BackendShortfall>& shortfalls) {
  std::map<std::int64_t, std::vector<std::string>> why;
  for (const auto& seam : seams) {
    for (auto& s : backend_shortfalls(store, side.evidence_ids(), seam)) {
      why[s.run_id].push_back(fmt::format("{} (run_backends.{})", shortfall_text(s), s.fell_back() ? "chosen" : "mismatch"));
      shortfalls.push_back(std::move(s));
    }
  }
  if (why.empty()) return;
  std::vector<ComparedRun> kept;
  for (auto& run : side.evidence) {
    const auto it = why.find(run.row.id);
    if (it == why.end()) {
      kept.push_back(std::move(run));
      continue;
    }
    side.excluded.push_back({run.row.id, run.row.status,
                             fmt::format("{}: no evidence about the factor under test", fmt::join(it->second, "; "))});
  }
  side.evidence = std::move(kept);
  summarize(side);
}

void require_disjoint_sides(const std::vector<std::int64_t>& a_ids, const std::vector<std::int64_t>& b_ids) {
  if (a_ids.empty() || b_ids.empty()) throw std::invalid_argument("compare needs at least one run on each side");
  const std::set<std::int64_t> a_set(a_ids.begin(), a_ids.end()), b_set(b_ids.begin(), b_ids.end());
  if (a_set.size() != a_ids.size() || b_set.size() != b_ids.size())
    throw std::invalid_argument("a run is listed twice on one side");
  for (const auto id : a_ids)
    if (b_set.count(id)) throw std::invalid_argument(fmt::format("run {} is on both sides", id));
}

std::int64_t parse_run_id(std::string_view text, std::string_view selector) {
  std::int64_t id = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || id <= 0) {
    throw std::invalid_argument(fmt::format(
        "bad run selector '{}': expected a run id (12), a comma list (12,13,14), tag:NAME or name:GLOB", selector));
  }
  return id;
}

json side_json(const Side& side) {
  json excluded = json::array();
  for (const auto& e : side.excluded)
    excluded.push_back({{"run_id", e.run_id}, {"status", receipts::to_string(e.status)}, {"reason", e.reason}});
  return {{"evidence_run_ids", side.evidence_ids()},
          {"step_ms", side.step_ms()},
          {"median_step_ms", value_or_null(side.median_step_ms)},
          {"median_tokens_per_s", value_or_null(side.median_tokens_per_s)},
          {"median_goodput_pct", value_or_null(side.median_goodput_pct)},
          {"median_peak_memory_bytes", value_or_null(side.median_peak_memory_bytes)},
          {"median_gpu_needed_bytes", value_or_null(side.median_gpu_needed_bytes)},
          {"median_fixed_cost_seconds", value_or_null(side.median_fixed_seconds)},
          {"median_fixed_cost_share", value_or_null(side.median_fixed_share)},
          {"median_steady_goodput_pct", value_or_null(side.median_steady_goodput_pct)},
          {"fixed_cost_dominates", side.fixed_cost_dominates()},
          {"excluded", excluded}};
}

json differences_json(const std::vector<FieldDifference>& diffs) {
  json out = json::array();
  for (const auto& d : diffs)
    out.push_back({{"field", d.field}, {"a", d.a_values}, {"b", d.b_values}, {"within_side", d.within_side}});
  return out;
}

json shortfalls_json(const std::vector<BackendShortfall>& shortfalls) {
  json out = json::array();
  for (const auto& s : shortfalls)
    out.push_back({{"run_id", s.run_id}, {"seam", s.seam}, {"requested", s.requested}, {"chosen", s.chosen},
                   {"observed", value_or_null(s.observed)}, {"mismatch", s.mismatch}});
  return out;
}

// family -> kernel ms per step of one run's profiled window(s) on rank 0; empty when not profiled.
std::map<std::string, double> family_ms_per_step(receipts::Store& store, std::int64_t run_id) {
  // One read: each family's total next to the window's step count (all families share the steps).
  const auto rows = store.query(
      "WITH window AS (SELECT * FROM profile_time WHERE run_id = ? AND rank = 0 AND dimension = 'family') "
      "SELECT key, SUM(total_ns) AS ns, (SELECT COUNT(DISTINCT step) FROM window) AS steps FROM window GROUP BY key",
      {run_id});
  std::map<std::string, double> out;
  for (const auto& r : rows) out[r["key"].get<std::string>()] = r["ns"].get<double>() / 1e6 / r["steps"].get<double>();
  return out;
}

// Per-family medians of both sides (see FamilyTime); empty when neither side was profiled.
std::vector<FamilyTime> family_times(receipts::Store& store, const Side& a, const Side& b) {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_family;
  std::size_t a_runs = 0, b_runs = 0;
  for (const auto& [side, runs, count] : {std::tuple{&a, 0, &a_runs}, std::tuple{&b, 1, &b_runs}}) {
    for (const auto& run : side->evidence) {
      const auto per_family = family_ms_per_step(store, run.row.id);
      if (per_family.empty()) continue;
      ++*count;
      for (const auto& [family, ms] : per_family)
        (runs == 0 ? by_family[family].first : by_family[family].second).push_back(ms);
    }
  }
  std::vector<FamilyTime> out;
  for (auto& [family, values] : by_family) {
    FamilyTime f{family, std::nullopt, std::nullopt, a_runs, b_runs};
    if (!values.first.empty()) f.a_ms_per_step = median(values.first);
    if (!values.second.empty()) f.b_ms_per_step = median(values.second);
    out.push_back(f);
  }
  return out;
}

std::string fixed(const std::optional<double>& value, int decimals) {
  return value ? fmt::format("{:.{}f}", *value, decimals) : "-";
}

std::string gib(const std::optional<double>& bytes) {
  return bytes ? fmt::format("{:.3f} GiB", *bytes / (1024.0 * 1024 * 1024)) : "-";
}

// A difference B - A in GiB with its sign, "-" when unknown.
std::string gib_delta(const std::optional<double>& bytes) {
  return bytes ? fmt::format("{:+.3f} GiB", *bytes / (1024.0 * 1024 * 1024)) : "-";
}

std::string side_line(char label, const Side& side) {
  return fmt::format("{}: {} evidence run(s) [{}]", label, side.evidence.size(), fmt::join(side.evidence_ids(), ","));
}

}  // namespace

const std::vector<std::string>& compared_env_keys() {
  static const std::vector<std::string> keys = {
      "gpu_model", "nvidia_driver", "cuda_runtime",  "cudnn",          "libtorch",  "nccl",      "cpu_model",
      "git_revision", "git_dirty",  "compiler",      "build_type",     "build_flags", "cuda_arch_list"};
  return keys;
}

std::vector<std::int64_t> Side::evidence_ids() const {
  std::vector<std::int64_t> ids;
  for (const auto& run : evidence) ids.push_back(run.row.id);
  return ids;
}

std::vector<double> Side::step_ms() const {
  std::vector<double> values;
  for (const auto& run : evidence) values.push_back(*run.row.summary.median_step_ms);  // evidence has it
  return values;
}

Comparison compare_runs(receipts::Store& store, const std::vector<std::int64_t>& a_ids,
                        const std::vector<std::int64_t>& b_ids, const CompareOptions& options) {
  require_disjoint_sides(a_ids, b_ids);
  Comparison c;
  c.a = load_side(store, a_ids);
  c.b = load_side(store, b_ids);
  classify_differences(c);
  if (!c.mismatches.empty()) {
    if (!options.allow_mismatch) {
      std::vector<std::string> names, lines;
      for (const auto& d : c.mismatches) names.push_back(d.field), lines.push_back(describe(d));
      throw MismatchError(fmt::format("the runs are not comparable: {}; only the factor under test may differ "
                                      "(pass --allow-mismatch to compare anyway, marked in the report)",
                                      fmt::join(lines, "; ")),
                          names);
    }
    c.mismatch_allowed = true;
  }
  const auto seams = factor_seams(c);
  set_aside_shortfalls(store, c.a, seams, c.a_shortfalls);
  set_aside_shortfalls(store, c.b, seams, c.b_shortfalls);
  if (!c.a.evidence.empty() && !c.b.evidence.empty()) {
    const auto a_ms = c.a.step_ms(), b_ms = c.b.step_ms();
    c.step_ratio = ratio_of_medians(a_ms, b_ms, options.bootstrap);
    c.u_test = mann_whitney_u(a_ms, b_ms);
    c.verdict = classify(a_ms.size(), b_ms.size(), *c.step_ratio);
    if (c.a.median_tokens_per_s && c.b.median_tokens_per_s && *c.a.median_tokens_per_s > 0)
      c.tokens_per_s_delta_pct = (*c.b.median_tokens_per_s / *c.a.median_tokens_per_s - 1) * 100;
    if (c.a.median_goodput_pct && c.b.median_goodput_pct)
      c.goodput_delta_points = *c.b.median_goodput_pct - *c.a.median_goodput_pct;
    if (c.a.median_steady_goodput_pct && c.b.median_steady_goodput_pct)
      c.steady_goodput_delta_points = *c.b.median_steady_goodput_pct - *c.a.median_steady_goodput_pct;
    if (c.a.median_peak_memory_bytes && c.b.median_peak_memory_bytes)
      c.peak_memory_delta_bytes = *c.b.median_peak_memory_bytes - *c.a.median_peak_memory_bytes;
    if (c.a.median_gpu_needed_bytes && c.b.median_gpu_needed_bytes)
      c.gpu_needed_delta_bytes = *c.b.median_gpu_needed_bytes - *c.a.median_gpu_needed_bytes;
  }
  c.family_times = family_times(store, c.a, c.b);
  return c;
}

std::vector<std::int64_t> select_runs(receipts::Store& store, std::string_view selector, bool include_unsuccessful,
                                      std::vector<std::int64_t>* running) {
  std::vector<std::int64_t> ids;
  if (selector.starts_with("cell:")) {  // cell:MATRIX/CELL, the newest matrix of that name
    const std::string_view rest = selector.substr(5);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash == 0 || slash + 1 == rest.size())
      throw std::invalid_argument(fmt::format("bad run selector '{}': expected cell:MATRIX/CELL, e.g. "
                                              "cell:fast_paths/backends.loss=fused_cuda",
                                              selector));
    const auto selection = select_matrix(store, rest.substr(0, slash));
    const std::string_view cell = rest.substr(slash + 1);
    std::vector<std::string> names;
    for (const auto& group : selection.groups) {
      if (group.name == cell) return group.run_ids;  // failed runs too: compare lists them as excluded
      names.push_back(group.name);
    }
    for (const auto& declared : selection.declared_cells)
      if (declared.name == cell)
        throw std::invalid_argument(fmt::format("run selector '{}': cell '{}' of {} has no runs ({})", selector, cell,
                                                selection.title, declared.no_runs_reason));
    throw std::invalid_argument(
        fmt::format("run selector '{}': {} has no cell '{}'; cells: {}", selector, selection.title, cell, fmt::join(names, ", ")));
  }
  if (selector.starts_with("tag:") || selector.starts_with("name:") || selector.starts_with("lane:") ||
      selector.starts_with("since:")) {
    // Filters, combined with '&': tag:nightly&lane:nam56r-small/1gpu&since:30d.
    receipts::RunFilter filter;
    std::string_view rest = selector;
    while (true) {
      const auto amp = rest.find('&');
      const std::string_view part = rest.substr(0, amp);
      const auto colon = part.find(':');
      const std::string_view key = part.substr(0, colon);
      const std::string value(colon == std::string_view::npos ? std::string_view{} : part.substr(colon + 1));
      std::string* slot = key == "tag" ? &filter.tag : key == "name" ? &filter.name : key == "lane" ? &filter.lane
                          : key == "since"                                   ? &filter.since
                                                                             : nullptr;
      if (slot == nullptr || value.empty() || !slot->empty())
        throw std::invalid_argument(fmt::format(
            "bad run selector '{}': '{}' is not tag:NAME, name:GLOB, lane:LANE or since:DATE (each at most once, "
            "joined by '&')",
            selector, part));
      *slot = value;
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
    if (!include_unsuccessful) filter.status = "ok";
    const auto rows = store.list_runs(filter);
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)  // list_runs is newest first
      if (it->status != RunStatus::running)
        ids.push_back(it->id);
      else if (running != nullptr)
        running->push_back(it->id);
    if (ids.empty())
      throw std::invalid_argument(fmt::format("run selector '{}' matches no {}runs in {}", selector,
                                              include_unsuccessful ? "finished " : "ok ", store.path()));
    return ids;
  }
  std::string_view rest = selector;
  while (true) {
    const auto comma = rest.find(',');
    ids.push_back(parse_run_id(rest.substr(0, comma), selector));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return ids;
}

json to_json(const Comparison& c) {
  json out = {{"a", side_json(c.a)},
              {"b", side_json(c.b)},
              {"verdict", to_string(c.verdict)},
              {"factor", differences_json(c.factor)},
              {"mismatches", differences_json(c.mismatches)},
              {"mismatch_allowed", c.mismatch_allowed},
              {"a_backend_shortfalls", shortfalls_json(c.a_shortfalls)},
              {"b_backend_shortfalls", shortfalls_json(c.b_shortfalls)},
              {"deltas",
               {{"tokens_per_s_pct", value_or_null(c.tokens_per_s_delta_pct)},
                {"goodput_points", value_or_null(c.goodput_delta_points)},
                {"steady_goodput_points", value_or_null(c.steady_goodput_delta_points)},
                {"peak_memory_bytes", value_or_null(c.peak_memory_delta_bytes)},
                {"gpu_needed_bytes", value_or_null(c.gpu_needed_delta_bytes)}}}};
  out["step_ratio"] = c.step_ratio ? json{{"ratio", c.step_ratio->ratio},
                                          {"low", c.step_ratio->low},
                                          {"high", c.step_ratio->high},
                                          {"level", c.step_ratio->level}}
                                   : json(nullptr);
  out["u_test"] = c.u_test ? json{{"u_a", c.u_test->u_a},
                                  {"u_b", c.u_test->u_b},
                                  {"p_value", c.u_test->p_value},
                                  {"exact", c.u_test->exact}}
                           : json(nullptr);
  json families = json::array();
  for (const auto& f : c.family_times)
    families.push_back({{"family", f.family},
                        {"a_ms_per_step", value_or_null(f.a_ms_per_step)},
                        {"b_ms_per_step", value_or_null(f.b_ms_per_step)},
                        {"a_profiled_runs", f.a_runs},
                        {"b_profiled_runs", f.b_runs}});
  out["family_times"] = families;
  return out;
}

std::string render_text(const Comparison& c) {
  std::string out = side_line('A', c.a) + "\n" + side_line('B', c.b) + "\n";
  for (const auto& [label, side] : {std::pair{'A', &c.a}, std::pair{'B', &c.b}})
    for (const auto& e : side->excluded) out += fmt::format("  excluded from {}: run {}: {}\n", label, e.run_id, e.reason);
  if (c.a.evidence.empty() || c.b.evidence.empty())
    out += fmt::format("factor under test: unknown (side {} has no evidence runs, so no specs are compared)\n",
                       c.a.evidence.empty() ? 'A' : 'B');
  else if (c.factor.empty())
    out += c.mismatches.empty() ? "factor under test: none (the specs are identical)\n"
                                : "factor under test: none in the specs (they are identical); the sides differ only "
                                  "where marked MISMATCH below\n";
  for (const auto& d : c.factor) out += fmt::format("factor under test: {}\n", describe(d));
  for (const auto& [label, shortfalls] : {std::pair{'A', &c.a_shortfalls}, std::pair{'B', &c.b_shortfalls}}) {
    // One line per distinct shortfall, naming its runs.
    std::map<std::string, std::vector<std::int64_t>> runs_by_text;
    for (const auto& s : *shortfalls) runs_by_text[shortfall_text(s)].push_back(s.run_id);
    for (const auto& [text, ids] : runs_by_text)
      out += fmt::format("WARNING: {} {} in run(s) {}: no evidence about the factor, not counted\n", label, text,
                         fmt::join(ids, ", "));
  }
  for (const auto& d : c.mismatches) out += fmt::format("MISMATCH (allowed): {}\n", describe(d));
  out += fmt::format("median step time: A {} ms  B {} ms", fixed(c.a.median_step_ms, 3), fixed(c.b.median_step_ms, 3));
  if (c.step_ratio) {
    out += fmt::format("  ratio B/A {:.4f} [{:.4f}, {:.4f}] ({:.0f} % bootstrap interval)", c.step_ratio->ratio,
                       c.step_ratio->low, c.step_ratio->high, c.step_ratio->level * 100);
  }
  out += "\n";
  if (c.u_test) {
    out += fmt::format("Mann-Whitney U: U_A {:.1f}, U_B {:.1f}, two-sided p {:.4g} ({})\n", c.u_test->u_a, c.u_test->u_b,
                       c.u_test->p_value, c.u_test->exact ? "exact" : "normal approximation");
  }
  out += fmt::format("tokens/s: A {}  B {}  ({}%)\n", fixed(c.a.median_tokens_per_s, 0), fixed(c.b.median_tokens_per_s, 0),
                     c.tokens_per_s_delta_pct ? fmt::format("{:+.2f} ", *c.tokens_per_s_delta_pct) : "- ");
  out += fmt::format("goodput: A {} %  B {} %  ({} points)\n", fixed(c.a.median_goodput_pct, 1),
                     fixed(c.b.median_goodput_pct, 1),
                     c.goodput_delta_points ? fmt::format("{:+.2f}", *c.goodput_delta_points) : "-");
  if (c.a.median_steady_goodput_pct || c.b.median_steady_goodput_pct) {
    auto fixed_cost = [](const Side& side) {
      return side.median_fixed_seconds ? fmt::format("{:.1f} s ({:.0f} % of wall)", *side.median_fixed_seconds,
                                                     *side.median_fixed_share * 100)
                                       : std::string("-");
    };
    out += fmt::format("steady goodput (start-up, data prep and warm-up set apart): A {} %  B {} %  ({} points); fixed "
                       "cost A {}  B {}\n",
                       fixed(c.a.median_steady_goodput_pct, 1), fixed(c.b.median_steady_goodput_pct, 1),
                       c.steady_goodput_delta_points ? fmt::format("{:+.2f}", *c.steady_goodput_delta_points) : "-",
                       fixed_cost(c.a), fixed_cost(c.b));
    for (const auto& [label, side] : {std::pair{'A', &c.a}, std::pair{'B', &c.b}})
      if (side->fixed_cost_dominates())
        out += fmt::format("NOTE: fixed cost is {:.0f} % of {}'s wall time: its goodput measures start-up, not "
                           "training; read the steady goodput\n",
                           *side->median_fixed_share * 100, label);
  }
  out += fmt::format("peak memory: A {}  B {}  ({})\n", gib(c.a.median_peak_memory_bytes), gib(c.b.median_peak_memory_bytes),
                     gib_delta(c.peak_memory_delta_bytes));
  if (c.a.median_gpu_needed_bytes || c.b.median_gpu_needed_bytes)  // CUDA runs recorded since it was
    out += fmt::format("gpu memory needed (reserved peak + beside the allocator): A {}  B {}  ({})\n",
                       gib(c.a.median_gpu_needed_bytes), gib(c.b.median_gpu_needed_bytes),
                       gib_delta(c.gpu_needed_delta_bytes));
  if (!c.family_times.empty()) {
    out += fmt::format("kernel time per step by family (profiled window; {} run(s) A, {} run(s) B):\n",
                       c.family_times.front().a_runs, c.family_times.front().b_runs);
    for (const auto& f : c.family_times) {
      const std::string delta = f.a_ms_per_step && f.b_ms_per_step
                                    ? fmt::format("{:+.3f} ms", *f.b_ms_per_step - *f.a_ms_per_step)
                                    : "-";
      out += fmt::format("  {:<15} A {:>9} ms  B {:>9} ms  ({})\n", f.family, fixed(f.a_ms_per_step, 3),
                         fixed(f.b_ms_per_step, 3), delta);
    }
  }
  out += fmt::format("verdict: B vs A step time: {}{}\n", to_string(c.verdict),
                     c.verdict == Difference::unreliable
                         ? fmt::format(" (needs >= {} evidence runs a side)", kMinRepeats)
                         : "");
  return out;
}

}  // namespace ablate::report
