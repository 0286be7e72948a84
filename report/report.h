// report/report.h: `ablate report`: everything the store knows about a set of cells (a matrix, or
// runs picked by a selector; report/selection.h), as one model that renders to Markdown, HTML and JSON.
// Per cell: runs counted (evidence) and not counted (failed, killed, abandoned, incomplete: listed with
// why, never used), median step time with a bootstrap 95 % interval, the ratio to the baseline cell
// with its interval, U test and verdict (compare_runs; fewer than 3 evidence runs a side reads
// "unreliable", never a win), tokens/s, MFU, goodput (and its ledger, with the fixed start-up cost set
// apart: steady goodput, compare.h), peak memory, the median loss
// curve, kernel time per family (when traced), backend fallbacks/mismatches, and the environment; when
// a cell ran data parallel, a Scaling section (tokens/s per GPU, efficiency against the 1-GPU cell,
// communication share, straggler ratio per world size).
// Output is deterministic for a given store (stable order, fixed decimals, no clock), so Markdown can
// be compared with a golden file.
//   auto report = build_report(store, select_matrix(store, "tiny_cpu"));
//   write_report(report, make_plots(report), "out/");   // report.md, report.html, report.json, *.svg
// Tests: tests/report/report_test.cpp (report_tests), tests/ablations/matrix_cli_test.cpp (end to end).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "receipts/store.h"
#include "report/compare.h"
#include "report/document.h"
#include "report/row_table.h"
#include "report/selection.h"
#include "report/stats.h"

