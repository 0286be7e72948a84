// report/compare.h: comparison of two groups of runs from the receipt store (docs/architecture.md "Comparability and
// statistics"), behind `ablate compare A B` and `ablate gate`. Only evidence runs (receipts::is_evidence)
// count; the others are listed with the reason. Per run the statistic is its median steady-state step
// time; between groups: ratio of medians B/A with a bootstrap 95 % interval, Mann-Whitney U, a verdict.
// Comparability: environment fields and the spec are compared field by field. Spec fields that differ
// between the sides are the factor under test; any other difference (environment, harness revision, or
// anything differing among the runs of one side) is a mismatch, refused with MismatchError unless
// allowed, and then marked in the output. Where the factor is a backend (spec.backends.<seam>), what
// ran is read too (run_backends): a run that fell back or ran another backend's kernels at that seam
// is no evidence about the factor and is excluded with that reason (as the gate judges it).
// Tests: tests/report/compare_test.cpp (report_tests).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/store.h"
#include "report/stats.h"

namespace ablate::report {

// A comparison across a difference that is not the factor under test. An invalid_argument, so the CLI
// reports it as bad input (exit 2).
class MismatchError : public std::invalid_argument {
 public:
  MismatchError(const std::string& message, std::vector<std::string> fields)
      : std::invalid_argument(message), fields_(std::move(fields)) {}
  const std::vector<std::string>& fields() const { return fields_; }

