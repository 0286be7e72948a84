// report/gate.h: the keep/drop gate (docs/architecture.md "Keep/drop gate") for one backend of one seam, decided
// from receipts: baseline runs against candidate runs that differ only in backends.<seam>.
// Every verdict other than INCONCLUSIVE needs the minimum evidence: kMinRepeats evidence runs a side, or,
// for a candidate failure, kMinRepeats baseline evidence runs and kMinRepeats candidate attempts (its
// evidence runs plus its failed ones). A DROP condition seen on fewer runs is reported and the verdict is
// INCONCLUSIVE: one failure beside one baseline run says nothing about the backend.
//   KEEP          the candidate is faster on median step time with the 95 % interval of the ratio
//                 excluding 1, its loss is within the tolerance of the baseline's, its median peak
//                 memory grew by no more than the memory tolerance, none of its runs failed, and every
//                 run really ran what it asked for at the seam;
//   DROP          a candidate run failed, or the loss is out of tolerance and out of the baseline runs'
//                 own spread, or a candidate run could
//                 not use the whole-step CUDA graph that every baseline run captured, or (the candidate
//                 having run) it is slower with the interval excluding 1 or its peak memory grew beyond
//                 the tolerance;
//   INCONCLUSIVE  otherwise (noise, too few repeats, no loss recorded, a loss beyond the tolerance but
//                 within the baseline runs' own spread), and whenever a run's
//                 receipt says another backend ran at the seam: a candidate run that fell back (its
//                 chosen backend is not the candidate), or a profiled run of either side whose kernels
//                 matched another backend than the chosen one (run_backends.mismatch). Requested is
//                 not observed: such runs are no evidence about the backend, for or against.
// Killed and abandoned runs are no evidence either way (reported, never a failure); a run still
// running is refused (std::invalid_argument): a decision stored now would leave it out.
// The loss of a run is the mean over its last `loss_window` steps (rank 0's step rows; a run without
// step rows falls back to its summary's final_loss): one step's loss is one batch, and short runs of
// the same seed drift apart by a few percent there from reduction-order noise alone (fast_paths on an
// H100, 40 steps: the reference baseline's own last-step losses 4.153 / 4.159 / 4.300, 3.4 % apart;
// their means over the last 10 steps 4.787 / 4.791 / 4.803, 0.3 %).
// The first step's time (warm-up: lazy init, autotuning) is reported, not judged. Parity tests are not
// in the receipts yet, so they are not judged here.
// Convergence (the MLPerf reference-convergence idea: a change of numerics is judged by where training
// ends on held-out data against the reference's own seed-to-seed variation, not by a microbenchmark):
// each evidence run's validation loss at its last evaluation (facts.final_validation_loss,
// train.eval_every), the medians compared as the training loss is, against the loss tolerance or the
// baseline's spread over its seeds, with at least min_seeds distinct experiment.seed values a side:
//   PASS          within the tolerance or the baseline's seed spread, on enough seeds;
//   FAIL          beyond both on enough seeds: a DROP condition for any backend;
//   INCONCLUSIVE  too few seeds, or no validation loss on a side;
//   not judged    no validation loss on either side, for a backend that keeps the reference's numerics.
// A backend whose catalog row changes numerics beyond reduction order (kernels/catalog.h, recorded in
// the candidate runs' catalog snapshot) is KEEP only when the speed verdict is KEEP and convergence
// PASSes; otherwise the speed verdict stands (a FAIL still drops). Both verdicts are printed and stored.
// Roles follow the gate: the newest KEEP or DROP stored for a seam/backend whose candidate runs ran on
// a lane (runs.lane), with the minimum evidence, is that backend's standing decision there; a standing
// KEEP makes the backend `keep` on the lane (`ablate catalog --lane`), and a later gate there that does
// not say KEEP fails (`ablate gate` exit 1) until a DROP demotes it.
// Tests: tests/report/gate_test.cpp (report_tests), tests/harness/gate_cli_test.cpp (harness_tests).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/compare.h"
#include "report/selection.h"

