// spec/spec.cpp: TOML -> ExperimentSpec. One binding table per section drives reading, range
// checks and the canonical JSON, so a field cannot be parsed without also being part of the identity.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include "spec/spec.h"
#include "spec/toml_types.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "kernels/catalog.h"
#include "base/near_miss.h"
#include "base/sha256.h"

namespace ablate::spec {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Field bindings: how one TOML key is read into the spec and written into the canonical JSON.
struct Binding {
  std::string key;
  std::string expected;  // "an integer", "a number", ... for type errors
  // Reads the node; returns an error message (type or range) or "".
  std::function<std::string(const toml::node&)> read;
  std::function<json()> write;
};

std::string type_name(const toml::node& n) { return toml_type_name(n); }

Binding int_field(std::string key, int64_t* p, int64_t lo, int64_t hi = INT64_MAX) {
  return {key, "an integer",
          [=](const toml::node& n) -> std::string {
            auto v = n.value_exact<int64_t>();
            if (!v) return fmt::format("expected an integer, got {}", type_name(n));
            if (*v < lo || *v > hi)
              return hi == INT64_MAX ? fmt::format("value {} is out of range: must be >= {}", *v, lo)
                                     : fmt::format("value {} is out of range: must be in [{}, {}]", *v, lo, hi);
            *p = *v;
            return "";
          },
          [=] { return json(*p); }};
}

// lo_open: the lower bound is exclusive (e.g. a learning rate must be > 0).
Binding float_field(std::string key, double* p, double lo, double hi, bool lo_open = false) {
  return {key, "a number",
          [=](const toml::node& n) -> std::string {
            std::optional<double> v;
            if (auto i = n.value_exact<int64_t>()) v = static_cast<double>(*i);
            if (auto f = n.value_exact<double>()) v = *f;
            if (!v) return fmt::format("expected a number, got {}", type_name(n));
            const bool below = lo_open ? !(*v > lo) : !(*v >= lo);
            if (below || !(*v <= hi))
              return fmt::format("value {} is out of range: must be {} {} and <= {}", *v, lo_open ? ">" : ">=", lo, hi);
            *p = *v;
            return "";
          },
          [=] { return json(*p); }};
}

Binding bool_field(std::string key, bool* p) {
  return {key, "a boolean",
          [=](const toml::node& n) -> std::string {
            auto v = n.value_exact<bool>();
            if (!v) return fmt::format("expected a boolean (true or false), got {}", type_name(n));
            *p = *v;
            return "";
          },
          [=] { return json(*p); }};
}

// allowed empty: any string.
Binding string_field(std::string key, std::string* p, std::vector<std::string> allowed = {}) {
  return {key, "a string",
          [=](const toml::node& n) -> std::string {
            auto v = n.value_exact<std::string>();
            if (!v) return fmt::format("expected a string, got {}", type_name(n));
            if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *v) == allowed.end())
              return fmt::format("\"{}\" is not one of: {}", *v, fmt::join(allowed, ", "));
            *p = *v;
            return "";
          },
          [=] { return json(*p); }};
}

// Why `text` cannot be printed as one line of a listing ("" when it can): a control character (a
// newline, ESC) would let a name or tag forge rows of `ablate runs` or move the terminal.
std::string control_character_error(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f)
      return fmt::format("contains the control character 0x{:02x} at byte {}: names and tags are one printable line",
                         static_cast<unsigned>(c), i + 1);
  }
  return "";
}

// experiment.name names the run's checkpoint folder (<store folder>/checkpoints/<name>): one path
// component, so no name can reach outside that folder.
Binding name_field(std::string key, std::string* p) {
  return {key, "a string",
          [=](const toml::node& n) -> std::string {
            auto v = n.value_exact<std::string>();
            if (!v) return fmt::format("expected a string, got {}", type_name(n));
            if (v->empty()) return "the name is empty: give the experiment a name (it names its checkpoint folder)";
            if (auto err = control_character_error(*v); !err.empty()) return err;
            if (v->find_first_of("/\\") != std::string::npos || *v == "." || *v == "..")
              return fmt::format("\"{}\" is not one path component: the name names the run's checkpoint folder, so it "
                                 "has no '/' or '\\' and is not '.' or '..'",
                                 *v);
            if (v->size() > 200) return fmt::format("the name is {} bytes long: at most 200 (it names a folder)", v->size());
            *p = *v;
            return "";
          },
          [=] { return json(*p); }};
}

