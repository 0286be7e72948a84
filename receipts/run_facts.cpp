// receipts/run_facts.cpp: see run_facts.h. Writers emit every field (unknown as null); readers take
// absent and null alike as unknown and refuse a wrong type with the key's path.
#include "receipts/run_facts.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "receipts/errors.h"

namespace ablate::receipts {
namespace {

using nlohmann::json;

template <typename T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Reads the members of one JSON object, remembering which keys were read.
class Reader {
 public:
  Reader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object() && !object_.is_null())
      throw StoreError(fmt::format("{}: expected a JSON object, got {}", path_, object_.type_name()));
  }

  const json* find(const char* key) {
    read_.insert(key);
    if (!object_.is_object()) return nullptr;
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string where(const char* key) const { return fmt::format("{}.{}", path_, key); }

  std::optional<double> number(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw wrong(key, "a number", *v);
    return v->get<double>();
  }
  std::optional<std::int64_t> integer(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) return v->get<std::int64_t>();
    // Written from a double (e.g. a count that went through arithmetic): whole numbers only.
    if (v->is_number_float() && v->get<double>() == static_cast<double>(static_cast<std::int64_t>(v->get<double>())))
      return static_cast<std::int64_t>(v->get<double>());
    throw wrong(key, "an integer", *v);
  }
  std::optional<std::string> text(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw wrong(key, "a string", *v);
    return v->get<std::string>();
  }
  std::string text_or_empty(const char* key) { return text(key).value_or(""); }
  std::optional<bool> flag(const char* key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw wrong(key, "true or false", *v);
    return v->get<bool>();
  }
  std::vector<std::int64_t> integers(const char* key) {
    return list<std::int64_t>(key, "an array of integers", [](const json& e) { return e.is_number_integer(); });
  }
  std::vector<std::string> texts(const char* key) {
    return list<std::string>(key, "an array of strings", [](const json& e) { return e.is_string(); });
  }
  // A nested object: null when absent.
  const json& section(const char* key) {
    static const json null_value;
    const json* v = find(key);
    if (!v) return null_value;
    if (!v->is_object()) throw wrong(key, "an object", *v);
    return *v;
  }
  const json& array(const char* key) {
    static const json empty = json::array();
    const json* v = find(key);
    if (!v) return empty;
    if (!v->is_array()) throw wrong(key, "an array", *v);
    return *v;
  }
  const json& raw(const char* key) {
    static const json null_value;
    const json* v = find(key);
    return v ? *v : null_value;
  }
  // The members no reader asked for.
  json unread() const {
    json out = json::object();
    if (!object_.is_object()) return out;
    for (const auto& [k, v] : object_.items())
      if (!read_.contains(k)) out[k] = v;
    return out;
  }
  const std::string& path() const { return path_; }

 private:
  template <typename T, typename Accepts>
  std::vector<T> list(const char* key, const char* expected, Accepts accepts) {
    std::vector<T> out;
    const json* v = find(key);
    if (!v) return out;
    if (!v->is_array()) throw wrong(key, expected, *v);
    for (const auto& e : *v) {
      if (!accepts(e)) throw wrong(key, expected, *v);
      out.push_back(e.get<T>());
    }
    return out;
  }
  StoreError wrong(const char* key, const char* expected, const json& v) const {
    return StoreError(fmt::format("{}: expected {}, got {} ({})", where(key), expected, v.type_name(), v.dump()));
  }
  const json& object_;
  std::string path_;
  std::set<std::string> read_;
};

json capture_json(const CaptureFacts& c) {
  return {{"requested", c.requested},
          {"eligible", c.eligible},
          {"achieved", c.achieved},
          {"outcome", to_string(c.outcome)},
          {"capture_step", or_null(c.capture_step)},
          {"capture_ms", or_null(c.capture_ms)},
          {"reason", c.reason}};
}

