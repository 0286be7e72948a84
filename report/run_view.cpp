// report/run_view.cpp: the text of one run (see run_view.h).
// Tests: tests/harness/cli_receipts_test.cpp (harness_tests), tests/report/site_test.cpp (report_tests).
#include "report/run_view.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace ablate::report {
namespace {

// A parameter count as people say it: 290.1 M, 1.82 B.
std::string human_count(const std::optional<int64_t>& n) {
  if (!n) return "-";
  const double v = static_cast<double>(*n);
  return v >= 1e9 ? fmt::format("{:.2f} B", v / 1e9) : fmt::format("{:.1f} M", v / 1e6);
}

// The kernels that took the most GPU time a step in the run's profiled window (rank 0), summed over
// layers, each with where it was launched from: what a kernel change must move, and proof of which
// instantiation the model really runs (names keep their template arguments).
std::string top_kernels_text(receipts::Store& store, int64_t run_id, int64_t count) {
  std::string out;
  const auto window = store.query("SELECT steps FROM profile_windows WHERE run_id = ? AND rank = 0 AND status = 'ok'",
                                  {run_id});
  if (window.empty() || !window[0]["steps"].is_number() || window[0]["steps"].get<int64_t>() <= 0) {
    // Why there is none: profiling off in the spec, or on and unavailable (no GPU, CUPTI) or refused.
    const auto profiling = store.query("SELECT value FROM run_env WHERE run_id = ? AND key = 'profiling'", {run_id});
    const std::string status = profiling.empty() ? "" : profiling[0]["value"].get<std::string>();
    return status.empty() || status.starts_with("disabled")
               ? "kernels: no profiled window on rank 0 (run with [profile] enabled = true)\n"
               : fmt::format("kernels: no profiled window on rank 0 (profiling {})\n", status);
  }
  const double steps = window[0]["steps"].get<double>();
  const auto rows = store.query(
      "SELECT phase, block, seam, backend, name, SUM(calls) AS calls, SUM(total_ns) AS ns FROM kernel_attribution "
      "WHERE run_id = ? AND rank = 0 GROUP BY phase, block, seam, backend, name ORDER BY ns DESC, name LIMIT ?",
      {run_id, count});
  const auto total = store.query("SELECT SUM(total_ns) AS ns FROM kernel_attribution WHERE run_id = ? AND rank = 0",
                                 {run_id});
  const double total_ms = total.empty() || !total[0]["ns"].is_number() ? 0 : total[0]["ns"].get<double>() / 1e6 / steps;
  out += fmt::format("kernels: top {} of {:.2f} ms of GPU time a step ({} profiled steps, rank 0)\n", rows.size(), total_ms,
             static_cast<int64_t>(steps));
  out += fmt::format("  {:>9}  {:>7}  {:<9}  {:<5}  {:<28}  {}\n", "ms/step", "calls", "phase", "block", "seam[backend]", "kernel");
  for (const auto& r : rows) {
    const std::string seam = r["seam"].get<std::string>().empty()
                                 ? "-"
                                 : fmt::format("{}[{}]", r["seam"].get<std::string>(), r["backend"].get<std::string>());
    std::string name = r["name"].get<std::string>();
    if (name.size() > 160) name = name.substr(0, 157) + "...";
    out += fmt::format("  {:>9.3f}  {:>7.1f}  {:<9}  {:<5}  {:<28}  {}\n", r["ns"].get<double>() / 1e6 / steps,
               r["calls"].get<double>() / steps, r["phase"].get<std::string>(),
               r["block"].get<std::string>().empty() ? "-" : r["block"].get<std::string>(), seam, name);
  }
  return out;
}

// A JSON scalar as text: strings without their quotes, numbers as written, null as "-".
std::string scalar_text(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

// The backends as run, the goodput ledger, the environment, artifacts and annotations, one line an
// entry (every field kept; `ablate show --json` has the same as JSON).
std::string sections_text(const nlohmann::json& j) {
  std::string out;
  if (const auto& backends = j["backends"]; !backends.empty()) {
    out += "backends (seam: requested -> chosen, observed in the profile):\n";
    for (const auto& b : backends) {
      const bool as_asked = b["chosen"] == b["requested"];
      out += fmt::format("  {:<15} {} -> {}, observed {}{}{}\n", scalar_text(b["seam"]), scalar_text(b["requested"]),
                         scalar_text(b["chosen"]), scalar_text(b["observed"]), b["mismatch"] == true ? ", MISMATCH" : "",
                         as_asked ? "" : fmt::format(" ({})", scalar_text(b["reason"])));
    }
  }
  if (const auto& goodput = j["goodput"]; !goodput.empty()) {
    std::vector<std::pair<double, std::string>> by_time;
    for (const auto& [category, seconds] : goodput.items())
      if (seconds.is_number()) by_time.emplace_back(seconds.get<double>(), category);
    std::sort(by_time.rbegin(), by_time.rend());
    std::vector<std::string> parts;
    for (const auto& [seconds, category] : by_time) parts.push_back(fmt::format("{} {:.3f}", category, seconds));
    out += fmt::format("goodput ledger (s): {}\n", fmt::join(parts, ", "));
  }
  if (const auto& env = j["env"]; !env.empty()) {
    out += "env:\n";
    for (const auto& [key, value] : env.items()) out += fmt::format("  {} = {}\n", key, scalar_text(value));
  }
  for (const auto& a : j["artifacts"])
    out += fmt::format("artifact: {} {} ({} bytes, sha256 {})\n", scalar_text(a["kind"]), scalar_text(a["path"]),
                       scalar_text(a["bytes"]), scalar_text(a["sha256"]));
  for (const auto& a : j["annotations"])
    out += fmt::format("annotation {} ({} UTC): {}\n", scalar_text(a["id"]),
                       a["created_at"].is_number() ? base::format_utc(a["created_at"].get<double>()) : "-",
                       scalar_text(a["text"]));
  return out;
}

}  // namespace

std::string human_bytes(const std::optional<std::int64_t>& b) {
  if (!b) return "-";
  return fmt::format("{:.2f} GiB", static_cast<double>(*b) / (1024.0 * 1024 * 1024));
}

std::string render_run_text(receipts::Store& store, std::int64_t run_id, const RunViewOptions& options) {
  const auto j = store.run_json(run_id, false);
  std::string out;
  const auto r = store.get_run(run_id);
  out += fmt::format("run {}  {}  [{}]\n", r.id, r.name, receipts::to_string(r.status));
  if (r.error) out += fmt::format("error: {}\n", *r.error);
  out += fmt::format("started {} UTC, ended {}, host {}, spec {}\n", base::format_utc(r.started_at), r.ended_at ? base::format_utc(*r.ended_at) + " UTC" : "-",
             r.host, r.spec_hash.substr(0, 16));
  out += fmt::format("evidence: {}\n", receipts::is_evidence(r) ? "yes" : "no (only complete ok runs count)");
  const auto& s = r.summary;
  out += fmt::format("summary: steps {}  median step {}  tokens/s {}  MFU {}  goodput {}  peak memory {}\n", text_or_dash(s.steps),
             s.median_step_ms ? fmt::format("{:.2f} ms", *s.median_step_ms) : "-", text_or_dash(s.tokens_per_s, "{:.0f}"),
             s.mfu ? fmt::format("{:.2f}%", *s.mfu * 100) : "-",
             s.goodput_pct ? fmt::format("{:.1f}%", *s.goodput_pct) : "-", human_bytes(s.peak_memory_bytes));
  if (j["env"].contains("profiling")) out += fmt::format("profiling: {}\n", j["env"]["profiling"].get<std::string>());
  auto shown = [](std::optional<double> v, const char* fmt_spec, double scale = 1.0) {
    return v ? fmt::format(fmt::runtime(fmt_spec), *v * scale) : std::string("-");
  };
  const auto& facts = s.facts;
  // The model as it ran: a --set may have changed the named configuration's shape.
  if (const auto& m = facts.model) {
    out += fmt::format("model: {}{}  pattern {}  d_model {}  {} layers  T {}  batch {} a rank  {} parameters ({} active)\n",
               m->config.empty() ? "(no named config)" : m->config,
               m->config_overridden ? " (overridden by --set: its name no longer tells the shape)" : "", m->pattern,
               m->d_model, m->layers, m->seq_len, m->batch_size, human_count(m->parameters),
               human_count(m->active_parameters));
  }
  if (const auto& m = facts.model; m && !m->overrides.empty())
    out += fmt::format("overrides: {}\n", fmt::join(m->overrides, " "));
  if (const auto& p = facts.precision)
    out += fmt::format("precision: {}  MFU peak {}\n", p->dtype,
               p->mfu_peak_flops ? fmt::format("{:.1f} TFLOP/s ({})", *p->mfu_peak_flops / 1e12, p->mfu_peak_source)
                                 : fmt::format("none ({})", p->mfu_peak_source));
  // What the run needed of a GPU, and the cap it ran under (train.memory_limit_gib).
  if (const auto& m = facts.memory) {
    // A failed run needed more than it held: what it held is all the receipt can say.
    out += fmt::format("gpu memory: {} {} of the device's {} (the allocator's reserved peak {} + {} beside it){}{}{}\n",
               r.status == receipts::RunStatus::ok ? "needed" : "held, when it ended,", human_bytes(m->needed_bytes),
               human_bytes(m->device_bytes), human_bytes(m->peak_reserved_bytes),
               human_bytes(m->outside_allocator_bytes),
               m->limit_bytes ? fmt::format("  allocator capped at {} (train.memory_limit_gib)", human_bytes(*m->limit_bytes))
                              : std::string(),
               m->expandable_segments ? "  expandable segments" : "",
               facts.distributed ? "  (the rank that needed most)" : "");
  }
  // Data parallel: the job's shape and where its time went.
  if (const auto& d = facts.distributed) {
    out += fmt::format("data parallel: {} ranks over {} ({})  straggler {}  comm share {}  comm wait share {}\n", d->world_size,
               d->backend, d->launcher,
               d->straggler_rank ? fmt::format("rank {} (others waited {} of the step for it)", *d->straggler_rank,
                                               shown(d->straggler_wait_share, "{:.1f}%", 100))
                                 : std::string("-"),
               shown(d->comm_share, "{:.1f}%", 100), shown(d->comm_wait_share, "{:.1f}%", 100));
    // Only ranks whose profile window traced it: no window says nothing, which is not 0.
    std::vector<std::string> exposed;
    for (const auto& f : d->per_rank)
      if (f.exposed_comm_share) exposed.push_back(fmt::format("rank {} {:.1f}%", f.rank, *f.exposed_comm_share * 100));
    if (!exposed.empty())
      out += fmt::format("exposed communication (no other GPU work beside it, over the profile window): {}\n",
                         fmt::join(exposed, "  "));
    // By collective kind, the ranks' medians (kinds may run beside one another).
    std::vector<std::string> by_kind;
    for (const auto& [kind, field] : receipts::kCollectiveShares)
      if (const auto& v = d->exposed_by_collective.*field) by_kind.push_back(fmt::format("{} {:.1f}%", kind, *v * 100));
    if (!by_kind.empty())
      out += fmt::format("exposed by collective (median of the ranks): {}\n", fmt::join(by_kind, "  "));
    if (const auto& s = d->sharding) {
      const auto* rank0 = d->per_rank.empty() ? nullptr : &d->per_rank.front();
      auto kind = [&](const char* name, const std::optional<double>& ms, std::int64_t bytes) -> std::string {
        if (bytes == 0) return "";
        return fmt::format("  {} {} of {:.2f} GB", name, shown(ms, "{:.2f} ms"), bytes / 1e9);
      };
      out += fmt::format("sharding: {}  gradients reduced in {}  GEMM weights in {}  {} buckets  {}optimizer state "
                         "{:.2f} GB  gradients kept {:.2f} GB{}{}\n",
                 s->stage, s->reduce_dtype, s->param_dtype, s->buckets,
                 s->parameter_bytes > 0 ? fmt::format("parameters kept {:.2f} GB  ", s->parameter_bytes / 1e9)
                                        : std::string(),
                 s->optimizer_state_bytes / 1e9, s->gradient_bytes / 1e9,
                 s->staging_peak_bytes > 0 ? fmt::format(" (+{:.2f} GB staged at most)", s->staging_peak_bytes / 1e9)
                                           : std::string(),
                 s->expert_parallel > 1
                     ? fmt::format("  experts over {} ranks{}", s->expert_parallel,
                                   s->expert_exchange_chunks > 1
                                       ? fmt::format(" (exchange pipelined in {} chunks)", s->expert_exchange_chunks)
                                       : std::string())
                     : std::string());
      if (rank0)
        out += fmt::format("collectives a step (rank 0):{}{}{}{}\n",
                   kind("all-reduce", rank0->median_all_reduce_ms, s->all_reduce_bytes),
                   kind("reduce-scatter", rank0->median_reduce_scatter_ms, s->reduce_scatter_bytes),
                   kind("all-gather", rank0->median_all_gather_ms, s->all_gather_bytes),
                   kind("all-to-all", rank0->median_all_to_all_ms, s->all_to_all_bytes));
    }
  }
  // The MoE router over the run (models with E blocks).
  if (const auto& m = facts.moe) {
    out += fmt::format("moe: {} E layers, top-{}, capacity factor {:g}  dropped {} of {} slots ({})  final aux loss {}\n",
               m->e_layers, m->top_k, m->capacity_factor, m->dropped_slots, m->routed_slots,
               shown(m->drop_rate, "{:.2f}%", 100), shown(m->final_aux_loss, "{:.4f}"));
    if (facts.experts_skip_dropped_slots() && m->dropped_slots > 0)
      out += fmt::format("  MFU counts the model's FLOPs for every routed slot; expert parallel at a capacity, the {} "
                         "dropped slots' expert FLOPs were not computed\n",
                         shown(m->drop_rate, "{:.2f}%", 100));
  }
  // Held-out evaluations (train.eval_every): the first and the last, and how many.
  if (const auto& evals = j["evaluations"]; !evals.empty()) {
    const auto loss = [](const nlohmann::json& e) {
      return e["loss"].is_number() ? fmt::format("{:.4f}", e["loss"].get<double>()) : std::string("not finite");
    };
    out += fmt::format("validation: loss {} after step {} ... {} after step {} ({} evaluations of {} held-out tokens)\n",
               loss(evals.front()), evals.front()["step"].get<int64_t>(), loss(evals.back()),
               evals.back()["step"].get<int64_t>(), evals.size(), evals.back()["tokens"].get<int64_t>());
  }
  // Requested is not achieved: a requested CUDA graph says which it was, and why.
  if (j["env"].value("compile.cuda_graphs_requested", "") == "true")
    out += fmt::format("cuda graphs: {} ({})\n",
               j["env"].value("compile.cuda_graphs_achieved", "") == "true" ? "achieved" : "not achieved",
               j["env"].value("compile.cuda_graphs_reason", "no reason recorded"));
  // Launch ahead acts on replays only: shown where a graph was replayed, with how many steps it moved.
  if (j["env"].value("compile.cuda_graphs_achieved", "") == "true" && j["env"].contains("compile.launch_ahead"))
    out += j["env"].value("compile.launch_ahead", "") == "true"
               ? fmt::format("launch ahead: on, {} replayed steps queued before the previous step's read\n",
                             j["env"].value("compile.launched_ahead_steps", "an unrecorded number of"))
               : std::string("launch ahead: off (each replay waits for the host to read the step before it)\n");
  // A seam whose kernels contradict its chosen backend, with the kernels that say so.
  for (const auto& b : j["backends"]) {
    if (b["mismatch"] != true) continue;  // the store reads the 0/1 column back as a JSON boolean
    std::vector<std::string> kernels;
    for (const auto& e : j["profile"]["backend_evidence"])
      if (e["seam"] == b["seam"] && kernels.size() < 5)
        kernels.push_back(fmt::format("{} ({})", e["kernel"].get<std::string>(),
                                      e["matches"].get<std::string>().empty() ? "no backend's pattern"
                                                                              : e["matches"].get<std::string>()));
    out += fmt::format("backend mismatch: seam {} chose {} but observed {}; kernels: {}\n", b["seam"].get<std::string>(),
               b["chosen"].get<std::string>(), b["observed"].is_string() ? b["observed"].get<std::string>() : "-",
               fmt::join(kernels, ", "));
  }
  out += sections_text(j);
  const auto step_rows = store.query("SELECT COUNT(*) AS n FROM steps WHERE run_id = ?", {run_id});
  out += fmt::format("steps: {} rows{}\n", step_rows[0]["n"].get<std::int64_t>(),
                     options.mention_show_json ? fmt::format(" (ablate show {} --json for all)", run_id) : "");
  if (options.top_kernels > 0) out += top_kernels_text(store, run_id, options.top_kernels);
  return out;
}

}  // namespace ablate::report