// `printable`: every element one printable line (tags).
Binding string_list_field(std::string key, std::vector<std::string>* p, bool printable = false) {
  return {key, "an array of strings",
          [=](const toml::node& n) -> std::string {
            const auto* arr = n.as_array();
            if (!arr) return fmt::format("expected an array of strings, got {}", type_name(n));
            std::vector<std::string> out;
            for (size_t i = 0; i < arr->size(); ++i) {
              auto v = (*arr)[i].value_exact<std::string>();
              if (!v) return fmt::format("element {} must be a string, got {}", i + 1, type_name((*arr)[i]));
              if (printable)
                if (auto err = control_character_error(*v); !err.empty()) return fmt::format("element {} {}", i + 1, err);
              out.push_back(*v);
            }
            *p = std::move(out);
            return "";
          },
          [=] { return json(*p); }};
}

struct Section {
  std::string path;  // "train", "model.attention"
  std::vector<Binding> fields;
};

// The binding tables. `model.config` is special (it selects the named configuration first) and
// [backends] has one key per seam; both are handled in Parser.
std::vector<Section> sections(ExperimentSpec& s) {
  auto& m = s.model;
  constexpr double kInf = 1e300;
  // Step counts and positions: 2^40 steps is beyond any run, and sums of two (a profile window's end)
  // stay far from overflow.
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  return {
      {"experiment",
       {name_field("name", &s.experiment.name), string_field("description", &s.experiment.description),
        string_list_field("tags", &s.experiment.tags, /*printable=*/true), int_field("seed", &s.experiment.seed, 0)}},
      {"model",
       {string_field("pattern", &m.pattern), int_field("vocab", &m.vocab, 258, 1 << 20),
        int_field("d_model", &m.d_model, 1, 65536), int_field("seq_len", &m.seq_len, 1, 1 << 20),
        int_field("batch_size", &m.batch_size, 1, 1 << 20), float_field("norm_eps", &m.norm_eps, 0, 1, true),
        float_field("init_std", &m.init_std, 0, 10, true)}},
      {"model.attention",
       {int_field("heads", &m.attention.heads, 1, 1024), int_field("nope_dim", &m.attention.nope_dim, 0, 4096),
        int_field("rope_dim", &m.attention.rope_dim, 2, 4096), int_field("v_dim", &m.attention.v_dim, 1, 4096),
        int_field("q_lora", &m.attention.q_lora, 0, 65536), int_field("kv_lora", &m.attention.kv_lora, 1, 65536),
        float_field("rope_base", &m.attention.rope_base, 1, kInf, true)}},
      {"model.moe",
       {int_field("experts", &m.moe.experts, 1, 4096), int_field("top_k", &m.moe.top_k, 1, 4096),
        int_field("ffn", &m.moe.ffn, 1, 1 << 20), float_field("capacity_factor", &m.moe.capacity_factor, 0, 1e6),
        float_field("aux_coef", &m.moe.aux_coef, 0, 1e6)}},
      {"model.mamba",
       {int_field("expand", &m.mamba.expand, 1, 64), int_field("head_dim", &m.mamba.head_dim, 1, 4096),
        int_field("state", &m.mamba.state, 4, 4096), int_field("chunk", &m.mamba.chunk, 1, 4096),
        float_field("dt_min", &m.mamba.dt_min, 0, 10, true), float_field("dt_max", &m.mamba.dt_max, 0, 10, true),
        float_field("dt_floor", &m.mamba.dt_floor, 0, 10, true)}},
      {"model.recurrent",
       {int_field("width", &m.recurrent.width, 1, 1 << 20), int_field("conv_width", &m.recurrent.conv_width, 1, 64)}},
      {"model.dense", {int_field("ffn", &m.dense.ffn, 1, 1 << 20)}},
      {"data",
       {string_field("source", &s.data.source, {"corpus", "synthetic"}),
        string_field("corpus_dir", &s.data.corpus_dir), string_list_field("extensions", &s.data.extensions),
        int_field("max_bytes", &s.data.max_bytes, 0, int64_t{1} << 50), string_field("cache_dir", &s.data.cache_dir),
        string_field("synthetic_distribution", &s.data.synthetic_distribution, {"uniform", "zipf"}),
        float_field("zipf_exponent", &s.data.zipf_exponent, 0, 10, true),
        int_field("prefetch", &s.data.prefetch, 1, 1024),
        float_field("validation_fraction", &s.data.validation_fraction, 0, 0.5)}},
      {"train",
       {int_field("steps", &s.train.steps, 1, kMaxSteps), float_field("lr", &s.train.lr, 0, kInf, true),
        float_field("beta1", &s.train.beta1, 0, 1), float_field("beta2", &s.train.beta2, 0, 1),
        float_field("eps", &s.train.eps, 0, 1, true), float_field("weight_decay", &s.train.weight_decay, 0, kInf),
        int_field("lr_warmup_steps", &s.train.lr_warmup_steps, 0, kMaxSteps),
        float_field("min_lr_ratio", &s.train.min_lr_ratio, 0, 1), float_field("grad_clip", &s.train.grad_clip, 0, kInf),
        string_field("device", &s.train.device, {"auto", "cpu", "cuda"}),
        string_field("dtype", &s.train.dtype, {"auto", "fp32", "bf16"}),
        int_field("warmup_steps", &s.train.warmup_steps, 0, kMaxSteps),
        int_field("checkpoint_every", &s.train.checkpoint_every, 0, kMaxSteps),
        string_field("checkpoint_dir", &s.train.checkpoint_dir), bool_field("resume", &s.train.resume),
        int_field("keep_checkpoints", &s.train.keep_checkpoints, 0, 1 << 20),
        int_field("log_every", &s.train.log_every, 0, kMaxSteps),
        int_field("eval_every", &s.train.eval_every, 0, kMaxSteps),
        int_field("eval_tokens", &s.train.eval_tokens, 1, kMaxSteps),
        float_field("memory_limit_gib", &s.train.memory_limit_gib, 0, 1 << 20),
        bool_field("expandable_segments", &s.train.expandable_segments)}},
      {"compile",
       {bool_field("cuda_graphs", &s.compile.cuda_graphs), bool_field("launch_ahead", &s.compile.launch_ahead),
        bool_field("cudnn_benchmark", &s.compile.cudnn_benchmark), bool_field("tf32", &s.compile.tf32),
        bool_field("deterministic", &s.compile.deterministic)}},
      {"profile",
       {bool_field("enabled", &s.profile.enabled), int_field("start_step", &s.profile.start_step, 0, kMaxSteps),
        int_field("steps", &s.profile.steps, 1, kMaxSteps), string_field("trace_dir", &s.profile.trace_dir)}},
      {"distributed",
       {int_field("nproc", &s.distributed.nproc, 1, 4096), string_field("backend", &s.distributed.backend, {"nccl", "gloo"}),
        int_field("bucket_mb", &s.distributed.bucket_mb, 1, 4096),
        int_field("timeout_s", &s.distributed.timeout_s, 1, 86400),
        string_field("sharding", &s.distributed.sharding, {"none", "optimizer", "gradients", "full"}),
        string_field("reduce_dtype", &s.distributed.reduce_dtype, {"fp32", "bf16"}),
        string_field("param_dtype", &s.distributed.param_dtype, {"fp32", "bf16"}),
        int_field("expert_parallel", &s.distributed.expert_parallel, 1, 4096),
        int_field("expert_exchange_chunks", &s.distributed.expert_exchange_chunks, 1, 4096)}},
  };
}