CaptureFacts capture_from(Reader& r) {
  CaptureFacts c;
  c.requested = r.flag("requested").value_or(false);
  c.eligible = r.flag("eligible").value_or(false);
  c.achieved = r.flag("achieved").value_or(false);
  c.capture_step = r.integer("capture_step");
  c.capture_ms = r.number("capture_ms");
  c.reason = r.text_or_empty("reason");
  if (const auto outcome = r.text("outcome")) {
    c.outcome = parse_capture_outcome(*outcome);
  } else {
    // Receipts written before the outcome was typed: what the flags and the reason's form say.
    c.outcome = c.achieved                             ? CaptureOutcome::captured
                : !c.requested                         ? CaptureOutcome::not_requested
                : c.reason.rfind("capture failed", 0) == 0 ? CaptureOutcome::failed
                : c.eligible                           ? CaptureOutcome::not_reached
                                                       : CaptureOutcome::refused;
  }
  if (c.achieved != (c.outcome == CaptureOutcome::captured))
    throw StoreError(fmt::format("{}: achieved = {} contradicts outcome {}", r.path(), c.achieved, to_string(c.outcome)));
  return c;
}

json moe_json(const MoeFacts& m) {
  return {{"e_layers", m.e_layers},         {"top_k", m.top_k},
          {"capacity_factor", m.capacity_factor}, {"dropped_slots", m.dropped_slots},
          {"routed_slots", m.routed_slots}, {"drop_rate", or_null(m.drop_rate)},
          {"final_aux_loss", or_null(m.final_aux_loss)}};
}

MoeFacts moe_from(Reader& r) {
  MoeFacts m;
  m.e_layers = r.integer("e_layers").value_or(0);
  m.top_k = r.integer("top_k").value_or(0);
  m.capacity_factor = r.number("capacity_factor").value_or(0);
  m.dropped_slots = r.integer("dropped_slots").value_or(0);
  m.routed_slots = r.integer("routed_slots").value_or(0);
  m.drop_rate = r.number("drop_rate");
  m.final_aux_loss = r.number("final_aux_loss");
  return m;
}

// ShardingFacts' integer fields by key, written and read by the same list; a key absent from an older
// receipt reads as the field's default.
constexpr std::pair<const char*, std::int64_t ShardingFacts::*> kShardingCounts[] = {
    {"buckets", &ShardingFacts::buckets},
    {"shard_elements", &ShardingFacts::shard_elements},
    {"padding_elements", &ShardingFacts::padding_elements},
    {"optimizer_state_bytes", &ShardingFacts::optimizer_state_bytes},
    {"gradient_bytes", &ShardingFacts::gradient_bytes},
    {"staging_peak_bytes", &ShardingFacts::staging_peak_bytes},
    {"all_reduce_bytes", &ShardingFacts::all_reduce_bytes},
    {"reduce_scatter_bytes", &ShardingFacts::reduce_scatter_bytes},
    {"all_gather_bytes", &ShardingFacts::all_gather_bytes},
    {"parameter_bytes", &ShardingFacts::parameter_bytes},
    {"expert_parallel", &ShardingFacts::expert_parallel},
    {"all_to_all_bytes", &ShardingFacts::all_to_all_bytes},
    {"expert_exchange_chunks", &ShardingFacts::expert_exchange_chunks}};

json sharding_json(const std::optional<ShardingFacts>& s) {
  if (!s) return nullptr;
  json j = {{"stage", s->stage}, {"reduce_dtype", s->reduce_dtype}, {"param_dtype", s->param_dtype}};
  for (const auto& [key, field] : kShardingCounts) j[key] = (*s).*field;
  return j;
}

std::optional<ShardingFacts> sharding_from(Reader& parent) {
  const json& section = parent.section("sharding");
  if (section.is_null()) return std::nullopt;
  Reader r(section, parent.where("sharding"));
  ShardingFacts s;
  s.stage = r.text_or_empty("stage");
  if (const auto dtype = r.text_or_empty("reduce_dtype"); !dtype.empty()) s.reduce_dtype = dtype;
  if (const auto dtype = r.text_or_empty("param_dtype"); !dtype.empty()) s.param_dtype = dtype;
  for (const auto& [key, field] : kShardingCounts) s.*field = r.integer(key).value_or(s.*field);
  return s;
}

