// report/report.cpp: the report model built from the store, and its JSON, document and summary forms
// (see report.h). Reads only the store; every number is rendered with fixed decimals so the same store
// gives the same bytes.
// Tests: tests/report/report_test.cpp (report_tests).
#include "report/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "report/gate.h"
#include "report/json_fields.h"

namespace ablate::report {
namespace {

using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::vector<std::int64_t> excluded_ids(const Side& side) {
  std::vector<std::int64_t> ids;
  for (const auto& e : side.excluded) ids.push_back(e.run_id);
  return ids;
}

std::vector<std::int64_t> all_ids(const Side& side) {
  auto ids = side.evidence_ids();
  const auto excluded = excluded_ids(side);
  ids.insert(ids.end(), excluded.begin(), excluded.end());
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<double> median_of(std::vector<double> values) {
  if (values.empty()) return std::nullopt;
  return median(std::move(values));
}

// Median over evidence runs of each goodput category; a run without a category counts 0 there.
std::map<std::string, double> goodput_medians(receipts::Store& store, const Side& side) {
  std::map<std::string, std::vector<double>> per_category;
  for (const auto& category : receipts::goodput_categories()) per_category[category].assign(side.evidence.size(), 0.0);
  for (std::size_t i = 0; i < side.evidence.size(); ++i)
    for (const auto& [category, seconds] : goodput_seconds(store, side.evidence[i].row.id)) per_category[category][i] = seconds;
  std::map<std::string, double> out;
  if (side.evidence.empty()) return out;
  for (auto& [category, seconds] : per_category) out[category] = median(seconds);
  return out;
}

// Per step, the median over the side's evidence runs of `sql`'s (step, loss) rows for a run (its one
// parameter): the training loss of rank 0, or the held-out evaluations.
std::vector<LossPoint> median_curve(receipts::Store& store, const Side& side, std::string_view sql) {
  std::map<std::int64_t, std::vector<double>> by_step;
  for (const auto& run : side.evidence)
    for (const auto& row : store.query(sql, {run.row.id}))
      by_step[row["step"].get<std::int64_t>()].push_back(row["loss"].get<double>());
  std::vector<LossPoint> curve;
  for (auto& [step, losses] : by_step) curve.push_back({step, median(std::move(losses))});
  return curve;
}

void add_kernels(receipts::Store& store, CellReport& cell) {
  std::map<std::string, std::pair<double, double>> totals;  // family -> (calls, ns) over traced runs
  for (const auto& run : cell.side.evidence) {
    const json rows = store.query(
        // Rank 0's window, as compare reads it: a data-parallel run's other ranks are comparable
        // through the straggler ratio, not summed into one GPU's kernel time.
        "SELECT family, SUM(calls) AS calls, SUM(total_ns) AS ns FROM kernels WHERE run_id = ? AND rank = 0 "
        "GROUP BY family",
        {run.row.id});
    if (rows.empty()) continue;
    ++cell.traced_runs;
    for (const auto& row : rows) {
      totals[row["family"].get<std::string>()].first += row["calls"].get<double>();
      totals[row["family"].get<std::string>()].second += row["ns"].get<double>();
    }
  }
  const double runs = static_cast<double>(cell.traced_runs);
  for (const auto& [family, sums] : totals) cell.kernels.push_back({family, sums.first / runs, sums.second / runs / 1e6});
  std::stable_sort(cell.kernels.begin(), cell.kernels.end(),
                   [](const auto& x, const auto& y) { return x.ms_per_run > y.ms_per_run; });
}

void add_memory(receipts::Store& store, CellReport& cell) {
  for (const auto& run : cell.side.evidence) {
    if (const auto& facts = run.row.summary.facts.memory) {
      cell.gpu_needed_bytes = std::max(cell.gpu_needed_bytes.value_or(0), facts->needed_bytes);
      if (facts->limit_bytes) cell.memory_limit_bytes = std::max(cell.memory_limit_bytes.value_or(0), *facts->limit_bytes);
    }
    const json rows = store.query(
        "SELECT COUNT(*) AS n, MAX(allocated) AS allocated, MAX(reserved) AS reserved, "
        "TOTAL(alloc_retries) AS retries, TOTAL(ooms) AS ooms FROM memory WHERE run_id = ?",
        {run.row.id});
    if (rows[0]["n"].get<std::int64_t>() == 0) continue;
    MemoryProbes& m = cell.memory ? *cell.memory : cell.memory.emplace();
    auto take_max = [](std::optional<std::int64_t>& into, const json& value) {
      if (!value.is_null()) into = std::max(into.value_or(value.get<std::int64_t>()), value.get<std::int64_t>());
    };
    take_max(m.max_allocated, rows[0]["allocated"]);
    take_max(m.max_reserved, rows[0]["reserved"]);
    m.alloc_retries += static_cast<std::int64_t>(rows[0]["retries"].get<double>());
    m.ooms += static_cast<std::int64_t>(rows[0]["ooms"].get<double>());
  }
}

// A run's sharding as the Scaling section names it: the stage, and the reduction's and the GEMM weights'
// dtype where they are not fp32.
std::string sharding_label(const receipts::ShardingFacts& s) {
  std::string label = s.stage;
  if (s.reduce_dtype != "fp32") label += ", reduce " + s.reduce_dtype;
  if (s.param_dtype != "fp32") label += ", weights " + s.param_dtype;
  return label;
}

void add_scaling(CellReport& cell) {
  std::set<std::int64_t> worlds;
  std::vector<double> per_gpu, comm, wait, exposed, straggler, straggler_wait, all_reduce, reduce_scatter, all_gather,
      all_to_all;
  std::vector<receipts::CollectiveShares> exposed_by_kind;
  std::set<std::string> stages;
  for (const auto& run : cell.side.evidence) {
    const auto& distributed = run.row.summary.facts.distributed;
    const std::int64_t world = distributed ? distributed->world_size : 1;
    worlds.insert(world);
    if (run.row.summary.tokens_per_s) per_gpu.push_back(*run.row.summary.tokens_per_s / static_cast<double>(world));
    if (!distributed) continue;
    if (distributed->comm_share) comm.push_back(*distributed->comm_share);
    if (distributed->comm_wait_share) wait.push_back(*distributed->comm_wait_share);
    if (distributed->exposed_comm_share) exposed.push_back(*distributed->exposed_comm_share);
    exposed_by_kind.push_back(distributed->exposed_by_collective);
    if (distributed->step_time_ratio) straggler.push_back(*distributed->step_time_ratio);
    if (distributed->straggler_wait_share) straggler_wait.push_back(*distributed->straggler_wait_share);
    if (distributed->sharding) stages.insert(sharding_label(*distributed->sharding));
    if (!distributed->per_rank.empty()) {
      const auto& rank0 = distributed->per_rank.front();
      if (rank0.median_all_reduce_ms) all_reduce.push_back(*rank0.median_all_reduce_ms);
      if (rank0.median_reduce_scatter_ms) reduce_scatter.push_back(*rank0.median_reduce_scatter_ms);
      if (rank0.median_all_gather_ms) all_gather.push_back(*rank0.median_all_gather_ms);
      if (rank0.median_all_to_all_ms) all_to_all.push_back(*rank0.median_all_to_all_ms);
    }
  }
  if (worlds.size() == 1) cell.scaling.world_size = *worlds.begin();
  cell.scaling.mixed_world = worlds.size() > 1;
  cell.scaling.tokens_per_s_per_gpu = median_of(std::move(per_gpu));
  cell.scaling.comm_share = median_of(std::move(comm));
  cell.scaling.comm_wait_share = median_of(std::move(wait));
  cell.scaling.exposed_comm_share = median_of(std::move(exposed));
  cell.scaling.exposed_by_collective = receipts::median_by_collective(exposed_by_kind, &median);
  cell.scaling.straggler_ratio = median_of(std::move(straggler));
  cell.scaling.straggler_wait_share = median_of(std::move(straggler_wait));
  if (!stages.empty()) cell.scaling.sharding = stages.size() == 1 ? *stages.begin() : std::string("mixed");
  cell.scaling.all_reduce_ms = median_of(std::move(all_reduce));
  cell.scaling.reduce_scatter_ms = median_of(std::move(reduce_scatter));
  cell.scaling.all_gather_ms = median_of(std::move(all_gather));
  cell.scaling.all_to_all_ms = median_of(std::move(all_to_all));
}

void add_moe(CellReport& cell) {
  std::vector<double> drop_rate, aux;
  for (const auto& run : cell.side.evidence) {
    const auto& moe = run.row.summary.facts.moe;
    if (!moe) continue;
    if (run.row.summary.facts.experts_skip_dropped_slots()) cell.experts_skip_dropped_slots = true;
    if (moe->drop_rate) drop_rate.push_back(*moe->drop_rate);
    if (moe->final_aux_loss) aux.push_back(*moe->final_aux_loss);
  }
  cell.moe_drop_rate = median_of(std::move(drop_rate));
  cell.moe_final_aux_loss = median_of(std::move(aux));
}

void add_model(CellReport& cell) {
  for (const auto& run : cell.side.evidence) {
    if (!run.row.summary.facts.model)
      ++cell.runs_without_model;
    else if (!cell.model)
      cell.model = run.row.summary.facts.model;
  }
}

// Efficiencies against the first cell (baseline first) that ran on one GPU.
void add_efficiencies(Report& report) {
  for (const auto& c : report.cells)
    if (c.scaling.world_size.value_or(1) > 1 || c.scaling.mixed_world) report.has_multi_gpu = true;
  const auto reference = std::find_if(report.cells.begin(), report.cells.end(), [](const CellReport& c) {
    return c.scaling.world_size == 1 && c.scaling.tokens_per_s_per_gpu;
  });
  if (!report.has_multi_gpu || reference == report.cells.end()) return;
  report.scaling_reference = reference->name;
  const double base = *reference->scaling.tokens_per_s_per_gpu;
  for (auto& c : report.cells)
    if (c.scaling.tokens_per_s_per_gpu && base > 0) c.scaling.efficiency = *c.scaling.tokens_per_s_per_gpu / base;
}

void add_backends(receipts::Store& store, const CellReport& cell, Report& report) {
  for (const std::int64_t id : all_ids(cell.side)) {
    const json rows = store.query(
        "SELECT seam, requested, chosen, observed, reason, mismatch FROM run_backends WHERE run_id = ? ORDER BY seam", {id});
    bool observed_any = false;
    for (const auto& row : rows) {
      std::optional<bool> mismatch;
      if (!row["mismatch"].is_null()) mismatch = row["mismatch"].get<std::int64_t>() == 1;
      std::optional<std::string> observed;
      if (!row["observed"].is_null()) observed = row["observed"].get<std::string>(), observed_any = true;
      const std::string requested = row["requested"].get<std::string>(), chosen = row["chosen"].get<std::string>();
      if (!mismatch.value_or(false) && requested == chosen) continue;
      BackendIssue issue{cell.name, row["seam"].get<std::string>(), requested, chosen, row["reason"].get<std::string>(),
                         observed, mismatch, {id}};
      const auto same = std::find_if(report.backend_issues.begin(), report.backend_issues.end(), [&](const auto& other) {
        return other.cell == issue.cell && other.seam == issue.seam && other.requested == issue.requested &&
               other.chosen == issue.chosen && other.reason == issue.reason && other.observed == issue.observed &&
               other.mismatch == issue.mismatch;
      });
      if (same == report.backend_issues.end()) {
        report.backend_issues.push_back(std::move(issue));
      } else {
        same->run_ids.push_back(id);
      }
    }
    if (!rows.empty() && !observed_any) ++report.runs_without_observed_backends;
  }
}

void add_environment(receipts::Store& store, const CellReport& cell, Report& report) {
  for (const std::int64_t id : all_ids(cell.side)) {
    for (const auto& row : store.query("SELECT key, value FROM run_env WHERE run_id = ?", {id})) {
      auto& values = report.environment[row["key"].get<std::string>()];
      const std::string value = row["value"].get<std::string>();
      auto it = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.value == value; });
      if (it == values.end()) it = values.insert(values.end(), EnvValue{value, {}});
      it->run_ids.push_back(id);
    }
  }
}

std::string fixed(const std::optional<double>& value, int decimals, std::string_view unit = "") {
  return value ? fmt::format("{:.{}f}{}", *value, decimals, unit) : "-";
}

std::string gib(const std::optional<double>& bytes) {
  return bytes ? fmt::format("{:.3f} GiB", *bytes / kGiB) : "-";
}

std::string interval_text(const RatioInterval& i, int decimals) {
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", i.ratio, decimals, i.low, decimals, i.high, decimals);
}

std::string ids_text(const std::vector<std::int64_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

std::string verdict_text(const CellReport& cell, bool is_baseline) {
  if (is_baseline) return "baseline";
  if (!cell.vs_baseline) return "no evidence on one side";
  std::string out = fmt::format("{} {}", interval_text(*cell.vs_baseline, 4), to_string(cell.verdict));
  if (cell.verdict == Difference::unreliable) out += fmt::format(" (needs >= {} ok runs a side)", kMinRepeats);
  return out;
}

json interval_json(const std::optional<RatioInterval>& i) {
  return i ? json{{"value", i->ratio}, {"low", i->low}, {"high", i->high}, {"level", i->level}} : json(nullptr);
}

json scaling_json(const ScalingFacts& s) {
  return {{"world_size", value_or_null(s.world_size)},
          {"mixed_world_sizes", s.mixed_world},
          {"tokens_per_s_per_gpu", value_or_null(s.tokens_per_s_per_gpu)},
          {"efficiency_vs_1_gpu", value_or_null(s.efficiency)},
          {"comm_share", value_or_null(s.comm_share)},
          {"comm_wait_share", value_or_null(s.comm_wait_share)},
          {"exposed_comm_share", value_or_null(s.exposed_comm_share)},
          {"straggler_wait_share", value_or_null(s.straggler_wait_share)},
          {"straggler_ratio", value_or_null(s.straggler_ratio)},
          {"sharding", value_or_null(s.sharding)},
          {"all_reduce_ms", value_or_null(s.all_reduce_ms)},
          {"reduce_scatter_ms", value_or_null(s.reduce_scatter_ms)},
          {"all_gather_ms", value_or_null(s.all_gather_ms)},
          {"all_to_all_ms", value_or_null(s.all_to_all_ms)},
          {"exposed_by_collective", receipts::to_json(s.exposed_by_collective)}};
}

json cell_json(const CellReport& c) {
  json excluded = json::array();
  for (const auto& e : c.side.excluded)
    excluded.push_back({{"run_id", e.run_id}, {"status", receipts::to_string(e.status)}, {"reason", e.reason}});
  json loss = json::array(), validation = json::array();
  for (const auto& p : c.loss_curve) loss.push_back({p.step, p.loss});
  for (const auto& p : c.validation_curve) validation.push_back({p.step, p.loss});
  json kernels = json::array();
  for (const auto& k : c.kernels)
    kernels.push_back({{"family", k.family}, {"calls_per_run", k.calls_per_run}, {"ms_per_run", k.ms_per_run}});
  json mismatches = json::array();
  for (const auto& d : c.mismatches)
    mismatches.push_back({{"field", d.field}, {"baseline", d.a_values}, {"cell", d.b_values}, {"within_side", d.within_side}});
  json memory = nullptr;
  if (c.memory)
    memory = {{"max_allocated_bytes", value_or_null(c.memory->max_allocated)},
              {"max_reserved_bytes", value_or_null(c.memory->max_reserved)},
              {"alloc_retries", c.memory->alloc_retries},
              {"ooms", c.memory->ooms}};
  json model = nullptr;
  if (c.model)
    model = {{"config", c.model->config},
             {"config_overridden", c.model->config_overridden},
             {"overrides", c.model->overrides},
             {"pattern", c.model->pattern},
             {"d_model", c.model->d_model},
             {"layers", c.model->layers},
             {"seq_len", c.model->seq_len},
             {"parameters", value_or_null(c.model->parameters)}};
  return {{"name", c.name},
          {"model", model},
          {"evidence_run_ids", c.side.evidence_ids()},
          {"excluded", excluded},
          {"step_ms", c.side.step_ms()},
          {"median_step_ms", interval_json(c.step_ms)},
          {"ratio_vs_baseline", interval_json(c.vs_baseline)},
          {"u_test_p_value", c.u_test ? json(c.u_test->p_value) : json(nullptr)},
          {"verdict", to_string(c.verdict)},
          {"median_tokens_per_s", value_or_null(c.side.median_tokens_per_s)},
          {"median_mfu", value_or_null(c.median_mfu)},
          {"median_goodput_pct", value_or_null(c.side.median_goodput_pct)},
          {"median_steady_goodput_pct", value_or_null(c.side.median_steady_goodput_pct)},
          {"median_fixed_cost_seconds", value_or_null(c.side.median_fixed_seconds)},
          {"median_fixed_cost_share", value_or_null(c.side.median_fixed_share)},
          {"fixed_cost_dominates", c.side.fixed_cost_dominates()},
          {"median_peak_memory_bytes", value_or_null(c.side.median_peak_memory_bytes)},
          {"goodput_seconds", c.goodput_seconds},
          {"loss_curve", loss},
          {"validation_curve", validation},
          {"median_tail_loss", value_or_null(c.tail_loss)},
          {"tail_loss_window_steps", kDefaultLossWindow},
          {"traced_runs", c.traced_runs},
          {"kernel_families", kernels},
          {"memory_probes", memory},
          {"gpu_needed_bytes", value_or_null(c.gpu_needed_bytes)},
          {"memory_limit_bytes", value_or_null(c.memory_limit_bytes)},
          {"scaling", scaling_json(c.scaling)},
          {"moe", c.moe_drop_rate || c.moe_final_aux_loss
                      ? json{{"median_drop_rate", value_or_null(c.moe_drop_rate)},
                             {"median_final_aux_loss", value_or_null(c.moe_final_aux_loss)}}
                      : json(nullptr)},
          {"mismatches_vs_baseline", mismatches}};
}

// A matrix's declared cells that have no run appear in no other table: every declared cell is listed
// with its runs, or why it has none.
void add_declared_cells(Section& s, const Report& r) {
  std::vector<std::string> without_runs;
  for (const auto& d : r.declared_cells)
    if (d.run_ids.empty()) without_runs.push_back(d.name);
  if (without_runs.empty()) return;
  s.blocks.push_back(Paragraph{fmt::format("The matrix declares {} cells; {} of them have no run and appear in no other "
                                           "table: {}.",
                                           r.declared_cells.size(), without_runs.size(), fmt::join(without_runs, ", ")),
                               true});
  Table t{{"declared cell", "runs", "why no runs"}, {}};
  for (const auto& d : r.declared_cells)
    t.rows.push_back({d.name, d.run_ids.empty() ? "none" : ids_text(d.run_ids), d.run_ids.empty() ? d.no_runs_reason : "-"});
  s.blocks.push_back(std::move(t));
}

Section summary_section(const Report& r, const std::vector<std::string>& plot_notes) {
  Section s{"Summary", {}};
  for (const auto& note : r.notes) s.blocks.push_back(Paragraph{note, true});
  for (const auto& note : plot_notes) s.blocks.push_back(Paragraph{note, true});
  s.blocks.push_back(Paragraph{fmt::format(
      "Baseline cell: {}. Step time is the median of steady-state steps per run; per cell the median over its ok "
      "runs with a bootstrap {:.0f} % interval; the ratio is cell / baseline (below 1 is faster). Only complete ok runs "
      "are evidence; fewer than {} a side is unreliable, never a win.",
      r.baseline().name, (r.baseline().step_ms ? r.baseline().step_ms->level : 0.95) * 100, kMinRepeats)});
  Table t{{"cell", "ok runs", "not counted", "median step ms [95 % CI]", "vs baseline [95 % CI]", "tokens/s", "MFU",
           "goodput", "steady goodput", "peak memory"},
          {}};
  for (std::size_t i = 0; i < r.cells.size(); ++i) {
    const auto& c = r.cells[i];
    t.rows.push_back({c.name, std::to_string(c.side.evidence.size()), std::to_string(c.side.excluded.size()),
                      c.step_ms ? interval_text(*c.step_ms, 3) : "-", verdict_text(c, i == 0),
                      fixed(c.side.median_tokens_per_s, 0), c.median_mfu ? fmt::format("{:.1f} %", *c.median_mfu * 100) : "-",
                      fixed(c.side.median_goodput_pct, 1, " %"), fixed(c.side.median_steady_goodput_pct, 1, " %"),
                      gib(c.side.median_peak_memory_bytes)});
  }
  s.blocks.push_back(std::move(t));
  for (const auto& c : r.cells)
    if (c.experts_skip_dropped_slots && c.moe_drop_rate && *c.moe_drop_rate > 0)
      s.blocks.push_back(Paragraph{fmt::format("Cell {}: MFU counts the model's FLOPs for every routed slot, and {:.2f} % "
                                               "of them were dropped; expert parallel at a capacity, their expert FLOPs "
                                               "were not computed, so this MFU exceeds the rate of the work done.",
                                               c.name, *c.moe_drop_rate * 100),
                                   true});
  for (const auto& c : r.cells)
    if (c.side.fixed_cost_dominates())
      s.blocks.push_back(Paragraph{fmt::format("Cell {}: start-up, data prep and warm-up are {:.0f} % of its wall time: its "
                                               "goodput measures that fixed cost, not training; read its steady goodput.",
                                               c.name, *c.side.median_fixed_share * 100),
                                   true});
  add_declared_cells(s, r);
  for (const auto& c : r.cells) {
    if (c.side.evidence.size() < kMinRepeats)
      s.blocks.push_back(Paragraph{fmt::format("Cell {} has {} ok run(s): its numbers are unreliable (needs >= {}).",
                                               c.name, c.side.evidence.size(), kMinRepeats),
                                   true});
  }
  return s;
}

// What each cell trained: a named configuration a --set changed is marked, so a name never stands
// for a shape it no longer has.
Section model_section(const Report& r) {
  Section s{"Model", {}};
  Table t{{"cell", "config", "pattern", "d_model", "layers", "T", "parameters"}, {}};
  for (const auto& c : r.cells) {
    if (!c.model) {
      t.rows.push_back({c.name, "not recorded", "-", "-", "-", "-", "-"});
      continue;
    }
    const auto& m = *c.model;
    t.rows.push_back({c.name, m.config_overridden ? m.config + " (changed by --set)" : m.config, m.pattern,
                      std::to_string(m.d_model), std::to_string(m.layers), std::to_string(m.seq_len),
                      m.parameters ? fmt::format("{:.1f} M", static_cast<double>(*m.parameters) / 1e6) : "-"});
  }
  s.blocks.push_back(std::move(t));
  for (const auto& c : r.cells)
    if (c.model && c.model->config_overridden)
      s.blocks.push_back(Paragraph{fmt::format("Cell {}: {} with --set {}.", c.name, c.model->config,
                                               fmt::join(c.model->overrides, " --set "))});
  return s;
}

Section scaling_section(const Report& r) {
  Section s{"Scaling", {}};
  s.blocks.push_back(Paragraph{fmt::format(
      "Data parallel, median over each cell's ok runs. Efficiency: tokens/s per GPU over {}. Communication share: "
      "the bucket collectives' own time over the step (all-reduces, or reduce-scatters and parameter all-gathers; "
      "NCCL's timing; '-' on Gloo, which cannot time them); wait share: host time blocked on them after backward; "
      "exposed comm share: the GPU time in which communication kernels ran with no other kernel, memcpy or memset beside them, "
      "over the profile window (median of the ranks; '-' without a traced window), and by collective kind (AR, RS, AG, "
      "A2A all-to-all; kinds may run beside one another, so they can add up to more); straggler wait: the longest a "
      "rank's collectives waited for "
      "the slowest rank, over the step ('-' for runs recorded before it was measured; the ratio of the ranks' "
      "step-time medians is no measure: synchronous training makes it ~1). Sharding: distributed.sharding, with "
      "distributed.reduce_dtype and param_dtype (the GEMM weights') where not fp32; "
      "collectives: rank 0's a step by kind (AR all-reduce, RS reduce-scatter, AG all-gather, A2A all-to-all), ms of NCCL's own "
      "timing, overlapped with compute or not.",
      r.scaling_reference ? "the 1-GPU cell " + *r.scaling_reference : std::string("a 1-GPU cell (none here: no efficiency)"))});
  auto share = [](const std::optional<double>& v) { return v ? fmt::format("{:.1f} %", *v * 100) : "-"; };
  Table t{{"cell", "GPUs", "tokens/s", "tokens/s per GPU", "efficiency", "comm share", "comm wait share",
           "exposed comm share", "exposed by kind", "straggler wait", "sharding", "collectives (ms)"},
          {}};
  // AR, RS, AG, A2A: receipts::kCollectiveShares' kinds, in its order.
  static constexpr const char* kAbbreviations[] = {"AR", "RS", "AG", "A2A"};
  auto exposed_by_kind = [&](const ScalingFacts& f) {
    std::vector<std::string> parts;
    for (size_t k = 0; k < std::size(receipts::kCollectiveShares); ++k)
      if (const auto& v = f.exposed_by_collective.*receipts::kCollectiveShares[k].second)
        parts.push_back(fmt::format("{} {:.1f} %", kAbbreviations[k], *v * 100));
    return parts.empty() ? std::string("-") : fmt::format("{}", fmt::join(parts, ", "));
  };
  auto collectives = [](const ScalingFacts& f) {
    std::vector<std::string> parts;
    if (f.all_reduce_ms) parts.push_back(fmt::format("AR {:.2f}", *f.all_reduce_ms));
    if (f.reduce_scatter_ms) parts.push_back(fmt::format("RS {:.2f}", *f.reduce_scatter_ms));
    if (f.all_gather_ms) parts.push_back(fmt::format("AG {:.2f}", *f.all_gather_ms));
    if (f.all_to_all_ms) parts.push_back(fmt::format("A2A {:.2f}", *f.all_to_all_ms));
    return parts.empty() ? std::string("-") : fmt::format("{}", fmt::join(parts, ", "));
  };
  for (const auto& c : r.cells) {
    const auto& f = c.scaling;
    t.rows.push_back({c.name, f.world_size ? std::to_string(*f.world_size) : (f.mixed_world ? "mixed" : "-"),
                      fixed(c.side.median_tokens_per_s, 0),
                      fixed(f.tokens_per_s_per_gpu, 0), share(f.efficiency), share(f.comm_share),
                      share(f.comm_wait_share), share(f.exposed_comm_share), exposed_by_kind(f),
                      share(f.straggler_wait_share),
                      f.sharding.value_or("-"),
                      collectives(f)});
  }
  s.blocks.push_back(std::move(t));
  for (const auto& c : r.cells)
    if (c.scaling.mixed_world)
      s.blocks.push_back(Paragraph{fmt::format("Cell {} mixes runs of different world sizes: its per-GPU figures mix them too.",
                                               c.name),
                                   true});
  return s;
}

Section runs_section(const Report& r) {
  Section s{"Runs", {}};
  Table t{{"cell", "run", "status", "counted", "median step ms", "why not counted"}, {}};
  for (const auto& c : r.cells) {
    std::map<std::int64_t, std::vector<std::string>> rows;
    for (const auto& run : c.side.evidence)
      rows[run.row.id] = {c.name, std::to_string(run.row.id), "ok", "yes", fixed(run.row.summary.median_step_ms, 3), ""};
    for (const auto& e : c.side.excluded)
      rows[e.run_id] = {c.name, std::to_string(e.run_id), std::string(receipts::to_string(e.status)), "no", "-", e.reason};
    for (auto& [id, row] : rows) t.rows.push_back(std::move(row));
  }
  s.blocks.push_back(std::move(t));
  return s;
}

const Plot* find_plot(const std::vector<Plot>& plots, std::string_view file) {
  for (const auto& p : plots)
    if (p.file == file) return &p;
  return nullptr;
}

void add_plot(Section& s, const std::vector<Plot>& plots, std::string_view file) {
  if (const Plot* p = find_plot(plots, file)) s.blocks.push_back(*p);
}

Section step_time_section(const Report& r, const std::vector<Plot>& plots) {
  Section s{"Step time", {}};
  add_plot(s, plots, "step_time.svg");
  Table t{{"cell", "runs (median step ms each)", "U test p vs baseline", "differs from baseline beyond the factor"}, {}};
  for (std::size_t i = 0; i < r.cells.size(); ++i) {
    const auto& c = r.cells[i];
    std::vector<std::string> each;
    for (const auto& run : c.side.evidence) each.push_back(fmt::format("{}: {:.3f}", run.row.id, *run.row.summary.median_step_ms));
    std::vector<std::string> mismatches;
    for (const auto& d : c.mismatches)
      mismatches.push_back(fmt::format("{} ({} vs {})", d.field, fmt::join(d.a_values, "/"), fmt::join(d.b_values, "/")));
    t.rows.push_back({c.name, each.empty() ? "-" : fmt::format("{}", fmt::join(each, "; ")),
                      i == 0 || !c.u_test ? "-" : fmt::format("{:.4g}", c.u_test->p_value),
                      i == 0 ? "-" : (mismatches.empty() ? "nothing" : fmt::format("{}", fmt::join(mismatches, "; ")))});
  }
  s.blocks.push_back(std::move(t));
  return s;
}

Section loss_section(const Report& r, const std::vector<Plot>& plots) {
  Section s{"Loss", {}};
  add_plot(s, plots, "loss.svg");
  // Runs with E blocks also record the router's evidence: two more columns when any cell has it.
  const bool moe = std::any_of(r.cells.begin(), r.cells.end(),
                               [](const CellReport& c) { return c.moe_drop_rate || c.moe_final_aux_loss; });
  const bool evaluated = std::any_of(r.cells.begin(), r.cells.end(), [](const CellReport& c) { return !c.validation_curve.empty(); });
  if (evaluated) add_plot(s, plots, "validation.svg");
  const std::string tail = fmt::format("loss, last {} steps", kDefaultLossWindow);
  std::vector<std::string> header = {"cell", "steps logged", "first loss", "last loss", tail};
  if (evaluated) header.push_back("validation loss (last evaluation)");
  if (moe) header.insert(header.end(), {"MoE drop rate", "final aux loss"});
  Table t{header, {}};
  for (const auto& c : r.cells) {
    std::vector<std::string> row = {c.name, std::to_string(c.loss_curve.size()), "-", "-", fixed(c.tail_loss, 4)};
    if (!c.loss_curve.empty()) {
      row[2] = fmt::format("{:.4f} (step {})", c.loss_curve.front().loss, c.loss_curve.front().step);
      row[3] = fmt::format("{:.4f} (step {})", c.loss_curve.back().loss, c.loss_curve.back().step);
    }
    if (evaluated)
      row.push_back(c.validation_curve.empty() ? "-"
                                               : fmt::format("{:.4f} (step {})", c.validation_curve.back().loss,
                                                             c.validation_curve.back().step));
    if (moe) {
      row.push_back(c.moe_drop_rate ? fmt::format("{:.2f} %", *c.moe_drop_rate * 100) : "-");
      row.push_back(fixed(c.moe_final_aux_loss, 4));
    }
    t.rows.push_back(std::move(row));
  }
  const std::string per_step = fmt::format(
      "Median loss over each cell's ok runs per step (rank 0); {}: each run's mean over its last {} steps, the "
      "median over runs (what `ablate gate` judges: one step's loss is one batch).",
      tail, kDefaultLossWindow);
  const std::string explained =
      evaluated ? per_step + " Validation loss: on documents held out of training (train.eval_every, "
                             "data.validation_fraction), the same rows at every evaluation; median over ok runs."
                : per_step;
  s.blocks.push_back(Paragraph{moe ? explained + " MoE drop rate: expert slots the capacity factor dropped over those "
                                                "routed (0 when dropless), final aux loss: the load-balancing loss at "
                                                "the last step (1.0 for a uniform router); medians over ok runs."
                                   : explained});
  s.blocks.push_back(std::move(t));
  // The validation curves themselves (a few evaluations a run, unlike the per-step loss): a table too,
  // so the numbers behind the plot stay in the Markdown when it is left out.
  const bool curves = std::any_of(r.cells.begin(), r.cells.end(), [](const CellReport& c) { return c.validation_curve.size() > 1; });
  if (curves) {
    std::set<std::int64_t> steps;
    for (const auto& c : r.cells)
      for (const auto& p : c.validation_curve) steps.insert(p.step);
    std::vector<std::string> columns = {"step"};
    for (const auto& c : r.cells) columns.push_back(c.name);
    Table curve{columns, {}};
    for (const std::int64_t step : steps) {
      std::vector<std::string> row = {std::to_string(step)};
      for (const auto& c : r.cells) {
        const auto at = std::find_if(c.validation_curve.begin(), c.validation_curve.end(),
                                     [step](const LossPoint& p) { return p.step == step; });
        row.push_back(at == c.validation_curve.end() ? "-" : fmt::format("{:.4f}", at->loss));
      }
      curve.rows.push_back(std::move(row));
    }
    s.blocks.push_back(Paragraph{"Validation loss at each evaluation, the median over each cell's ok runs (each run's "
                                 "own: `ablate export --what evaluations`)."});
    s.blocks.push_back(std::move(curve));
  }
  return s;
}

Section goodput_section(const Report& r, const std::vector<Plot>& plots) {
  Section s{"Goodput", {}};
  add_plot(s, plots, "goodput.svg");
  std::vector<std::string> header = {"cell"};
  for (const auto& category : receipts::goodput_categories()) header.push_back(category + " s");
  header.insert(header.end(), {"fixed cost share", "steady goodput"});
  Table t{header, {}};
  for (const auto& c : r.cells) {
    std::vector<std::string> row = {c.name};
    for (const auto& category : receipts::goodput_categories()) {
      const auto it = c.goodput_seconds.find(category);
      row.push_back(it == c.goodput_seconds.end() ? "-" : fmt::format("{:.3f}", it->second));
    }
    row.push_back(c.side.median_fixed_share ? fmt::format("{:.1f} %", *c.side.median_fixed_share * 100) : "-");
    row.push_back(fixed(c.side.median_steady_goodput_pct, 1, " %"));
    t.rows.push_back(std::move(row));
  }
  s.blocks.push_back(Paragraph{"Seconds of wall time per ledger category, median over each cell's ok runs. Fixed cost: "
                               "start-up, data prep and warm-up, which do not grow with the steps; steady goodput: "
                               "productive time over the wall time without them (per run, then the median), so a "
                               "short run's goodput does not just measure its start-up."});
  s.blocks.push_back(std::move(t));
  return s;
}

Section memory_section(const Report& r, const std::vector<Plot>& plots) {
  Section s{"Memory", {}};
  add_plot(s, plots, "memory.svg");
  Table t{{"cell", "median peak (summary)", "max allocated (probes)", "max reserved (probes)", "alloc retries", "OOMs",
           "needed of a GPU", "allocator cap"},
          {}};
  bool any_probes = false, any_cap = false;
  for (const auto& c : r.cells) {
    const auto& m = c.memory;
    any_probes = any_probes || m.has_value();
    any_cap = any_cap || c.memory_limit_bytes.has_value();
    auto bytes = [](const std::optional<std::int64_t>& b) { return b ? gib(static_cast<double>(*b)) : "-"; };
    t.rows.push_back({c.name, gib(c.side.median_peak_memory_bytes), m ? bytes(m->max_allocated) : "-",
                      m ? bytes(m->max_reserved) : "-", m ? std::to_string(m->alloc_retries) : "-",
                      m ? std::to_string(m->ooms) : "-", bytes(c.gpu_needed_bytes), bytes(c.memory_limit_bytes)});
  }
  if (!any_probes) s.blocks.push_back(Paragraph{"No memory probes recorded: peak memory comes from the run summaries only."});
  s.blocks.push_back(Paragraph{
      std::string("Needed of a GPU: the most any ok run of the cell needed (the caching allocator's reserved peak plus "
                  "the device memory beside it: CUDA context, NCCL's buffers; data parallel, the rank that needed "
                  "most); '-' for CPU runs and receipts made before it was recorded.") +
      (any_cap ? " Allocator cap: train.memory_limit_gib, the cap standing in for a smaller GPU; a run that did not "
                 "fit under it failed out of memory and is listed under Runs."
               : "")});
  s.blocks.push_back(std::move(t));
  return s;
}

Section kernels_section(const Report& r) {
  Section s{"Kernel families", {}};
  bool any = false;
  for (const auto& c : r.cells) {
    if (c.kernels.empty()) {
      s.blocks.push_back(Paragraph{fmt::format("{}: no traces (no kernel rows for its ok runs).", c.name)});
      continue;
    }
    any = true;
    double total = 0;
    for (const auto& k : c.kernels) total += k.ms_per_run;
    Table t{{"family", "calls per run", "ms per run", "share"}, {}};
    for (const auto& k : c.kernels)
      t.rows.push_back({k.family, fmt::format("{:.1f}", k.calls_per_run), fmt::format("{:.3f}", k.ms_per_run),
                        total > 0 ? fmt::format("{:.1f} %", 100 * k.ms_per_run / total) : "-"});
    s.blocks.push_back(Paragraph{fmt::format("{} ({} traced run(s)):", c.name, c.traced_runs)});
    s.blocks.push_back(std::move(t));
  }
  if (!any) s.blocks.insert(s.blocks.begin(), Paragraph{"No traces: no run in this report was profiled."});
  return s;
}

Section backends_section(const Report& r) {
  Section s{"Backends", {}};
  if (r.backend_issues.empty()) {
    s.blocks.push_back(Paragraph{"Every run got the backend it requested at every seam."});
  } else {
    Table t{{"cell", "seam", "requested", "chosen", "observed", "mismatch", "reason", "runs"}, {}};
    for (const auto& i : r.backend_issues)
      t.rows.push_back({i.cell, i.seam, i.requested, i.chosen, i.observed.value_or("-"),
                        i.mismatch ? (*i.mismatch ? "yes" : "no") : "unknown",
                        i.reason.empty() ? "-" : i.reason, ids_text(i.run_ids)});
    s.blocks.push_back(std::move(t));
  }
  if (r.runs_without_observed_backends > 0) {
    s.blocks.push_back(Paragraph{fmt::format("{} run(s) were not profiled: their observed backends are unknown, so a "
                                             "chosen backend that did not really run cannot be detected there.",
                                             r.runs_without_observed_backends)});
  }
  return s;
}

Section environment_section(const Report& r) {
  Section s{"Environment", {}};
  Table t{{"key", "value", "runs"}, {}};
  for (const auto& [key, values] : r.environment) {
    for (const auto& v : values)
      t.rows.push_back({key, v.value, values.size() == 1 ? "all" : ids_text(v.run_ids)});
  }
  if (t.rows.empty()) {
    s.blocks.push_back(Paragraph{"No environment recorded for these runs.", true});
    return s;
  }
  std::vector<std::string> differing;
  for (const auto& [key, values] : r.environment)
    if (values.size() > 1) differing.push_back(key);
  if (!differing.empty())
    s.blocks.push_back(Paragraph{fmt::format("Differs between runs: {}.", fmt::join(differing, ", ")), true});
  s.blocks.push_back(std::move(t));
  return s;
}

}  // namespace

Report build_report(receipts::Store& store, const RunSelection& chosen, const ReportOptions& options) {
  RunSelection selection = chosen;
  split_groups_by_spec(store, selection);
  Report report;
  for (const auto& declared : chosen.declared_cells) {
    const auto group = std::find_if(chosen.groups.begin(), chosen.groups.end(),
                                    [&](const RunGroup& g) { return g.name == declared.name; });
    report.declared_cells.push_back(
        {declared.name, group == chosen.groups.end() ? std::vector<std::int64_t>{} : group->run_ids, declared.no_runs_reason});
  }
  report.title = selection.title;
  report.matrix_id = selection.matrix_id;
  report.notes = selection.notes;
  CompareOptions compare;
  compare.allow_mismatch = true;  // a report shows mismatches instead of refusing
  compare.bootstrap = options.bootstrap;
  const auto& baseline_ids = selection.groups.at(0).run_ids;
  for (std::size_t g = 0; g < selection.groups.size(); ++g) {
    const RunGroup& group = selection.groups[g];
    CellReport cell;
    cell.name = group.name;
    if (g == 0) {
      cell.side = load_side(store, group.run_ids);
    } else {
      Comparison c = compare_runs(store, baseline_ids, group.run_ids, compare);
      cell.side = std::move(c.b);
      cell.vs_baseline = c.step_ratio;
      cell.u_test = c.u_test;
      cell.verdict = c.verdict;
      cell.mismatches = std::move(c.mismatches);
    }
    if (!cell.side.evidence.empty()) cell.step_ms = median_interval(cell.side.step_ms(), options.bootstrap);
    std::vector<double> mfu;
    for (const auto& run : cell.side.evidence)
      if (run.row.summary.mfu) mfu.push_back(*run.row.summary.mfu);
    cell.median_mfu = median_of(std::move(mfu));
    cell.goodput_seconds = goodput_medians(store, cell.side);
    cell.loss_curve =
        median_curve(store, cell.side, "SELECT step, loss FROM steps WHERE run_id = ? AND rank = 0 AND loss IS NOT NULL");
    cell.validation_curve =
        median_curve(store, cell.side, "SELECT step, loss FROM evaluations WHERE run_id = ? AND loss IS NOT NULL");
    cell.tail_loss = median_of(windowed_run_losses(store, cell.side, kDefaultLossWindow));
    add_kernels(store, cell);
    add_memory(store, cell);
    add_backends(store, cell, report);
    add_environment(store, cell, report);
    add_scaling(cell);
    add_moe(cell);
    add_model(cell);
    report.cells.push_back(std::move(cell));
  }
  add_efficiencies(report);
  std::size_t evidence = 0;
  for (const auto& c : report.cells) evidence += c.side.evidence.size();
  if (evidence == 0) report.notes.push_back("No run in this report is evidence (no complete ok run): nothing can be compared.");
  return report;
}

json to_json(const Report& r) {
  json cells = json::array();
  for (const auto& c : r.cells) cells.push_back(cell_json(c));
  json backends = json::array();
  for (const auto& i : r.backend_issues)
    backends.push_back({{"cell", i.cell}, {"seam", i.seam}, {"requested", i.requested}, {"chosen", i.chosen},
                        {"observed", value_or_null(i.observed)}, {"mismatch", value_or_null(i.mismatch)}, {"reason", i.reason},
                        {"run_ids", i.run_ids}});
  json env = json::object();
  for (const auto& [key, values] : r.environment) {
    env[key] = json::array();
    for (const auto& v : values) env[key].push_back({{"value", v.value}, {"run_ids", v.run_ids}});
  }
  json declared = json::array();
  for (const auto& d : r.declared_cells)
    declared.push_back({{"name", d.name},
                        {"run_ids", d.run_ids},
                        {"no_runs_reason", d.no_runs_reason.empty() ? json(nullptr) : json(d.no_runs_reason)}});
  return {{"title", r.title},
          {"matrix_id", value_or_null(r.matrix_id)},
          {"declared_cells", declared},
          {"baseline", r.baseline().name},
          {"min_repeats", kMinRepeats},
          {"notes", r.notes},
          {"cells", cells},
          {"backend_issues", backends},
          {"runs_without_observed_backends", r.runs_without_observed_backends},
          {"scaling_reference", value_or_null(r.scaling_reference)},
          {"environment", env}};
}

Document to_document(const Report& r, const std::vector<Plot>& plots, const std::string& plot_note) {
  Document d;
  d.title = "ablate report: " + r.title;
  d.sections.push_back(summary_section(r, plot_note.empty() ? std::vector<std::string>{} : std::vector{plot_note}));
  d.sections.push_back(model_section(r));
  if (r.has_multi_gpu) d.sections.push_back(scaling_section(r));
  d.sections.push_back(step_time_section(r, plots));
  d.sections.push_back(loss_section(r, plots));
  d.sections.push_back(goodput_section(r, plots));
  d.sections.push_back(memory_section(r, plots));
  d.sections.push_back(kernels_section(r));
  d.sections.push_back(backends_section(r));
  d.sections.push_back(environment_section(r));
  d.sections.push_back(runs_section(r));
  return d;
}

RowTable summary_table(const Report& r) {
  RowTable out;
  out.columns = {"cell",           "baseline",          "ok_runs",           "not_counted_runs",  "median_step_ms",
                 "median_step_ms_low", "median_step_ms_high", "ratio_vs_baseline", "ratio_low",        "ratio_high",
                 "u_test_p_value", "verdict",           "median_tokens_per_s", "median_mfu",       "median_goodput_pct",
                 "median_peak_memory_bytes", "median_steady_goodput_pct", "median_fixed_cost_share"};
  auto value = [](const std::optional<double>& v) { return value_or_null(v); };
  for (std::size_t i = 0; i < r.cells.size(); ++i) {
    const auto& c = r.cells[i];
    const auto& s = c.step_ms;
    const auto& v = c.vs_baseline;
    out.rows.push_back({c.name, i == 0, c.side.evidence.size(), c.side.excluded.size(),
                        s ? json(s->ratio) : json(nullptr), s ? json(s->low) : json(nullptr), s ? json(s->high) : json(nullptr),
                        v ? json(v->ratio) : json(nullptr), v ? json(v->low) : json(nullptr), v ? json(v->high) : json(nullptr),
                        c.u_test ? json(c.u_test->p_value) : json(nullptr),
                        i == 0 ? json("baseline") : json(to_string(c.verdict)), value(c.side.median_tokens_per_s),
                        value(c.median_mfu), value(c.side.median_goodput_pct), value(c.side.median_peak_memory_bytes),
                        value(c.side.median_steady_goodput_pct), value(c.side.median_fixed_share)});
  }
  return out;
}

}  // namespace ablate::report
