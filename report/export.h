// report/export.h: `ablate export`: receipts as flat tables for pandas (CSV or JSON, report/row_table.h).
//   runs       one row per run: identity, status, summary, evidence flag, final loss
//   steps      one row per logged step (rank, step, wall ms, tokens, loss, ...) with its run id, its
//              run's status, whether that run is evidence and, when not, why; by default only the
//              steps of evidence runs (receipts::is_evidence), as a report counts them
//   evaluations one row per held-out evaluation (step, validation loss, tokens, seconds) with its run id,
//              status and evidence, evidence runs only by default as for steps: a convergence matrix's
//              validation curves as text
//   summaries  one row per cell of the report over the same runs (report::summary_table)
// Unknown values are null (JSON) / empty (CSV); every column is always present.
// Tests: tests/report/export_test.cpp (report_tests).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "receipts/store.h"
#include "report/row_table.h"

namespace ablate::report {

enum class ExportTable { runs, steps, evaluations, summaries };
// Throws std::invalid_argument naming the valid tables.
ExportTable parse_export_table(std::string_view text);

RowTable export_runs(receipts::Store& store, const std::vector<std::int64_t>& run_ids);
// Runs that are not evidence are left out unless include_non_evidence; *left_out (when given) gets
// their ids. Throws StoreError for an unknown run.
RowTable export_steps(receipts::Store& store, const std::vector<std::int64_t>& run_ids, bool include_non_evidence = false,
                      std::vector<std::int64_t>* left_out = nullptr);
// The same for the held-out evaluations (a NaN loss, stored as NULL, is null).
RowTable export_evaluations(receipts::Store& store, const std::vector<std::int64_t>& run_ids,
                            bool include_non_evidence = false, std::vector<std::int64_t>* left_out = nullptr);

// Every run in the store that has finished or been abandoned, oldest first (export without a selector).
std::vector<std::int64_t> all_finished_runs(receipts::Store& store);

}  // namespace ablate::report
