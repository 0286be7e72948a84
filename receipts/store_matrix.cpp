// receipts/store_matrix.cpp: the matrix rows a runner finds or creates, and the coordination between
// concurrent `ablate matrix run` processes on one matrix (schema v5: matrix_runners, matrix_claims).
// A claim holds while its runner lives (ended_at NULL, heartbeat newer than the stale limit, as runs
// read `abandoned`); each decision is one BEGIN IMMEDIATE transaction, so two runners never both take
// a (cell, repeat) pair. Tests: tests/receipts/store_test.cpp (MatrixClaims*), tests/ablations/.
#include <fmt/format.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/host.h"
#include "receipts/store.h"

namespace ablate::receipts {
namespace {

void require_matrix(const std::string& name, const std::string& spec_json) {
  if (name.empty()) throw StoreError("a matrix needs a name");
  if (!nlohmann::json::accept(spec_json)) {
    throw StoreError(fmt::format("the spec of matrix '{}' is not valid JSON: {}", name, spec_json.substr(0, 200)));
  }
}

}  // namespace

std::int64_t Store::create_matrix(const std::string& name, const std::string& spec_json) {
  require_matrix(name, spec_json);
  return db_->write_transaction([&] {
    sql::Lease st = db_->prepare("INSERT INTO matrices (name, spec_json, created_at) VALUES (?, ?, ?)");
    st->execute(name, spec_json, base::unix_now());
    return db_->last_insert_rowid();
  });
}

std::int64_t Store::find_or_create_matrix(const std::string& name, const std::string& spec_json) {
  require_matrix(name, spec_json);
  return db_->write_transaction([&]() -> std::int64_t {
    {
      sql::Lease find = db_->prepare("SELECT id FROM matrices WHERE name = ? AND spec_json = ? ORDER BY id LIMIT 1");
      find->bind_all(name, spec_json);
      if (find->step()) return find->get_int(0);
    }
    sql::Lease insert = db_->prepare("INSERT INTO matrices (name, spec_json, created_at) VALUES (?, ?, ?)");
    insert->execute(name, spec_json, base::unix_now());
    return db_->last_insert_rowid();
  });
}

std::int64_t Store::begin_matrix_runner(std::int64_t matrix_id) {
  return db_->write_transaction([&] {
    if (!has_row("matrices", matrix_id)) throw StoreError(fmt::format("no matrix {} in {}", matrix_id, path_));
    const double now = base::unix_now();
    sql::Lease st = db_->prepare(
        "INSERT INTO matrix_runners (matrix_id, pid, host, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)");
    st->execute(matrix_id, static_cast<std::int64_t>(getpid()), base::host_name(), now, now);
    return db_->last_insert_rowid();
  });
}

void Store::matrix_runner_heartbeat(std::int64_t runner_id) {
  db_->write_transaction([&] {
    sql::Lease st = db_->prepare("UPDATE matrix_runners SET heartbeat_at = ? WHERE id = ? AND ended_at IS NULL");
    st->execute(base::unix_now(), runner_id);
  });
}

void Store::end_matrix_runner(std::int64_t runner_id) {
  db_->write_transaction([&] {
    sql::Lease st = db_->prepare("UPDATE matrix_runners SET ended_at = ? WHERE id = ? AND ended_at IS NULL");
    st->execute(base::unix_now(), runner_id);
  });
}

MatrixClaim Store::claim_matrix_slot(std::int64_t runner_id, const std::string& cell, std::int64_t repeat) {
  return db_->write_transaction([&]() -> MatrixClaim {
    std::int64_t matrix_id = 0;
    {
      sql::Lease st = db_->prepare("SELECT matrix_id FROM matrix_runners WHERE id = ? AND ended_at IS NULL");
      st->bind_all(runner_id);
      if (!st->step()) throw StoreError(fmt::format("no running matrix runner {} in {}", runner_id, path_));
      matrix_id = st->get_int(0);
    }
    const double cutoff = stale_cutoff();
    {  // Done: an ok run; taken: a live run recording the pair (started by hand, or by a runner that died).
      sql::Lease st = db_->prepare(
          "SELECT r.id, r.status FROM matrix_cells c JOIN runs r ON r.id = c.run_id "
          "WHERE c.matrix_id = ? AND c.cell = ? AND c.repeat = ? "
          "  AND (r.status = 'ok' OR (r.status = 'running' AND r.heartbeat_at >= ?)) "
          "ORDER BY r.status = 'ok' DESC, r.id LIMIT 1");
      st->bind_all(matrix_id, cell, repeat, cutoff);
      if (st->step()) {
        const bool ok = st->get_text(1) == "ok";
        return MatrixClaim{ok ? MatrixClaim::Outcome::done : MatrixClaim::Outcome::taken,
                           fmt::format("run {}{}", st->get_int(0), ok ? "" : " (running)")};
      }
    }
    {
      sql::Lease st = db_->prepare(
          "SELECT r.id, r.pid, r.host FROM matrix_claims c JOIN matrix_runners r ON r.id = c.runner_id "
          "WHERE c.matrix_id = ? AND c.cell = ? AND c.repeat = ? AND c.runner_id <> ? "
          "  AND r.ended_at IS NULL AND r.heartbeat_at >= ?");
      st->bind_all(matrix_id, cell, repeat, runner_id, cutoff);
      if (st->step()) {
        return MatrixClaim{MatrixClaim::Outcome::taken,
                           fmt::format("runner {} (pid {} on {})", st->get_int(0), st->get_int(1), st->get_text(2))};
      }
    }
    sql::Lease st = db_->prepare(
        "INSERT OR REPLACE INTO matrix_claims (matrix_id, cell, repeat, runner_id, claimed_at) VALUES (?, ?, ?, ?, ?)");
    st->execute(matrix_id, cell, repeat, runner_id, base::unix_now());
    return MatrixClaim{MatrixClaim::Outcome::claimed, ""};
  });
}

}  // namespace ablate::receipts