 private:
  std::vector<std::string> fields_;
};

// Environment keys whose difference makes step times incomparable (run_env keys; harness/env.cpp,
// harness/train/device.cpp). git_revision, git_dirty, compiler, build_type, build_flags and
// cuda_arch_list say which harness binary ran: a GPU machine's own build and a carried prebuilt one
// (docs/gpu.md) differ, and so do a clean tree and a dirty one at the same revision. git_dirty
// compares as recorded: "unknown" differs from "false" (a tree not known to be clean), and two dirty
// trees at one revision pass though their changes may differ (the receipt has no hash of the changes).
// cpu_model: the host feeds the GPU. Not compared: gpu_count (the devices the process could see,
// which `matrix run --gpus` narrows per child; the devices a run used are spec.distributed.nproc),
// host, os, memory and the per-device details that gpu_model already determines.
const std::vector<std::string>& compared_env_keys();

// A run's goodput ledger (table goodput): seconds per category; a category without a row is absent.
std::map<std::string, double> goodput_seconds(receipts::Store& store, std::int64_t run_id);

// Goodput with the fixed cost set apart. Start-up, data preparation and the warm-up steps do not grow
// with the run's steps: in a short run they dominate wall time, and a posture that pays more of them
// up front (compilation, graph capture, autotuning) reads worse on plain goodput though its steps are
// faster. Steady goodput = productive / (wall - fixed), wall = the sum of every category.
struct SteadyGoodput {
  double fixed_seconds = 0;          // startup + data_prep + warmup
  double fixed_share = 0;            // of wall time
  std::optional<double> steady_pct;  // absent when nothing but fixed cost was charged
};
// Absent when the run has no ledger rows (or a zero wall time).
std::optional<SteadyGoodput> steady_goodput(const std::map<std::string, double>& seconds);
// Fixed cost above this share of wall time dominates: plain goodput then measures start-up, not training.
inline constexpr double kFixedCostDominates = 0.5;

// One run as the comparison sees it: its row and its comparable fields, "env.<key>" and
// "spec.<dotted.path>" -> value (JSON text for spec leaves, absent_value() when the run lacks it).
struct ComparedRun {
  receipts::RunRow row;
  std::map<std::string, std::string> fields;
  std::optional<SteadyGoodput> goodput;  // from its ledger rows
};
// A run's comparable fields as ComparedRun holds them (its run_env and run_spec rows).
std::map<std::string, std::string> comparable_fields(receipts::Store& store, std::int64_t run_id);
// Only its spec's: "spec.<dotted.path>" -> JSON text, without the fields that merely name or describe it.
std::map<std::string, std::string> spec_fields(receipts::Store& store, std::int64_t run_id);
// How a run lacking a field shows in ComparedRun::fields and FieldDifference values: a spec leaf the
// canonical spec leaves out is at its default ("(default)": a key added later is left out at its
// default, so that older specs keep their hash, and a spec made before the key existed ran as its
// default does); an environment key the run did not record is "(absent)".
std::string absent_value(const std::string& field);

// Why a run is not evidence (receipts::is_evidence): its status and error, or the summary fields it
// lacks; "" for an evidence run.
std::string not_evidence_reason(const receipts::RunRow& run);

struct ExcludedRun {
  std::int64_t run_id = 0;
  receipts::RunStatus status = receipts::RunStatus::running;
  std::string reason;
};

// A run that did not run, at a seam, the backend its spec requested there: its chosen backend is
// another (a fallback, run_backends.chosen), or its profiled kernels matched another backend than the
// chosen one (run_backends.mismatch). Requested is not observed.
struct BackendShortfall {
  std::int64_t run_id = 0;
  std::string seam, requested, chosen;
  std::optional<std::string> observed;
  bool mismatch = false;  // observed disagrees with chosen
  bool fell_back() const { return chosen != requested; }
};

// The runs among `run_ids` whose run_backends row at `seam` records a fallback or a mismatch, by run
// id (a run without a row there, e.g. an old receipt, is not judged).
std::vector<BackendShortfall> backend_shortfalls(receipts::Store& store, const std::vector<std::int64_t>& run_ids,
                                                 const std::string& seam);

struct Side {
  std::vector<ComparedRun> evidence;     // in the order the ids were given
  std::vector<ExcludedRun> excluded;  // not evidence, with why
  std::vector<std::int64_t> evidence_ids() const;
  std::vector<double> step_ms() const;  // per evidence run, its median_step_ms
  // Medians over the evidence runs; absent when the side has none.
  std::optional<double> median_step_ms, median_tokens_per_s, median_goodput_pct, median_peak_memory_bytes;
  // What the runs needed of a GPU (facts.memory.needed_bytes: the allocator's reserved peak + what lay
  // beside it), over the evidence runs that recorded it: the allocator's posture (a cap, expandable
  // segments, a captured graph's pool) moves it where the allocated peak stays put.
  std::optional<double> median_gpu_needed_bytes;
  // Over the evidence runs with goodput ledger rows (SteadyGoodput): fixed cost in seconds and as a share
  // of wall time, and steady goodput in percent.
  std::optional<double> median_fixed_seconds, median_fixed_share, median_steady_goodput_pct;
  bool fixed_cost_dominates() const { return median_fixed_share && *median_fixed_share > kFixedCostDominates; }
};

// The runs `ids` sorted into evidence and excluded (with why), with the evidence medians filled in.
// Throws StoreError for an unknown run.
Side load_side(receipts::Store& store, const std::vector<std::int64_t>& ids);

// A field whose values differ: between the sides, or among the runs of one side (within_side).
struct FieldDifference {
  std::string field;
  std::vector<std::string> a_values;  // distinct values on side A, sorted
  std::vector<std::string> b_values;
  bool within_side = false;
};

// Kernel time per step of one family over the profiled window (profile_time, rank 0): per run the
// window's total divided by its steps, per side the median over evidence runs that were profiled.
struct FamilyTime {
  std::string family;
  std::optional<double> a_ms_per_step, b_ms_per_step;  // absent: that side has no trace of the family
  std::size_t a_runs = 0, b_runs = 0;                   // profiled evidence runs behind each median
};

struct Comparison {
  Side a, b;
  std::optional<RatioInterval> step_ratio;  // median step time B/A; absent when a side has no evidence
  std::optional<MannWhitney> u_test;
  Difference verdict = Difference::unreliable;  // of B against A, for step time
  std::optional<double> tokens_per_s_delta_pct;       // (B/A - 1) * 100
  std::optional<double> goodput_delta_points;         // B - A, percentage points
  std::optional<double> steady_goodput_delta_points;  // B - A, percentage points
  std::optional<double> peak_memory_delta_bytes;      // B - A
  std::optional<double> gpu_needed_delta_bytes;       // B - A
  std::vector<FamilyTime> family_times;     // by family, when either side has profiled runs
  std::vector<FieldDifference> factor;      // spec fields that differ between the sides
  // Complete ok runs that did not run the backend they requested at a seam of the factor: no evidence
  // about that factor, for or against, so moved out of the side's evidence (listed in its excluded).
  std::vector<BackendShortfall> a_shortfalls, b_shortfalls;
  std::vector<FieldDifference> mismatches;  // every other difference
  bool mismatch_allowed = false;            // mismatches non-empty and --allow-mismatch given
};

struct CompareOptions {
  bool allow_mismatch = false;
  BootstrapOptions bootstrap;
};

// Throws StoreError for an unknown run, std::invalid_argument for an empty side or a run on both sides,
// MismatchError when the sides are not comparable and !allow_mismatch.
Comparison compare_runs(receipts::Store& store, const std::vector<std::int64_t>& a_ids,
                        const std::vector<std::int64_t>& b_ids, const CompareOptions& options = {});

// Run selectors of the CLI: "12", "12,13,14"; filters "tag:NAME", "name:GLOB", "lane:LANE", "since:DATE"
// (as `ablate runs --since`: ISO date, unix seconds or an age such as 30d), combinable with '&'
// ("lane:nam56r-small/1gpu&since:30d"); "cell:MATRIX/CELL" (that cell of the newest matrix of the
// name, every finished run: compare lists the failed ones as excluded). Filters pick runs with status
// ok, or, with include_unsuccessful, every finished or abandoned run too (the gate needs to see
// failures). Ids are returned oldest first. A filter's runs still running are left out (into *running
// when given, oldest first: the gate refuses them). Throws std::invalid_argument for a malformed
// selector or one that matches nothing.
std::vector<std::int64_t> select_runs(receipts::Store& store, std::string_view selector,
                                      bool include_unsuccessful = false, std::vector<std::int64_t>* running = nullptr);


nlohmann::json to_json(const Comparison& comparison);
std::string render_text(const Comparison& comparison);

}  // namespace ablate::report