namespace ablate::report {

// Steps at the end of a run whose mean loss stands for the run (gate and report alike).
constexpr std::int64_t kDefaultLossWindow = 10;

// Each evidence run's loss: the mean of rank 0's losses over its last `window` steps, or its summary's
// final_loss when it has no step rows (those runs appended to *from_summary when given). Runs with
// neither are left out.
std::vector<double> windowed_run_losses(receipts::Store& store, const Side& side, std::int64_t window,
                                        std::vector<std::int64_t>* from_summary = nullptr);

// The newest KEEP or DROP decision on a seam/backend for one lane: the lane of its candidate runs (the
// cited runs whose spec requests the backend at the seam). Only decisions with the minimum evidence
// stand: kMinRepeats baseline runs with status ok, and kMinRepeats candidate runs on the lane, ok ones
// for a KEEP, ok or failed for a DROP. INCONCLUSIVE decisions leave the standing one as it was.
struct StandingDecision {
  std::string seam, backend, lane;
  std::int64_t decision_id = 0;
  receipts::Verdict verdict = receipts::Verdict::inconclusive;
  double decided_at = 0;
};
// Every standing decision, by seam, backend and lane; empty arguments do not filter.
std::vector<StandingDecision> standing_decisions(receipts::Store& store, const std::string& seam = "",
                                                 const std::string& backend = "", const std::string& lane = "");
// "decision 12 (KEEP on lane L, 2026-11-27 11:02:03 UTC)".
std::string describe(const StandingDecision& decision);

struct GateOptions {
  std::string seam;
  std::string backend;
  double loss_tolerance = 0.02;                 // relative difference of median loss allowed
  std::int64_t loss_window = kDefaultLossWindow;  // a run's loss: the mean over its last this many steps
  double memory_tolerance = 0.10;  // relative growth of median peak memory allowed
  // Distinct experiment.seed values a side, among runs with a validation loss, for a convergence verdict.
  std::size_t min_seeds = 3;
  CompareOptions compare;
};

enum class Convergence { not_judged, pass, fail, inconclusive };
std::string_view to_string(Convergence c);  // "not judged", "PASS", "FAIL", "INCONCLUSIVE"

struct GateResult {
  std::string seam, backend;
  receipts::Verdict verdict = receipts::Verdict::inconclusive;
  std::vector<std::string> reasons;  // why this verdict, one sentence each
  Comparison comparison;             // A = baseline, B = candidate
  // Medians over evidence runs of each run's loss over its last loss_window steps.
  std::optional<double> baseline_loss, candidate_loss;
  std::optional<double> loss_relative_difference;  // |candidate - baseline| / |baseline|
  // The baseline runs' own spread, (max - min) / |median| of their losses (>= 2 runs with a loss):
  // a difference within it but beyond the tolerance is noise the repeats cannot resolve.
  std::optional<double> baseline_loss_spread;
  double loss_tolerance = 0;
  std::int64_t loss_window = 0;
  std::vector<std::int64_t> loss_from_summary_runs;  // evidence runs without step rows (final_loss used)
  std::vector<std::int64_t> failed_candidate_runs;  // status failed: evidence against the backend
  // Killed or abandoned (heartbeat stopped) candidate runs: interrupted, no evidence either way.
  std::vector<std::int64_t> killed_candidate_runs, abandoned_candidate_runs;
  // Options that loosen or change the gate from its defaults (--allow-mismatch with the fields it let
  // through, non-default tolerances or loss window), one each, as the command line spells them.
  std::vector<std::string> overrides;
  std::optional<double> baseline_peak_memory, candidate_peak_memory;  // medians over evidence runs, bytes
  std::optional<double> memory_relative_increase;                     // (candidate - baseline) / baseline
  double memory_tolerance = 0;
  // From run_backends at the seam (complete ok runs; compare_runs sets them aside from the evidence,
  // the decision keeps them): candidate runs whose chosen backend is not the candidate (a fallback),
  // and profiled runs of either side whose observed kernels contradict the chosen backend. Either
  // makes the speed and memory comparison say nothing about the backend.
  std::vector<std::int64_t> fallback_candidate_runs, mismatched_runs;
  // Candidate runs that requested a whole-step CUDA graph and did not get one while every baseline run
  // did (facts.cuda_graphs), with the first one's reason.
  std::vector<std::int64_t> capture_lost_runs;
  std::string capture_lost_reason;
  std::optional<double> baseline_first_step_ms, candidate_first_step_ms;  // medians over evidence runs
  std::optional<std::string> catalog_role;          // role of seam/backend in the candidate runs' catalog
  // The standing decisions (see standing_decisions) on the candidate runs' lanes before this gate.
  std::vector<StandingDecision> standing_before;
  std::optional<std::int64_t> matrix_id;            // when every evidence run comes from one matrix
  // Convergence on held-out data (see the header): medians over evidence runs of their final validation
  // loss, the relative difference, the baseline's spread over its runs, the distinct seeds a side.
  bool changes_numerics = false;  // the candidate runs' catalog snapshot says the backend does
  std::optional<double> baseline_validation_loss, candidate_validation_loss;
  std::optional<double> validation_relative_difference, baseline_validation_spread;
  std::size_t baseline_seeds = 0, candidate_seeds = 0, min_seeds = 0;
  Convergence convergence = Convergence::not_judged;
  receipts::Verdict speed_verdict = receipts::Verdict::inconclusive;  // the rules before convergence

  // Whether the backend was `keep` before this gate: a standing KEEP on a candidate lane, else (no
  // standing decision there) the role the candidate runs' catalog snapshot recorded.
  bool kept_before() const;
  // The decision to store: evidence = both sides' evidence runs plus the failed candidate runs; its
  // details start with the overrides it was made under.
  receipts::Decision decision() const;
};

// Throws what compare_runs throws, std::invalid_argument when a run of either side is still running
// (naming them) or the candidate runs do not request `backend` at `seam` or the baseline runs do, and
// MismatchError when the specs differ in more than
// backends.<seam> (unless options.compare.allow_mismatch).
GateResult evaluate_gate(receipts::Store& store, const std::vector<std::int64_t>& baseline_ids,
                         const std::vector<std::int64_t>& candidate_ids, const GateOptions& options);

// The gates a matrix implies, one a cell that sets a single backends.<seam> (`backends.<seam>=<name>`):
// the cell's backend judged against the baseline cell; but a cell that turns a seam back to its
// `reference` (a leave-one-out matrix over a fast posture, ablations/fast_posture.toml) judges the
// baseline's backend at that seam, with the cell's runs as its baseline: does that backend earn its
// place in the posture. Other cells are named in *skipped with the reason. A backend cell the matrix
// declares but holds no run of (refused before its run began, e.g. an unavailable backend under
// backends.strict, or never started) is named in *unjudged with why: no verdict can be formed on it.
// Without a run of the matrix's baseline cell every backend cell is unjudged, and no gate is returned.
struct GateJob {
  std::string cell;  // "" for a gate given by selectors (ablate gate --baseline/--candidate)
  std::vector<std::int64_t> baseline, candidate;
  std::string seam, backend;
};
std::vector<GateJob> matrix_gates(receipts::Store& store, const RunSelection& selection,
                                  std::vector<std::string>* skipped = nullptr, std::vector<std::string>* unjudged = nullptr);

nlohmann::json to_json(const GateResult& result);
std::string render_text(const GateResult& result);

}  // namespace ablate::report
