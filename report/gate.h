// report/gate.h: the keep/drop gate (docs/architecture.md "Keep/drop gate") for one backend of one seam, decided
// from receipts: baseline runs against candidate runs that differ only in backends.<seam>.
//   KEEP          the candidate is faster on median step time with the 95 % interval of the ratio
//                 excluding 1 (>= 3 evidence runs a side), its final loss is within the tolerance of the
//                 baseline's, and none of its runs failed;
//   DROP          a candidate run failed, or the final loss is out of tolerance, or it is slower with
//                 the interval excluding 1;
//   INCONCLUSIVE  otherwise (noise, too few repeats, no final loss recorded).
// Parity tests, fallbacks and warm-up/capture failures are not in the receipts yet, so they are not
// judged here. Tests: tests/report/gate_test.cpp (report_tests).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/compare.h"

namespace ablate::report {

struct GateOptions {
  std::string seam;
  std::string backend;
  double loss_tolerance = 0.02;  // relative difference of median final loss allowed
  CompareOptions compare;
};

struct GateResult {
  std::string seam, backend;
  receipts::Verdict verdict = receipts::Verdict::inconclusive;
  std::vector<std::string> reasons;  // why this verdict, one sentence each
  Comparison comparison;             // A = baseline, B = candidate
  std::optional<double> baseline_final_loss, candidate_final_loss;  // medians over evidence runs
  std::optional<double> loss_relative_difference;                   // |candidate - baseline| / |baseline|
  double loss_tolerance = 0;
  std::vector<std::int64_t> failed_candidate_runs;  // status failed or abandoned
  std::optional<std::string> catalog_role;          // role of seam/backend in the candidate runs' catalog
  std::optional<std::int64_t> matrix_id;            // when every evidence run comes from one matrix

  // The decision to store: evidence = both sides' evidence runs plus the failed candidate runs.
  receipts::Decision decision() const;
};

// Throws what compare_runs throws, std::invalid_argument when the candidate runs do not request
// `backend` at `seam` or the baseline runs do, and MismatchError when the specs differ in more than
// backends.<seam> (unless options.compare.allow_mismatch).
GateResult evaluate_gate(receipts::Store& store, const std::vector<std::int64_t>& baseline_ids,
                         const std::vector<std::int64_t>& candidate_ids, const GateOptions& options);

nlohmann::json to_json(const GateResult& result);
std::string render_text(const GateResult& result);

}  // namespace ablate::report