namespace ablate::report {

struct LossPoint {
  std::int64_t step = 0;
  double loss = 0;  // median over the cell's evidence runs that logged this step (rank 0)
};

struct KernelFamily {
  std::string family;
  double calls_per_run = 0;
  double ms_per_run = 0;  // total kernel time per traced run
};

struct MemoryProbes {  // from the `memory` table, over the cell's evidence runs
  std::optional<std::int64_t> max_allocated, max_reserved;
  std::int64_t alloc_retries = 0, ooms = 0;
};

// Data parallel (facts.distributed of each evidence run): throughput per GPU and where a
// multi-GPU step's time went. A single-process run counts as 1 GPU.
struct ScalingFacts {
  std::optional<std::int64_t> world_size;       // absent without evidence runs, or when they differ (mixed)
  bool mixed_world = false;
  std::optional<double> tokens_per_s_per_gpu;   // median over evidence runs of tokens/s / world size
  std::optional<double> efficiency;             // per-GPU tokens/s over the 1-GPU cell's
  std::optional<double> comm_share, comm_wait_share;  // medians over evidence runs
  // DistributedFacts::exposed_comm_share (communication with no other GPU work beside it, over the
  // profile window), median over the evidence runs that traced one.
  std::optional<double> exposed_comm_share;
  // DistributedFacts::exposed_by_collective: each kind's exposed share, median over the evidence runs
  // that traced it (kinds may overlap one another, so they can add up to more than the total).
  receipts::CollectiveShares exposed_by_collective;
  // The largest time a rank's collectives waited for the slowest rank, over the step (median over
  // evidence runs): the straggler measure. The ratio of the ranks' step-time medians is kept for the
  // record only: synchronous data parallel makes every rank's step as long as the slowest's (~1).
  std::optional<double> straggler_wait_share, straggler_ratio;
  // distributed.sharding of the evidence runs, with the reduction's and the GEMM weights' dtype where not
  // fp32 ("optimizer, reduce bf16, weights bf16"; "mixed" when they differ; absent in runs recorded before
  // it), and rank 0's collectives a step by kind (medians over evidence runs; NCCL timing).
  std::optional<std::string> sharding;
  std::optional<double> all_reduce_ms, reduce_scatter_ms, all_gather_ms, all_to_all_ms;
};

struct CellReport {
  std::string name;
  Side side;                                   // evidence and excluded runs, medians
  std::optional<RatioInterval> step_ms;        // median step ms with its bootstrap interval
  std::optional<RatioInterval> vs_baseline;    // step-time ratio cell/baseline; absent for the baseline
  std::optional<MannWhitney> u_test;
  Difference verdict = Difference::unreliable;
  std::optional<double> median_mfu;
  std::map<std::string, double> goodput_seconds;  // per ledger category, median over evidence runs
  std::vector<LossPoint> loss_curve;
  // Loss on held-out data per evaluation step (train.eval_every), median over evidence runs; empty
  // when the cell's runs did not evaluate.
  std::vector<LossPoint> validation_curve;
  // Median over evidence runs of each run's mean loss over its last kDefaultLossWindow steps: the
  // loss the gate judges (report/gate.h).
  std::optional<double> tail_loss;
  std::size_t traced_runs = 0;                 // evidence runs with kernel rows
  std::vector<KernelFamily> kernels;           // by time, largest first
  std::optional<MemoryProbes> memory;          // absent when no memory rows
  // facts.memory of the evidence runs (CUDA): the most any needed of a GPU (the allocator's reserved
  // peak + what lay beside it, the largest rank), and the allocator cap they ran under (the largest;
  // absent when none had one).
  std::optional<std::int64_t> gpu_needed_bytes, memory_limit_bytes;
  std::vector<FieldDifference> mismatches;     // against the baseline, other than the factor
  ScalingFacts scaling;
  // The MoE router (facts.moe, models with E blocks): medians over evidence runs of the share
  // of expert slots the capacity factor dropped and of the final load-balancing loss.
  std::optional<double> moe_drop_rate, moe_final_aux_loss;
  // An evidence run's RunFacts::experts_skip_dropped_slots (the summary says so beside a drop rate above 0).
  bool experts_skip_dropped_slots = false;
  // The model as its evidence runs ran it (facts.model; absent in receipts older than the section),
  // and how many evidence runs recorded none. One spec per cell, so one model.
  std::optional<receipts::ModelFacts> model;
  std::size_t runs_without_model = 0;
};

// A backend whose chosen or observed implementation is not what was asked for.
struct BackendIssue {
  std::string cell, seam, requested, chosen, reason;
  std::optional<std::string> observed;
  std::optional<bool> mismatch;  // observed disagrees with chosen (run_backends.mismatch); unknown unprofiled
  std::vector<std::int64_t> run_ids;
};

struct EnvValue {
  std::string value;
  std::vector<std::int64_t> run_ids;
};

// A cell a matrix declares, with its runs (every status) or why it has none.
struct DeclaredCellRuns {
  std::string name;
  std::vector<std::int64_t> run_ids;
  std::string no_runs_reason;  // "" when it has runs
};

struct Report {
  std::string title;
  std::optional<std::int64_t> matrix_id;
  std::vector<CellReport> cells;        // the baseline first
  std::vector<DeclaredCellRuns> declared_cells;  // a matrix report's every declared cell, in its order; else empty
  std::vector<BackendIssue> backend_issues;
  std::size_t runs_without_observed_backends = 0;  // not profiled: mismatches cannot be checked
  std::map<std::string, std::vector<EnvValue>> environment;  // key -> distinct values
  std::vector<std::string> notes;       // caveats about the data, shown at the top
  std::optional<std::string> scaling_reference;  // the 1-GPU cell efficiencies are against
  bool has_multi_gpu = false;           // some cell ran data parallel: the report gets a Scaling section
  const CellReport& baseline() const { return cells.front(); }
};

struct ReportOptions {
  BootstrapOptions bootstrap;
};

// A cell whose runs ran different specs becomes one cell per spec (split_groups_by_spec), with a note.
// Throws StoreError for an unknown run.
Report build_report(receipts::Store& store, const RunSelection& selection, const ReportOptions& options = {});

nlohmann::json to_json(const Report& report);
// The report as a document; `plots` go into their sections, `plot_note` (why plots are missing) at the top.
Document to_document(const Report& report, const std::vector<Plot>& plots, const std::string& plot_note);

// The per-cell summary as raw values (null when unknown), one record per cell: what
// `ablate export --what summaries` writes.
RowTable summary_table(const Report& report);

}  // namespace ablate::report