std::string join_keys(const std::vector<std::string>& keys) { return fmt::format("{}", fmt::join(keys, ", ")); }


// ---------------------------------------------------------------------------------------------
class Parser {
 public:
  Parser(std::string source_name) : source_(std::move(source_name)) {}

  ExperimentSpec parse(const std::string& text, const std::vector<std::string>& overrides) {
    ExperimentSpec spec;
    spec.source_path = source_;
    spec.source_text = text;
    spec.overrides = overrides;
    for (const auto& seam : kernels::seams()) spec.backends.requested[seam] = "reference";

    auto result = toml::parse(std::string_view(text), std::string_view(source_));
    if (!result) {
      const auto& err = result.error();
      issue(err.source(), std::string(err.description()) + " (malformed TOML)");
      throw SpecError(issues_);
    }
    toml::table root = std::move(result).table();
    // A matrix file given where an experiment belongs: one error saying so, not one per section.
    if (root.contains("matrix") && !root.contains("experiment")) {
      issue(root["matrix"].node()->source(),
            fmt::format("this is an ablation matrix file ([matrix]), not an experiment: run it with `ablate matrix run {}` "
                        "(or list its cells with `ablate matrix expand {}`)",
                        source_, source_));
      throw SpecError(issues_);
    }
    override_count_ = overrides.size();
    for (size_t i = 0; i < overrides.size(); ++i) apply_override(root, overrides[i], i + 1);
    if (!issues_.empty()) throw SpecError(issues_);

    read_model_config(root, spec);
    auto secs = sections(spec);
    std::set<std::string> known_top = {"backends"};
    for (const auto& sec : secs) known_top.insert(sec.path.substr(0, sec.path.find('.')));

    for (auto&& [key, node] : root) {
      const std::string k(key.str());
      if (!known_top.count(k)) {
        const std::vector<std::string> known(known_top.begin(), known_top.end());
        issue(key.source(), fmt::format("unknown section [{}]{}: known sections are {}{}", k, base::did_you_mean(k, known),
                                        join_keys(known), set_blame(key.source(), k)), k);
        continue;
      }
      if (!node.is_table()) issue(node.source(), fmt::format("[{}] must be a table, got {}", k, type_name(node)));
    }
    for (auto& sec : secs) read_section(root, sec, secs, spec.given_keys);
    read_backends(root, spec);
    if (issues_.empty()) cross_check(root, spec);
    if (!issues_.empty()) throw SpecError(issues_);
    return spec;
  }

