// report/export.cpp: runs, steps and evaluations as RowTable for `ablate export` (see export.h).
// Tests: tests/report/export_test.cpp (report_tests).
#include "report/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "report/compare.h"
#include "report/json_fields.h"

namespace ablate::report {

using nlohmann::json;

ExportTable parse_export_table(std::string_view text) {
  if (text == "runs") return ExportTable::runs;
  if (text == "steps") return ExportTable::steps;
  if (text == "evaluations") return ExportTable::evaluations;
  if (text == "summaries") return ExportTable::summaries;
  throw std::invalid_argument(fmt::format("--what '{}': expected runs, steps, evaluations or summaries", text));
}

RowTable export_runs(receipts::Store& store, const std::vector<std::int64_t>& run_ids) {
  RowTable out;
  out.columns = {"run_id",         "name",          "status",       "error",        "started_at",  "ended_at",
                 "host",           "tags",          "lane",         "spec_hash",    "matrix_id",   "cell",
                 "repeat",         "evidence",      "steps",        "median_step_ms", "tokens_per_s", "mfu",
                 "goodput_pct",    "peak_memory_bytes", "flops_version", "final_loss", "final_validation_loss"};
  for (const std::int64_t id : run_ids) {
    const auto r = store.get_run(id);
    const auto& s = r.summary;
    out.rows.push_back({r.id, r.name, std::string(receipts::to_string(r.status)), value_or_null(r.error), r.started_at,
                        value_or_null(r.ended_at), r.host, json(r.tags), r.lane, r.spec_hash,
                        value_or_null(r.matrix_id), value_or_null(r.cell), value_or_null(r.repeat),
                        receipts::is_evidence(r), value_or_null(s.steps), value_or_null(s.median_step_ms),
                        value_or_null(s.tokens_per_s), value_or_null(s.mfu), value_or_null(s.goodput_pct),
                        value_or_null(s.peak_memory_bytes),
                        s.flops_version.empty() ? json(nullptr) : json(s.flops_version), value_or_null(s.facts.final_loss),
                        value_or_null(s.facts.final_validation_loss)});
  }
  return out;
}

namespace {

// One row per row of a per-run table (`columns` of `table`, ordered by `order`), after the run's id,
// status and evidence; runs that are not evidence left out unless include_non_evidence.
RowTable export_per_run(receipts::Store& store, const std::vector<std::int64_t>& run_ids, const std::string& table,
                        const std::vector<std::string>& columns, const std::string& order, bool include_non_evidence,
                        std::vector<std::int64_t>* left_out) {
  RowTable out;
  out.columns = {"run_id", "status", "evidence", "not_evidence_reason"};
  out.columns.insert(out.columns.end(), columns.begin(), columns.end());
  const std::string sql = fmt::format("SELECT {} FROM {} WHERE run_id = ? ORDER BY {}", fmt::join(columns, ", "), table, order);
  for (const std::int64_t id : run_ids) {
    const auto run = store.get_run(id);  // an unknown run is an error, not an empty table
    const std::string reason = not_evidence_reason(run);
    if (!reason.empty() && !include_non_evidence) {
      if (left_out != nullptr) left_out->push_back(id);
      continue;
    }
    for (const auto& row : store.query(sql, {id})) {
      std::vector<json> values = {id, std::string(receipts::to_string(run.status)), reason.empty(),
                                  reason.empty() ? json(nullptr) : json(reason)};
      for (const auto& column : columns)
        values.push_back(column == "outlier" ? json(row[column].get<std::int64_t>() != 0) : row[column]);  // 0/1 in SQLite
      out.rows.push_back(std::move(values));
    }
  }
  return out;
}

}  // namespace

RowTable export_steps(receipts::Store& store, const std::vector<std::int64_t>& run_ids, bool include_non_evidence,
                      std::vector<std::int64_t>* left_out) {
  return export_per_run(store, run_ids, "steps",
                        {"rank", "step", "wall_ms", "tokens", "loss", "grad_norm", "lr", "mem_allocated_peak",
                         "mem_reserved_peak", "rss_bytes", "data_wait_ms", "outlier", "moe_aux_loss", "moe_dropped_slots"},
                        "rank, step", include_non_evidence, left_out);
}

RowTable export_evaluations(receipts::Store& store, const std::vector<std::int64_t>& run_ids, bool include_non_evidence,
                            std::vector<std::int64_t>* left_out) {
  return export_per_run(store, run_ids, "evaluations", {"step", "loss", "tokens", "seconds"}, "step",
                        include_non_evidence, left_out);
}

std::vector<std::int64_t> all_finished_runs(receipts::Store& store) {
  std::vector<std::int64_t> ids;
  const auto rows = store.list_runs();
  for (auto it = rows.rbegin(); it != rows.rend(); ++it)
    if (it->status != receipts::RunStatus::running) ids.push_back(it->id);
  return ids;
}

}  // namespace ablate::report