CollectiveShares collective_shares_from(Reader& parent, const char* key) {
  CollectiveShares c;
  const json& section = parent.section(key);
  if (section.is_null()) return c;
  Reader r(section, parent.where(key));
  for (const auto& [kind, field] : kCollectiveShares) c.*field = r.number(kind);
  return c;
}

json distributed_json(const DistributedFacts& d) {
  json ranks = json::array();
  for (const auto& r : d.per_rank)
    ranks.push_back({{"rank", r.rank},
                     {"median_step_ms", or_null(r.median_step_ms)},
                     {"median_comm_ms", or_null(r.median_comm_ms)},
                     {"median_comm_wait_ms", or_null(r.median_comm_wait_ms)},
                     {"collective_wait_ms", or_null(r.collective_wait_ms)},
                     {"peak_memory_bytes", r.peak_memory_bytes},
                     {"peak_reserved_bytes", or_null(r.peak_reserved_bytes)},
                     {"outside_allocator_bytes", or_null(r.outside_allocator_bytes)},
                     {"median_all_reduce_ms", or_null(r.median_all_reduce_ms)},
                     {"median_reduce_scatter_ms", or_null(r.median_reduce_scatter_ms)},
                     {"median_all_gather_ms", or_null(r.median_all_gather_ms)},
                     {"median_all_to_all_ms", or_null(r.median_all_to_all_ms)},
                     {"exposed_comm_share", or_null(r.exposed_comm_share)},
                     {"exposed_by_collective", receipts::to_json(r.exposed_by_collective)}});
  return {{"world_size", d.world_size},
          {"backend", d.backend},
          {"launcher", d.launcher},
          {"per_rank", ranks},
          {"straggler_ratio", or_null(d.step_time_ratio)},
          {"straggler_rank", or_null(d.straggler_rank)},
          {"straggler_wait_share", or_null(d.straggler_wait_share)},
          {"comm_share", or_null(d.comm_share)},
          {"comm_wait_share", or_null(d.comm_wait_share)},
          {"exposed_comm_share", or_null(d.exposed_comm_share)},
          {"exposed_by_collective", receipts::to_json(d.exposed_by_collective)},
          {"sharding", sharding_json(d.sharding)}};
}

DistributedFacts distributed_from(Reader& r) {
  DistributedFacts d;
  d.world_size = r.integer("world_size").value_or(1);
  d.backend = r.text_or_empty("backend");
  d.launcher = r.text_or_empty("launcher");
  const json& ranks = r.array("per_rank");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    Reader rr(ranks[i], fmt::format("{}.per_rank[{}]", r.path(), i));
    RankFacts f;
    f.rank = rr.integer("rank").value_or(static_cast<std::int64_t>(i));
    f.median_step_ms = rr.number("median_step_ms");
    f.median_comm_ms = rr.number("median_comm_ms");
    f.median_comm_wait_ms = rr.number("median_comm_wait_ms");
    f.collective_wait_ms = rr.number("collective_wait_ms");
    f.peak_memory_bytes = rr.integer("peak_memory_bytes").value_or(0);
    f.peak_reserved_bytes = rr.integer("peak_reserved_bytes");
    f.outside_allocator_bytes = rr.integer("outside_allocator_bytes");
    f.median_all_reduce_ms = rr.number("median_all_reduce_ms");
    f.median_reduce_scatter_ms = rr.number("median_reduce_scatter_ms");
    f.median_all_gather_ms = rr.number("median_all_gather_ms");
    f.median_all_to_all_ms = rr.number("median_all_to_all_ms");
    f.exposed_comm_share = rr.number("exposed_comm_share");
    f.exposed_by_collective = collective_shares_from(rr, "exposed_by_collective");
    d.per_rank.push_back(f);
  }
  d.step_time_ratio = r.number("straggler_ratio");
  d.straggler_rank = r.integer("straggler_rank");
  d.straggler_wait_share = r.number("straggler_wait_share");
  d.comm_share = r.number("comm_share");
  d.comm_wait_share = r.number("comm_wait_share");
  d.exposed_comm_share = r.number("exposed_comm_share");
  d.exposed_by_collective = collective_shares_from(r, "exposed_by_collective");
  d.sharding = sharding_from(r);
  return d;
}