 private:
  std::string source_;
  std::vector<SpecIssue> issues_;
  // Which --set argument put a key in the tree: its label ("--set a.b=c") and its 1-based position.
  struct OverrideOrigin {
    std::string label;
    size_t position = 0;
  };
  std::map<std::string, OverrideOrigin> override_origins_;  // dotted key -> the last --set of it
  size_t override_count_ = 0;

  // The --set that set `dotted`, or for a node that is not in the file (a table a --set created, such
  // as [nosuch] for --set nosuch.key=1) the first --set below it.
  const OverrideOrigin* origin_of(const toml::source_region& r, const std::string& dotted) const {
    if (dotted.empty()) return nullptr;
    if (auto it = override_origins_.find(dotted); it != override_origins_.end()) return &it->second;
    if (r.begin.line != 0) return nullptr;
    const OverrideOrigin* first = nullptr;
    for (const auto& [key, origin] : override_origins_)
      if (key.rfind(dotted + ".", 0) == 0 && (!first || origin.position < first->position)) first = &origin;
    return first;
  }
  std::string where(const toml::source_region& r, const std::string& dotted = "") const {
    if (const auto* o = origin_of(r, dotted)) return o->label;
    if (r.begin.line == 0) return source_;
    return fmt::format("{}:{}:{}", source_, r.begin.line, r.begin.column);
  }
  // For a section or key that only a --set brought in: which argument, so the file is not blamed.
  std::string set_blame(const toml::source_region& r, const std::string& dotted) const {
    if (r.begin.line != 0) return "";
    const auto* o = origin_of(r, dotted);
    if (!o) return "";
    return fmt::format(" (it comes from --set argument {} of {}, '{}', not from {}: fix or drop that --set)",
                       o->position, override_count_, o->label.substr(6), source_);
  }
  void issue(const toml::source_region& r, std::string msg, const std::string& dotted = "") {
    issues_.push_back({where(r, dotted), std::move(msg)});
  }

