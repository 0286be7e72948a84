// receipts/store_read.cpp: the read API of Store (list_runs, get_run, run_json, decisions, matrices, query).
// Derived status: a `running` row whose heartbeat is older than the stale limit reads as `abandoned`.
// Tests: tests/receipts/query_test.cpp, lifecycle_test.cpp.
#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "base/clock.h"
#include "receipts/store.h"

namespace ablate::receipts {
namespace {

// Column order is what read_run() expects. ?1 is the stale cutoff (unix seconds).
constexpr const char* kRunSelect =
    "SELECT id, name, CASE WHEN status = 'running' AND heartbeat_at < ?1 THEN 'abandoned' ELSE status END AS status, "
    "status AS stored_status, error, started_at, ended_at, heartbeat_at, pid, host, tags, lane, spec_hash, "
    "matrix_id, cell, repeat, steps, median_step_ms, tokens_per_s, mfu, goodput_pct, peak_memory_bytes, "
    "flops_version, summary_json, uid FROM runs";

// Columns stored as JSON text / 0-1 integers, decoded when a run is rendered as JSON.
constexpr std::array<std::string_view, 5> kJsonColumns = {"tags", "patterns", "spec_json", "summary_json",
                                                          "evidence_run_ids"};
constexpr std::array<std::string_view, 2> kBoolColumns = {"mismatch", "outlier"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

nlohmann::json column_value(const sql::Statement& st, int col) {
  switch (st.column_type(col)) {
    case SQLITE_INTEGER:
      return st.get_int(col);
    case SQLITE_FLOAT:
      return st.get_double(col);
    case SQLITE_NULL:
      return nullptr;
    default:
      return st.get_text(col);  // TEXT (and BLOB, which the schema never stores)
  }
}

// Every remaining row of `st` as a JSON object keyed by column name.
nlohmann::json rows_to_json(sql::Statement& st, bool decode) {
  std::vector<std::string> names;
  for (int c = 0; c < st.column_count(); ++c) names.push_back(st.column_name(c));
  nlohmann::json rows = nlohmann::json::array();
  while (st.step()) {
    nlohmann::json row = nlohmann::json::object();
    for (int c = 0; c < st.column_count(); ++c) {
      nlohmann::json value = column_value(st, c);
      if (decode && value.is_string() && contains(kJsonColumns, names[c])) {
        value = nlohmann::json::parse(value.get<std::string>());
      } else if (decode && value.is_number_integer() && contains(kBoolColumns, names[c])) {
        value = value.get<std::int64_t>() != 0;
      }
      row[names[c]] = std::move(value);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

template <typename T>
nlohmann::json opt(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

RunRow read_run(const sql::Statement& st) {
  RunRow r;
  r.id = st.get_int(0);
  r.name = st.get_text(1);
  r.status = parse_run_status(st.get_text(2));
  r.stored_status = parse_run_status(st.get_text(3));
  r.error = st.opt_text(4);
  r.started_at = st.get_double(5);
  r.ended_at = st.opt_double(6);
  r.heartbeat_at = st.get_double(7);
  r.pid = st.opt_int(8);
  r.host = st.get_text(9);
  r.tags = nlohmann::json::parse(st.get_text(10)).get<std::vector<std::string>>();
  r.lane = st.get_text(11);
  r.spec_hash = st.get_text(12);
  r.matrix_id = st.opt_int(13);
  r.cell = st.opt_text(14);
  r.repeat = st.opt_int(15);
  r.summary.steps = st.opt_int(16);
  r.summary.median_step_ms = st.opt_double(17);
  r.summary.tokens_per_s = st.opt_double(18);
  r.summary.mfu = st.opt_double(19);
  r.summary.goodput_pct = st.opt_double(20);
  r.summary.peak_memory_bytes = st.opt_int(21);
  r.summary.flops_version = st.opt_text(22).value_or("");
  if (const auto facts = st.opt_text(23)) {
    const auto what = fmt::format("run {} summary_json", r.id);
    const auto j = nlohmann::json::parse(*facts, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw StoreError(fmt::format("{} is not valid JSON: the store is damaged", what));
    r.summary.facts = run_facts_from_json(j, what);
  }
  r.uid = st.get_text(24);
  return r;
}

nlohmann::json run_row_json(const RunRow& r) {
  const RunSummary& s = r.summary;
  return {
      {"id", r.id},
      {"uid", r.uid},
      {"name", r.name},
      {"status", to_string(r.status)},
      {"stored_status", to_string(r.stored_status)},
      {"error", opt(r.error)},
      {"started_at", r.started_at},
      {"ended_at", opt(r.ended_at)},
      {"heartbeat_at", r.heartbeat_at},
      {"pid", opt(r.pid)},
      {"host", r.host},
      {"tags", r.tags},
      {"lane", r.lane},
      {"spec_hash", r.spec_hash},
      {"matrix_id", opt(r.matrix_id)},
      {"cell", opt(r.cell)},
      {"repeat", opt(r.repeat)},
      {"evidence", is_evidence(r)},
      {"summary",
       {{"steps", opt(s.steps)},
        {"median_step_ms", opt(s.median_step_ms)},
        {"tokens_per_s", opt(s.tokens_per_s)},
        {"mfu", opt(s.mfu)},
        {"goodput_pct", opt(s.goodput_pct)},
        {"peak_memory_bytes", opt(s.peak_memory_bytes)},
        {"flops_version", s.flops_version},
        {"facts", to_json(s.facts)}}},
  };
}

bool is_glob(const std::string& pattern) { return pattern.find_first_of("*?[") != std::string::npos; }

bool starts_with_word(std::string_view text, std::string_view word) {
  if (text.size() < word.size()) return false;
  for (std::size_t i = 0; i < word.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(text[i])) != word[i]) return false;
  return text.size() == word.size() || !std::isalnum(static_cast<unsigned char>(text[word.size()]));
}

}  // namespace

double Store::stale_cutoff() const { return base::unix_now() - stale_s_; }

std::vector<RunRow> Store::list_runs(const RunFilter& filter) {
  std::string sql = fmt::format("SELECT * FROM ({}) AS r WHERE 1", kRunSelect);
  std::vector<sql::Param> params = {stale_cutoff()};
  auto where = [&](std::string_view condition, sql::Param value) {
    params.push_back(std::move(value));
    sql += fmt::format(" AND {}", fmt::format(fmt::runtime(condition), params.size()));
  };
  if (!filter.status.empty()) where("r.status = ?{}", std::string(to_string(parse_run_status(filter.status))));
  if (!filter.name.empty()) where(is_glob(filter.name) ? "r.name GLOB ?{}" : "instr(r.name, ?{}) > 0", filter.name);
  if (!filter.tag.empty()) where("EXISTS (SELECT 1 FROM json_each(r.tags) AS t WHERE t.value = ?{})", filter.tag);
  if (!filter.lane.empty()) where("r.lane = ?{}", filter.lane);
  if (!filter.since.empty()) where("r.started_at >= ?{}", base::parse_time(filter.since, base::unix_now()));
  if (filter.limit && *filter.limit <= 0) throw StoreError(fmt::format("--limit must be > 0, got {}", *filter.limit));
  params.push_back(filter.limit.value_or(-1));  // LIMIT -1: no limit
  sql += fmt::format(" ORDER BY r.started_at DESC, r.id DESC LIMIT ?{}", params.size());

  sql::Lease st = db_->prepare(sql);
  for (std::size_t i = 0; i < params.size(); ++i) st->bind(static_cast<int>(i + 1), params[i]);
  std::vector<RunRow> runs;
  while (st->step()) runs.push_back(read_run(*st));
  return runs;
}

RunRow Store::get_run(std::int64_t run_id) {
  sql::Lease st = db_->prepare(fmt::format("{} WHERE id = ?2", kRunSelect));
  st->bind_all(stale_cutoff(), run_id);
  if (!st->step()) throw StoreError(fmt::format("no run {} in {}", run_id, path_));
  return read_run(*st);
}

nlohmann::json Store::child_rows(std::string_view table, std::string_view order_by, std::int64_t run_id) {
  sql::Lease st = db_->prepare(fmt::format("SELECT * FROM {} WHERE run_id = ?1 ORDER BY {}", table, order_by));
  st->bind_all(run_id);
  nlohmann::json rows = rows_to_json(*st, true);
  for (auto& row : rows) row.erase("run_id");  // implied by the enclosing run
  return rows;
}

nlohmann::json Store::run_json(std::int64_t run_id, bool with_steps) {
  // One snapshot for the whole document, even while the run is still being written.
  return db_->read_transaction([&] {
    nlohmann::json out;
    out["run"] = run_row_json(get_run(run_id));
    out["env"] = nlohmann::json::object();
    for (const auto& row : child_rows("run_env", "key", run_id))
      out["env"][row["key"].get<std::string>()] = row["value"];
    const nlohmann::json spec = child_rows("run_spec", "run_id", run_id);
    out["spec"] = spec.empty() ? nlohmann::json(nullptr) : spec[0];
    out["backends"] = child_rows("run_backends", "seam", run_id);
    out["catalog"] = child_rows("catalog", "seam, backend", run_id);
    if (with_steps) out["steps"] = child_rows("steps", "rank, step", run_id);
    out["evaluations"] = child_rows("evaluations", "step", run_id);
    out["goodput"] = nlohmann::json::object();
    for (const auto& row : child_rows("goodput", "category", run_id)) {
      out["goodput"][row["category"].get<std::string>()] = row["seconds"];
    }
    out["memory"] = child_rows("memory", "rank, step, phase", run_id);
    out["kernels"] = child_rows("kernels", "rank, total_ns DESC, name", run_id);
    out["artifacts"] = child_rows("artifacts", "kind, path", run_id);
    out["annotations"] = child_rows("annotations", "created_at, id", run_id);
    out["profile"] = {{"windows", child_rows("profile_windows", "rank", run_id)},
                      {"time", child_rows("profile_time", "rank, step, dimension, total_ns DESC, key", run_id)},
                      {"attribution", child_rows("kernel_attribution", "rank, total_ns DESC, name, phase, layer", run_id)},
                      {"backend_evidence", child_rows("backend_evidence", "seam, total_ns DESC, kernel", run_id)}};
    const nlohmann::json cell = child_rows("matrix_cells", "matrix_id", run_id);
    out["matrix_cell"] = cell.empty() ? nlohmann::json(nullptr) : cell[0];
    return out;
  });
}

std::vector<MatrixCell> Store::matrix_cells(std::int64_t matrix_id) {
  if (!has_row("matrices", matrix_id)) throw StoreError(fmt::format("no matrix {} in {}", matrix_id, path_));
  sql::Lease st = db_->prepare(
      "SELECT cell, repeat, run_id FROM matrix_cells WHERE matrix_id = ? "
      "ORDER BY cell, repeat, run_id");
  st->bind_all(matrix_id);
  std::vector<MatrixCell> cells;
  while (st->step()) cells.push_back({st->get_text(0), st->get_int(1), st->get_int(2)});
  return cells;
}

std::vector<Decision> Store::list_decisions(const std::string& seam, const std::string& backend) {
  sql::Lease st = db_->prepare(
      "SELECT id, seam, backend, verdict, evidence_run_ids, matrix_id, details, decided_at FROM decisions "
      "WHERE (?1 = '' OR seam = ?1) AND (?2 = '' OR backend = ?2) ORDER BY decided_at DESC, id DESC");
  st->bind_all(seam, backend);
  std::vector<Decision> out;
  while (st->step()) {
    Decision d;
    d.id = st->get_int(0);
    d.seam = st->get_text(1);
    d.backend = st->get_text(2);
    d.verdict = parse_verdict(st->get_text(3));
    d.evidence_run_ids = nlohmann::json::parse(st->get_text(4)).get<std::vector<std::int64_t>>();
    d.matrix_id = st->opt_int(5);
    d.details = st->get_text(6);
    d.decided_at = st->get_double(7);
    out.push_back(std::move(d));
  }
  return out;
}

nlohmann::json Store::query(std::string_view sql, const std::vector<sql::Param>& params) {
  const auto first = sql.find_first_not_of(" \t\r\n");
  const std::string_view body = first == std::string_view::npos ? std::string_view() : sql.substr(first);
  if (!starts_with_word(body, "SELECT") && !starts_with_word(body, "WITH")) {
    throw StoreError(fmt::format("query() runs only SELECT/WITH statements on {}; refused: {}", path_, sql));
  }
  sql::Lease st = db_->prepare_uncached(sql);
  if (st->has_trailing_sql()) throw StoreError(fmt::format("query() runs one statement at a time; got: {}", sql));
  if (!st->readonly()) throw StoreError(fmt::format("query() is read-only; this statement writes: {}", sql));
  if (st->parameter_count() != static_cast<int>(params.size())) {
    throw StoreError(
        fmt::format("query() got {} parameters for {} placeholders in: {}", params.size(), st->parameter_count(), sql));
  }
  for (std::size_t i = 0; i < params.size(); ++i) st->bind(static_cast<int>(i + 1), params[i]);
  return rows_to_json(*st, false);
}

}  // namespace ablate::receipts