json profile_json(const ProfileFacts& p) {
  json mismatches = json::array();
  for (const auto& m : p.backend_mismatches)
    mismatches.push_back({{"seam", m.seam}, {"chosen", m.chosen}, {"observed", m.observed}, {"note", m.note}});
  json window = nullptr;
  if (p.window_start && p.window_end) window = json::array({*p.window_start, *p.window_end});
  return {{"status", p.status},
          {"reason", p.reason},
          {"trace", or_null(p.trace)},
          {"records", or_null(p.records)},
          {"dropped_records", or_null(p.dropped_records)},
          {"flush_s", or_null(p.flush_s)},
          {"unmatched_scope_pops", or_null(p.unmatched_scope_pops)},
          {"cupti_detached_after_window", or_null(p.cupti_detached_after_window)},
          {"backend_mismatches", mismatches},
          {"graph_node_tags", or_null(p.graph_node_tags)},
          {"graph_nodes_tagged", or_null(p.graph_nodes_tagged)},
          {"memory_by_phase", p.memory_by_phase},
          {"window", window},
          {"median_step_ms_inside_window", or_null(p.median_step_ms_inside_window)},
          {"median_step_ms_outside_window", or_null(p.median_step_ms_outside_window)},
          {"median_step_ms_around_window", or_null(p.median_step_ms_around_window)},
          {"overhead_pct", or_null(p.overhead_pct)},
          {"overhead_baseline", p.overhead_baseline}};
}

ProfileFacts profile_from(Reader& r) {
  ProfileFacts p;
  p.status = r.text_or_empty("status");
  p.reason = r.text_or_empty("reason");
  p.trace = r.text("trace");
  p.records = r.integer("records");
  p.dropped_records = r.integer("dropped_records");
  p.flush_s = r.number("flush_s");
  p.unmatched_scope_pops = r.integer("unmatched_scope_pops");
  p.cupti_detached_after_window = r.text("cupti_detached_after_window");
  const json& mismatches = r.array("backend_mismatches");
  for (std::size_t i = 0; i < mismatches.size(); ++i) {
    Reader m(mismatches[i], fmt::format("{}.backend_mismatches[{}]", r.path(), i));
    p.backend_mismatches.push_back(
        {m.text_or_empty("seam"), m.text_or_empty("chosen"), m.text_or_empty("observed"), m.text_or_empty("note")});
  }
  p.graph_node_tags = r.text("graph_node_tags");
  p.graph_nodes_tagged = r.integer("graph_nodes_tagged");
  p.memory_by_phase = r.text_or_empty("memory_by_phase");
  const json& window = r.array("window");
  if (window.size() == 2 && window[0].is_number_integer() && window[1].is_number_integer()) {
    p.window_start = window[0].get<std::int64_t>();
    p.window_end = window[1].get<std::int64_t>();
  } else if (!window.empty()) {
    throw StoreError(fmt::format("{}: expected [start, end] steps, got {}", r.where("window"), window.dump()));
  }
  p.median_step_ms_inside_window = r.number("median_step_ms_inside_window");
  p.median_step_ms_outside_window = r.number("median_step_ms_outside_window");
  p.median_step_ms_around_window = r.number("median_step_ms_around_window");
  p.overhead_pct = r.number("overhead_pct");
  p.overhead_baseline = r.text_or_empty("overhead_baseline");
  return p;
}