  // "--set model.attention.heads=8": the value is parsed as TOML, else taken as a string.
  void apply_override(toml::table& root, const std::string& o, size_t position) {
    const std::string label = "--set " + o;
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      issues_.push_back({label, "expected section.key=value (for example --set train.steps=20)"});
      return;
    }
    const std::string dotted = o.substr(0, eq), value = o.substr(eq + 1);
    std::vector<std::string> parts;
    std::stringstream ss(dotted);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    if (parts.size() < 2 || std::any_of(parts.begin(), parts.end(), [](auto& p) { return p.empty(); })) {
      issues_.push_back({label, fmt::format("'{}' is not a section.key path (for example train.steps)", dotted)});
      return;
    }
    toml::table* t = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto* next = t->get(parts[i]);
      if (!next) next = t->insert(parts[i], toml::table{}).first->second.as_table();
      if (!next->is_table()) {
        issues_.push_back({label, fmt::format("'{}' is not a section", parts[i])});
        return;
      }
      t = next->as_table();
    }
    auto parsed = toml::parse(std::string_view("v = " + value), std::string_view("--set"));
    if (parsed && parsed.table().size() == 1) {
      t->insert_or_assign(parts.back(), std::move(*parsed.table().get("v")));
    } else {
      t->insert_or_assign(parts.back(), value);
    }
    override_origins_[dotted] = {label, position};
  }

  void read_model_config(const toml::table& root, ExperimentSpec& spec) {
    const auto* model = root.get_as<toml::table>("model");
    const toml::node* name_node = model ? model->get("config") : nullptr;
    std::string name = "tiny";
    if (name_node) {
      auto v = name_node->value_exact<std::string>();
      if (!v) {
        issue(name_node->source(), fmt::format("model.config: expected a string, got {}", type_name(*name_node)), "model.config");
        return;
      }
      name = *v;
    }
    auto cfg = model::named_config(name);
    if (!cfg) {
      issue(name_node->source(), fmt::format("model.config: unknown named configuration \"{}\": known are {}", name,
                                             join_keys(model::named_config_names())), "model.config");
      return;
    }
    spec.model = *cfg;
  }

  void read_section(const toml::table& root, Section& sec, const std::vector<Section>& all, std::set<std::string>& given) {
    const toml::node* node = root.at_path(sec.path).node();
    if (!node || !node->is_table()) return;
    const auto& tbl = *node->as_table();
    std::vector<std::string> known;
    for (const auto& f : sec.fields) known.push_back(f.key);
    if (sec.path == "model") known.push_back("config");
    for (const auto& other : all)  // sub-tables such as [model.attention]
      if (other.path.rfind(sec.path + ".", 0) == 0) known.push_back(other.path.substr(sec.path.size() + 1));

    for (auto&& [key, value] : tbl) {
      const std::string k(key.str()), dotted = sec.path + "." + k;
      auto f = std::find_if(sec.fields.begin(), sec.fields.end(), [&](const Binding& b) { return b.key == k; });
      if (f == sec.fields.end()) {
        const bool subtable = std::any_of(all.begin(), all.end(), [&](const Section& o) { return o.path == dotted; });
        if (subtable && !value.is_table())
          issue(value.source(), fmt::format("{} must be a table ([{}] with its keys), got {}", dotted, dotted, type_name(value)),
                dotted);
        else if (std::find(known.begin(), known.end(), k) == known.end())
          issue(key.source(), fmt::format("unknown key '{}' in [{}]{}: known keys are {}{}", k, sec.path, base::did_you_mean(k, known),
                                          join_keys(known), set_blame(key.source(), dotted)), dotted);
        continue;
      }
      if (auto err = f->read(value); !err.empty()) issue(value.source(), fmt::format("{}: {}", dotted, err), dotted);
      given.insert(dotted);
    }
  }

  void read_backends(const toml::table& root, ExperimentSpec& spec) {
    const auto* tbl = root.get_as<toml::table>("backends");
    if (!tbl) return;
    for (auto&& [key, value] : *tbl) {
      const std::string seam(key.str()), dotted = "backends." + seam;
      if (seam == "strict") {
        if (auto err = bool_field("strict", &spec.backends.strict).read(value); !err.empty())
          issue(value.source(), "backends.strict: " + err, dotted);
        continue;
      }
      const auto& seams = kernels::seams();
      if (std::find(seams.begin(), seams.end(), seam) == seams.end()) {
        issue(key.source(), fmt::format("unknown seam '{}' in [backends]{}: known seams are {} (and strict)", seam, base::did_you_mean(seam, seams), join_keys(seams)), dotted);
        continue;
      }
      auto v = value.value_exact<std::string>();
      if (!v) {
        issue(value.source(), fmt::format("{}: expected a backend name (a string), got {}", dotted, type_name(value)), dotted);
        continue;
      }
      if (!kernels::find_backend(seam, *v)) {
        issue(value.source(), fmt::format("{}: unknown backend \"{}\": the {} seam has {}", dotted, *v, seam,
                                          join_keys(kernels::backend_names(seam))), dotted);
        continue;
      }
      spec.backends.requested[seam] = *v;
    }
  }

  // Constraints across fields. Each message starts with the dotted key it concerns; the error is
  // placed at that key when the file has it, else at its section, else at the file.
  void cross_check(const toml::table& root, ExperimentSpec& spec) {
    std::vector<std::string> errs = model::config_errors(spec.model);
    if (spec.profile.enabled && spec.profile.start_step + spec.profile.steps > spec.train.steps)
      errs.push_back(fmt::format("profile.start_step: the profile window [{}, {}) ends after train.steps = {}: lower "
                                 "profile.start_step or raise train.steps",
                                 spec.profile.start_step, spec.profile.start_step + spec.profile.steps, spec.train.steps));
    if (spec.train.warmup_steps >= spec.train.steps)
      errs.push_back(fmt::format("train.warmup_steps = {} leaves no steady-state steps of train.steps = {}: lower it",
                                 spec.train.warmup_steps, spec.train.steps));
    if (spec.distributed.sharding != "none" && spec.distributed.nproc < 2)
      errs.push_back(fmt::format("distributed.sharding = \"{}\" shards over ranks and distributed.nproc = {} is one: set "
                                 "distributed.nproc >= 2 or distributed.sharding = \"none\"",
                                 spec.distributed.sharding, spec.distributed.nproc));
    if (spec.distributed.reduce_dtype != "fp32" && spec.distributed.sharding == "none")
      errs.push_back(fmt::format("distributed.reduce_dtype = \"{}\" needs a sharded stage: under distributed.sharding = "
                                 "\"none\" every parameter keeps its whole fp32 gradient; set distributed.sharding = "
                                 "\"optimizer\" (or \"gradients\", \"full\") or distributed.reduce_dtype = \"fp32\"",
                                 spec.distributed.reduce_dtype));
    if (spec.distributed.param_dtype != "fp32" && spec.distributed.sharding == "none")
      errs.push_back(fmt::format("distributed.param_dtype = \"{}\" needs a sharded stage: under distributed.sharding = "
                                 "\"none\" every parameter is its own fp32 master; set distributed.sharding = "
                                 "\"optimizer\" (or \"gradients\", \"full\") or distributed.param_dtype = \"fp32\"",
                                 spec.distributed.param_dtype));
    if (spec.train.memory_limit_gib > 0 && spec.train.device == "cpu")
      errs.push_back(fmt::format("train.memory_limit_gib = {} caps a GPU's memory and train.device = \"cpu\": set "
                                 "train.device = \"cuda\" (or \"auto\" on a GPU machine) or train.memory_limit_gib = 0",
                                 spec.train.memory_limit_gib));
    if (spec.train.expandable_segments && spec.train.device == "cpu")
      errs.push_back("train.expandable_segments = true sets the CUDA caching allocator and train.device = \"cpu\": set "
                     "train.device = \"cuda\" (or \"auto\" on a GPU machine) or train.expandable_segments = false");
    if (spec.distributed.param_dtype == "bf16" && spec.train.dtype == "fp32")
      errs.push_back("distributed.param_dtype = \"bf16\" keeps the GEMM weights in bf16, which only bf16 autocast "
                     "computes with unchanged: set train.dtype = \"bf16\" (or \"auto\" on CUDA) or "
                     "distributed.param_dtype = \"fp32\"");
    if (const int64_t ep = spec.distributed.expert_parallel; ep > 1) {
      if (spec.distributed.nproc % ep != 0)
        errs.push_back(fmt::format("distributed.expert_parallel = {} does not divide distributed.nproc = {}: each "
                                   "group of {} ranks shares one copy of the experts; choose a divisor of the ranks",
                                   ep, spec.distributed.nproc, ep));
      if (spec.model.pattern.find('E') == std::string::npos)
        errs.push_back(fmt::format("distributed.expert_parallel = {}: the pattern \"{}\" has no E layer, so there are "
                                   "no experts to spread; set distributed.expert_parallel = 1",
                                   ep, spec.model.pattern));
      else if (spec.model.moe.experts % ep != 0)
        errs.push_back(fmt::format("distributed.expert_parallel = {} does not divide model.moe.experts = {}: every rank "
                                   "of an expert group holds the same number of experts",
                                   ep, spec.model.moe.experts));
    }
    if (const int64_t chunks = spec.distributed.expert_exchange_chunks; chunks > 1) {
      const int64_t ep = spec.distributed.expert_parallel;
      if (ep <= 1)
        errs.push_back(fmt::format("distributed.expert_exchange_chunks = {} pipelines expert parallelism's exchange, "
                                   "and this run has distributed.expert_parallel = 1: set distributed.expert_parallel "
                                   "> 1 or distributed.expert_exchange_chunks = 1",
                                   chunks));
      else if (spec.model.moe.experts % ep == 0 && chunks > spec.model.moe.experts / ep)
        errs.push_back(fmt::format("distributed.expert_exchange_chunks = {} exceeds the {} experts a rank holds "
                                   "(model.moe.experts {} / distributed.expert_parallel {}): a chunk holds at least "
                                   "one expert",
                                   chunks, spec.model.moe.experts / ep, spec.model.moe.experts, ep));
    }
    if (spec.train.eval_every > 0 && spec.data.validation_fraction <= 0)
      errs.push_back(fmt::format("train.eval_every = {} evaluates on held-out data and data.validation_fraction is 0: "
                                 "hold some out (0.05 is usual) or set train.eval_every = 0",
                                 spec.train.eval_every));
    if (spec.data.source == "corpus" && spec.data.corpus_dir.empty())
      errs.push_back("data.corpus_dir is empty: name a folder of C/C++ sources");
    for (const auto& e : errs) {
      const std::string key = e.substr(0, e.find_first_of(" :"));
      std::string dotted = key;
      const toml::node* n = root.at_path(dotted).node();
      while (!n && dotted.find('.') != std::string::npos) {  // fall back to the enclosing section
        dotted = dotted.substr(0, dotted.rfind('.'));
        n = root.at_path(dotted).node();
      }
      // A constraint across keys placed in the file may fail because of a --set of its section: say which.
      std::vector<std::string> sets_here;
      const std::string section = key.substr(0, key.find('.')) + ".";
      for (const auto& [set_key, origin] : override_origins_)
        if (set_key.rfind(section, 0) == 0) sets_here.push_back(origin.label);
      const std::string at = where(n ? n->source() : toml::source_region{}, key);
      issues_.push_back(
          {at, sets_here.empty() || at.starts_with("--set ") ? e : fmt::format("{} (with {})", e, fmt::join(sets_here, ", "))});
    }
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError({{path, "cannot open the experiment file: check the path"}});
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A file that declares nothing (0 bytes, or only comments and whitespace) is refused: running the
// built-in defaults in its place would record a run of an experiment nobody declared (a truncated
// copy, a wrong path that exists) under the file's name. Malformed TOML is left to the parser.
void refuse_empty_file(const std::string& path, const std::string& text) {
  auto parsed = toml::parse(std::string_view(text), std::string_view(path));
  if (!parsed || !parsed.table().empty()) return;
  const std::string what = text.empty() ? "the experiment file is empty (0 bytes)"
                                        : "the experiment file declares nothing (only comments and whitespace)";
  throw SpecError({{path, what + ": an experiment file must declare the experiment, and ablate does not run its "
                                 "built-in defaults in place of an empty file; write at least [experiment] name = "
                                 "\"...\" and [model] config = \"tiny\" (experiments/tiny.toml spells out every key), "
                                 "or give no file to `ablate run` to run the embedded defaults"}});
}

std::string format_issues(const std::vector<SpecIssue>& issues) {
  std::string s;
  for (const auto& i : issues) s += (s.empty() ? "" : "\n") + i.str();
  return s;
}

}  // namespace

SpecError::SpecError(std::vector<SpecIssue> issues) : std::runtime_error(format_issues(issues)), issues_(std::move(issues)) {}

ExperimentSpec parse_spec_string(const std::string& text, const std::string& source_name,
                                 const std::vector<std::string>& overrides) {
  return Parser(source_name).parse(text, overrides);
}

ExperimentSpec parse_spec_file(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_file(path);
  refuse_empty_file(path, text);
  return parse_spec_string(text, path, overrides);
}

bool ExperimentSpec::model_overridden() const {
  return std::any_of(overrides.begin(), overrides.end(), [](const std::string& o) { return o.rfind("model.", 0) == 0; });
}

ExperimentSpec default_spec(bool gpu, const std::vector<std::string>& overrides) {
  // On a GPU, attention asks for flash attention (it falls back, recorded, where unavailable): the
  // reference attention materialises T x T scores per head.
  const std::string text = gpu ? "[experiment]\nname = \"default-nam56r-small\"\n[model]\nconfig = \"nam56r-small\"\n"
                                 "[train]\nsteps = 100\nwarmup_steps = 10\n[backends]\nattention = \"sdpa_flash\"\n"
                               : "[experiment]\nname = \"default-tiny\"\n[model]\nconfig = \"tiny\"\n"
                                 "[data]\nmax_bytes = 4000000\n[train]\nsteps = 100\nlr_warmup_steps = 10\n"
                                 "warmup_steps = 5\nlr = 3e-3\n";
  return parse_spec_string(text, "<embedded defaults>", overrides);
}