json model_json(const ModelFacts& m) {
  return {{"config", m.config},
          {"overrides", m.overrides},
          {"config_overridden", m.config_overridden},
          {"pattern", m.pattern},
          {"d_model", m.d_model},
          {"layers", m.layers},
          {"seq_len", m.seq_len},
          {"batch_size", m.batch_size},
          {"parameters", or_null(m.parameters)},
          {"active_parameters", or_null(m.active_parameters)},
          {"training_flops_per_token", or_null(m.training_flops_per_token)}};
}

ModelFacts model_from(Reader& r) {
  ModelFacts m;
  m.config = r.text_or_empty("config");
  m.overrides = r.texts("overrides");
  m.config_overridden = r.flag("config_overridden").value_or(false);
  m.pattern = r.text_or_empty("pattern");
  m.d_model = r.integer("d_model").value_or(0);
  m.layers = r.integer("layers").value_or(0);
  m.seq_len = r.integer("seq_len").value_or(0);
  m.batch_size = r.integer("batch_size").value_or(0);
  m.parameters = r.integer("parameters");
  m.active_parameters = r.integer("active_parameters");
  m.training_flops_per_token = r.number("training_flops_per_token");
  return m;
}

json precision_json(const PrecisionFacts& p) {
  return {{"dtype", p.dtype},
          {"flops_version", p.flops_version},
          {"mfu_peak_flops", or_null(p.mfu_peak_flops)},
          {"mfu_peak_source", p.mfu_peak_source},
          {"fp8_flops_per_token", or_null(p.fp8_flops_per_token)},
          {"mfu_fp8_peak_flops", or_null(p.mfu_fp8_peak_flops)}};
}

PrecisionFacts precision_from(Reader& r) {
  PrecisionFacts p;
  p.dtype = r.text_or_empty("dtype");
  p.flops_version = r.text_or_empty("flops_version");
  p.mfu_peak_flops = r.number("mfu_peak_flops");
  p.mfu_peak_source = r.text_or_empty("mfu_peak_source");
  p.fp8_flops_per_token = r.number("fp8_flops_per_token");
  p.mfu_fp8_peak_flops = r.number("mfu_fp8_peak_flops");
  return p;
}

json memory_json(const MemoryFacts& m) {
  return {{"device_bytes", m.device_bytes},
          {"limit_bytes", or_null(m.limit_bytes)},
          {"peak_reserved_bytes", m.peak_reserved_bytes},
          {"outside_allocator_bytes", m.outside_allocator_bytes},
          {"needed_bytes", m.needed_bytes},
          {"expandable_segments", m.expandable_segments}};
}

MemoryFacts memory_from(Reader& r) {
  MemoryFacts m;
  m.device_bytes = r.integer("device_bytes").value_or(0);
  m.limit_bytes = r.integer("limit_bytes");
  m.peak_reserved_bytes = r.integer("peak_reserved_bytes").value_or(0);
  m.outside_allocator_bytes = r.integer("outside_allocator_bytes").value_or(0);
  m.needed_bytes = r.integer("needed_bytes").value_or(0);
  m.expandable_segments = r.flag("expandable_segments").value_or(false);
  return m;
}

// A section: read with its own path, or unknown when absent.
template <typename T, typename Fn>
std::optional<T> read_section(Reader& parent, const char* key, Fn&& read) {
  const json& object = parent.section(key);
  if (object.is_null()) return std::nullopt;
  Reader r(object, parent.where(key));
  return read(r);
}

}  // namespace

bool RunFacts::experts_skip_dropped_slots() const {
  return moe && moe->capacity_factor > 0 && distributed && distributed->sharding &&
         distributed->sharding->expert_parallel > 1;
}

bool RunFacts::empty() const { return to_json(*this) == to_json(RunFacts{}); }

json to_json(const CollectiveShares& shares) {
  json j = json::object();
  for (const auto& [key, field] : kCollectiveShares) j[key] = or_null(shares.*field);
  return j;
}