nlohmann::json canonical_json(const ExperimentSpec& spec_in) {
  ExperimentSpec spec = spec_in;  // bindings hold pointers; write from a private copy
  json j = json::object();
  j["model"]["config"] = spec.model.name;
  for (auto& sec : sections(spec)) {
    std::string p = "/" + sec.path;
    std::replace(p.begin(), p.end(), '.', '/');
    for (auto& f : sec.fields) j[json::json_pointer(p + "/" + f.key)] = f.write();
  }
  for (const auto& [seam, name] : spec.backends.requested) j["backends"][seam] = name;
  j["backends"]["strict"] = spec.backends.strict;
  // Fields added after receipts existed join the identity only off their default, so an unchanged
  // experiment file keeps its spec hash across versions.
  if (spec.distributed.timeout_s == DistributedSection{}.timeout_s) j["distributed"].erase("timeout_s");
  if (spec.distributed.sharding == DistributedSection{}.sharding) j["distributed"].erase("sharding");
  if (spec.distributed.expert_parallel == DistributedSection{}.expert_parallel) j["distributed"].erase("expert_parallel");
  if (spec.distributed.expert_exchange_chunks == DistributedSection{}.expert_exchange_chunks)
    j["distributed"].erase("expert_exchange_chunks");
  if (spec.distributed.reduce_dtype == DistributedSection{}.reduce_dtype) j["distributed"].erase("reduce_dtype");
  if (spec.distributed.param_dtype == DistributedSection{}.param_dtype) j["distributed"].erase("param_dtype");
  if (spec.train.keep_checkpoints == TrainSection{}.keep_checkpoints) j["train"].erase("keep_checkpoints");
  if (spec.train.eval_every == TrainSection{}.eval_every) j["train"].erase("eval_every");
  if (spec.train.eval_tokens == TrainSection{}.eval_tokens) j["train"].erase("eval_tokens");
  if (spec.train.memory_limit_gib == TrainSection{}.memory_limit_gib) j["train"].erase("memory_limit_gib");
  if (spec.train.expandable_segments == TrainSection{}.expandable_segments) j["train"].erase("expandable_segments");
  if (spec.data.validation_fraction == DataSection{}.validation_fraction) j["data"].erase("validation_fraction");
  if (spec.compile.launch_ahead == CompileSection{}.launch_ahead) j["compile"].erase("launch_ahead");
  return j;
}

std::string spec_hash(const ExperimentSpec& spec) { return base::sha256_hex(canonical_json(spec).dump()); }

std::string model_hash(const ExperimentSpec& spec) { return base::sha256_hex(canonical_json(spec)["model"].dump()); }

}  // namespace ablate::spec