CollectiveShares median_by_collective(const std::vector<CollectiveShares>& shares,
                                      double (*median)(std::vector<double>)) {
  CollectiveShares out;
  for (const auto& [key, field] : kCollectiveShares) {
    std::vector<double> known;
    for (const auto& s : shares)
      if (s.*field) known.push_back(*(s.*field));
    if (!known.empty()) out.*field = median(std::move(known));
  }
  return out;
}

json to_json(const RunFacts& f) {
  json j = f.unknown.is_object() ? f.unknown : json::object();
  j["final_loss"] = or_null(f.final_loss);
  j["final_validation_loss"] = or_null(f.final_validation_loss);
  j["final_validation_step"] = or_null(f.final_validation_step);
  j["first_step_ms"] = or_null(f.first_step_ms);
  j["warmup_steps"] = or_null(f.warmup_steps);
  j["steady_steps"] = or_null(f.steady_steps);
  j["window_steps_excluded"] = or_null(f.window_steps_excluded);
  j["outlier_steps"] = f.outlier_steps;
  j["parameters"] = or_null(f.parameters);
  j["active_parameters"] = or_null(f.active_parameters);
  j["training_flops_per_token"] = or_null(f.training_flops_per_token);
  j["tokens_per_step"] = or_null(f.tokens_per_step);
  j["start_step"] = or_null(f.start_step);
  j["resumed_from"] = f.resumed_from;
  j["checkpoints_skipped"] = f.checkpoints_skipped;
  j["peak_memory_kind"] = f.peak_memory_kind;
  j["cuda_graphs"] = f.cuda_graphs ? capture_json(*f.cuda_graphs) : json(nullptr);
  j["moe"] = f.moe ? moe_json(*f.moe) : json(nullptr);
  j["distributed"] = f.distributed ? distributed_json(*f.distributed) : json(nullptr);
  j["profile"] = f.profile ? profile_json(*f.profile) : json(nullptr);
  j["model"] = f.model ? model_json(*f.model) : json(nullptr);
  j["precision"] = f.precision ? precision_json(*f.precision) : json(nullptr);
  j["memory"] = f.memory ? memory_json(*f.memory) : json(nullptr);
  j["data"] = f.data;
  return j;
}

RunFacts run_facts_from_json(const json& j, std::string_view what) {
  RunFacts f;
  Reader r(j, std::string(what));
  f.final_loss = r.number("final_loss");
  f.final_validation_loss = r.number("final_validation_loss");
  f.final_validation_step = r.integer("final_validation_step");
  f.first_step_ms = r.number("first_step_ms");
  f.warmup_steps = r.integer("warmup_steps");
  f.steady_steps = r.integer("steady_steps");
  f.window_steps_excluded = r.integer("window_steps_excluded");
  f.outlier_steps = r.integers("outlier_steps");
  f.parameters = r.integer("parameters");
  f.active_parameters = r.integer("active_parameters");
  f.training_flops_per_token = r.number("training_flops_per_token");
  f.tokens_per_step = r.integer("tokens_per_step");
  f.start_step = r.integer("start_step");
  f.resumed_from = r.text_or_empty("resumed_from");
  f.checkpoints_skipped = r.texts("checkpoints_skipped");
  f.peak_memory_kind = r.text_or_empty("peak_memory_kind");
  f.cuda_graphs = read_section<CaptureFacts>(r, "cuda_graphs", capture_from);
  f.moe = read_section<MoeFacts>(r, "moe", moe_from);
  f.distributed = read_section<DistributedFacts>(r, "distributed", distributed_from);
  f.profile = read_section<ProfileFacts>(r, "profile", profile_from);
  f.model = read_section<ModelFacts>(r, "model", model_from);
  f.precision = read_section<PrecisionFacts>(r, "precision", precision_from);
  f.memory = read_section<MemoryFacts>(r, "memory", memory_from);
  f.data = r.raw("data");
  f.unknown = r.unread();
  return f;
}

}  // namespace ablate::receipts
