// receipts/store.cpp: opening (file checks, pragmas, migrations) and the write API of Store.
// Reads live in store_read.cpp. Tests: tests/receipts/schema_test.cpp, store_test.cpp, concurrency_test.cpp.
#include "receipts/store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/host.h"
#include "receipts/schema.h"
#include "base/sha256.h"
#include "receipts/store_files.h"

namespace ablate::receipts {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSqliteMagic{"SQLite format 3\0", 16};

// The first bytes of `path`, read through SQLite's own VFS rather than std::ifstream: closing any
// descriptor of a file drops every POSIX lock this process holds on it, so a plain open/close would
// silently unlock other Stores open on the same file (WAL would then be checkpointed and deleted
// under their feet). The unix VFS shares descriptors per inode and defers the close while locks exist.
std::string read_header(const std::string& path, std::size_t bytes) {
  sqlite3_vfs* vfs = sqlite3_vfs_find(nullptr);
  std::string full(static_cast<std::size_t>(vfs->mxPathname) + 1, '\0');
  // SQLITE_OK_SYMLINK: the path (or a folder on it) is a symbolic link, which the VFS resolved.
  const int resolved = vfs->xFullPathname(vfs, path.c_str(), static_cast<int>(full.size()), full.data());
  if (resolved != SQLITE_OK && resolved != SQLITE_OK_SYMLINK) {
    throw StoreError(fmt::format("cannot resolve the path '{}': {}", path, sqlite3_errstr(resolved)));
  }
  std::vector<char> storage(static_cast<std::size_t>(vfs->szOsFile), 0);
  auto* file = reinterpret_cast<sqlite3_file*>(storage.data());
  int out_flags = 0;
  const int rc = vfs->xOpen(vfs, full.c_str(), file, SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB, &out_flags);
  std::string header(bytes, '\0');
  const int read_rc = rc == SQLITE_OK ? file->pMethods->xRead(file, header.data(), static_cast<int>(bytes), 0) : rc;
  if (file->pMethods != nullptr) file->pMethods->xClose(file);  // required even when xOpen failed
  if (rc != SQLITE_OK) throw StoreError(fmt::format("cannot read '{}': check its permissions", path));
  if (read_rc == SQLITE_IOERR_SHORT_READ) return {};
  if (read_rc != SQLITE_OK) throw StoreError(fmt::format("cannot read '{}': {}", path, sqlite3_errstr(read_rc)));
  return header;
}

// Refuses, before SQLite opens (and possibly rewrites) it, anything that is not a SQLite file.
// A missing or zero-length file is a new store.
void check_is_sqlite_file(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_regular_file(st)) {
    throw StoreError(fmt::format("'{}' is not a regular file; pass a receipts database with --db or ABLATE_DB", path));
  }
  if (fs::file_size(path, ec) == 0 && !ec) return;
  if (read_header(path, kSqliteMagic.size()) != kSqliteMagic) {
    throw StoreError(
        fmt::format("'{}' is not a SQLite database (it does not start with \"SQLite format 3\"); left untouched: pass "
                    "another --db or set ABLATE_DB",
                    path));
  }
}

// A SQLite file is ours if it carries our application_id, or is empty (version 0, no schema objects).
// Call inside a read transaction: the three reads must see one snapshot, or a file another process is
// migrating right now could look foreign (application_id still 0, tables already there).
void check_owner(sql::Connection& db, int version) {
  const auto app_id = db.scalar_int("PRAGMA application_id");
  if (app_id == schema::kApplicationId) return;
  const auto objects = db.scalar_int("SELECT count(*) FROM sqlite_master");
  if (app_id == 0 && version == 0 && objects == 0) return;
  throw StoreError(
      fmt::format("'{}' is a SQLite database but not an ablate receipt store (application_id {}, "
                  "schema version {}, {} schema objects); left untouched: pass another --db",
                  db.path(), app_id, version, objects));
}

void check_not_newer(const std::string& path, int version) {
  if (version <= schema::latest_version()) return;
  throw StoreError(
      fmt::format("{} has schema version {}, this ablate knows up to {}: upgrade ablate or use another --db", path,
                  version, schema::latest_version()));
}

void set_pragmas(sql::Connection& db) {
  const std::string mode = db.scalar_text("PRAGMA journal_mode = WAL");
  if (mode != "wal") {
    throw StoreError(
        fmt::format("cannot put '{}' in WAL mode (journal_mode stays '{}'); WAL needs a local "
                    "filesystem with shared memory: put the database on local disk",
                    db.path(), mode));
  }
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec("PRAGMA foreign_keys = ON");
  if (db.scalar_int("PRAGMA foreign_keys") != 1) {
    throw SqliteError(SQLITE_ERROR, "this SQLite build cannot enforce foreign keys (PRAGMA foreign_keys stays 0)");
  }
}

// Applies every pending migration in one BEGIN IMMEDIATE transaction. The version is re-read under the
// write lock, so when several processes open a fresh file at once exactly one of them migrates it.
void migrate(sql::Connection& db) {
  schema::register_functions(db.handle());
  db.write_transaction([&] {
    const int current = static_cast<int>(db.scalar_int("PRAGMA user_version"));
    check_not_newer(db.path(), current);
    const auto& steps = schema::migrations();
    for (int v = current; v < schema::latest_version(); ++v) db.exec(steps[static_cast<std::size_t>(v)]);
    db.exec(fmt::format("PRAGMA user_version = {}", schema::latest_version()));
  });
}

// SQLite skips the busy handler where waiting could deadlock, e.g. when several processes switch a
// fresh file to WAL at once: it returns SQLITE_BUSY at once. Such steps are retried here, with a short
// growing pause, until the busy timeout has passed.
template <typename Fn>
void retry_while_busy(int timeout_ms, Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int attempt = 1;; ++attempt) {
    try {
      fn();
      return;
    } catch (const SqliteError& e) {
      if ((e.code() & 0xff) != SQLITE_BUSY || Clock::now() >= deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 20)));
  }
}

void require_json(const std::string& text, std::string_view what) {
  if (!nlohmann::json::accept(text)) {
    throw StoreError(fmt::format("{} is not valid JSON: {}", what, text.substr(0, 200)));
  }
}

void require_finite(double value, std::string_view what) {
  if (!std::isfinite(value) || value < 0) {
    throw StoreError(fmt::format("{} must be a finite number >= 0, got {}", what, value));
  }
}

void require_one_of(const std::string& value, const std::vector<std::string>& allowed, std::string_view what) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    throw StoreError(fmt::format("unknown {} '{}': expected one of {}", what, value, fmt::join(allowed, ", ")));
  }
}

// Steps one insert; a primary-key clash becomes a StoreError with the caller's description of the row.
template <typename Describe>
void insert_unique(sql::Statement& st, Describe&& describe_duplicate) {
  try {
    st.run();
  } catch (const SqliteError& e) {
    if (e.code() == SQLITE_CONSTRAINT_PRIMARYKEY) throw StoreError(describe_duplicate());
    throw;
  }
  st.reset();
}

std::string to_json_array(const std::vector<std::string>& items) { return nlohmann::json(items).dump(); }

}  // namespace

bool in_folder_nobody_writes(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) == 0 || ec) return false;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return false;
  return ::access(real.parent_path().c_str(), W_OK) != 0;
}

// ---- open --------------------------------------------------------------------------------------

Store::Store(std::string path, double stale_s, std::unique_ptr<sql::Connection> db)
    : path_(std::move(path)), stale_s_(stale_s), db_(std::move(db)) {}

Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Store Store::open_existing(const std::string& path, StoreOptions options) {
  if (!std::filesystem::exists(path))
    throw StoreError(fmt::format("no receipt database at {}: run an experiment first, or pass --db / set ABLATE_DB", path));
  return open(path, options);
}

Store Store::open(const std::string& path, StoreOptions options) {
  if (path.empty()) throw StoreError("empty receipts database path: pass --db PATH or set ABLATE_DB");
  if (options.heartbeat_stale_s <= 0) throw StoreError("StoreOptions::heartbeat_stale_s must be > 0");
  if (options.busy_timeout_ms < 0) throw StoreError("StoreOptions::busy_timeout_ms must be >= 0");
  const double stale_s = base::env_seconds("ABLATE_HEARTBEAT_STALE_S", options.heartbeat_stale_s);  // bad value: fail early
  check_is_sqlite_file(path);
  if (in_folder_nobody_writes(path)) {
    // WAL needs a -shm file beside the store, which this folder cannot take: readers read an immutable
    // snapshot (no writer can exist here either); any write is refused as read-only (exit 2).
    auto db = std::make_unique<sql::Connection>(path, sql::OpenMode::immutable_snapshot);
    const int version = static_cast<int>(db->scalar_int("PRAGMA user_version"));
    check_owner(*db, version);
    check_not_newer(path, version);
    if (version < schema::latest_version())
      throw StoreError(fmt::format("'{}' is schema version {} and its folder is read-only, so it cannot be upgraded "
                                   "to version {}: copy it to a writable folder and pass that --db",
                                   path, version, schema::latest_version()));
    return Store(path, stale_s, std::move(db));
  }
  auto db = std::make_unique<sql::Connection>(path);
  db->set_busy_timeout(options.busy_timeout_ms);
  retry_while_busy(options.busy_timeout_ms, [&] {
    // Everything up to set_pragmas only reads, so a refused file is left exactly as it was.
    const int version = db->read_transaction([&] {
      const int v = static_cast<int>(db->scalar_int("PRAGMA user_version"));
      check_owner(*db, v);
      check_not_newer(path, v);
      return v;
    });
    set_pragmas(*db);
    if (version < schema::latest_version()) migrate(*db);
  });
  return Store(path, stale_s, std::move(db));
}

namespace {

// The database file's length against what its header says (https://sqlite.org/fileformat.html, "The
// Database Header"): a length that is not a whole number of pages, or shorter than the page count the
// header records (valid when the version-valid-for number equals the change counter), is a truncated
// file. "" when consistent or new. Read through SQLite's own file handle: opening and closing another
// descriptor on the file would drop every POSIX lock this process holds on it (a reader elsewhere could
// then checkpoint and delete the WAL under this connection).
std::string truncation(sqlite3* db) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || file == nullptr ||
      file->pMethods == nullptr)
    return "";
  sqlite3_int64 bytes = 0;
  std::array<unsigned char, 100> h{};
  if (file->pMethods->xFileSize(file, &bytes) != SQLITE_OK || bytes < static_cast<sqlite3_int64>(h.size()) ||
      file->pMethods->xRead(file, h.data(), static_cast<int>(h.size()), 0) != SQLITE_OK)
    return "";
  const auto be32 = [&](size_t at) {
    return (std::uint32_t{h[at]} << 24) | (std::uint32_t{h[at + 1]} << 16) | (std::uint32_t{h[at + 2]} << 8) | h[at + 3];
  };
  const std::uint64_t page = h[16] == 0 && h[17] == 1 ? 65536 : (std::uint64_t{h[16]} << 8 | h[17]);
  const auto size = static_cast<std::uint64_t>(bytes);
  if (page < 512) return "";
  if (size % page != 0) return fmt::format("{} bytes is not a whole number of {}-byte pages", size, page);
  const std::uint64_t pages = be32(28);
  if (pages != 0 && be32(24) == be32(92) && size < pages * page)
    return fmt::format("its header records {} pages of {} bytes, the file holds {}", pages, page, size / page);
  return "";
}

}  // namespace

void Store::check_can_record() {
  // Constant cost, whatever the store holds (a whole-file quick_check read every page at every run
  // start, ~0.3 s per 100 MB): the file's length against its header (a file that looks truncated is
  // confirmed by quick_check), then one path from each table's root to its first row, the b-tree pages
  // every write starts from. Damage elsewhere surfaces when a
  // command reaches it, as the same StoreFileError (exit 2) with nothing written.
  if (const std::string why = truncation(db_->handle()); !why.empty()) {
    // Or a checkpoint of another process under way: it writes page 1 (the header) before it extends the
    // file. SQLite's own consistent view decides, reading the whole file this once.
    const std::string verdict = db_->scalar_text("PRAGMA quick_check(1)");
    if (verdict != "ok")
      throw StoreFileError(SQLITE_CORRUPT,
                           sql::file_problem(SQLITE_CORRUPT, path_, fmt::format("{}; quick_check: {}", why, verdict.substr(0, 200))));
  }
  std::vector<std::string> tables;
  {
    sql::Lease st = db_->prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
    while (st->step()) tables.push_back(st->get_text(0));
  }
  for (const auto& table : tables) db_->scalar_int(fmt::format("SELECT count(*) FROM (SELECT 1 FROM \"{}\" LIMIT 1)", table));
  if (sqlite3_db_readonly(db_->handle(), "main") == 1)
    throw StoreFileError(SQLITE_READONLY, sql::file_problem(SQLITE_READONLY, path_, "SQLite opened it read-only"));
}

int Store::schema_version() { return static_cast<int>(db_->scalar_int("PRAGMA user_version")); }

// ---- guards ------------------------------------------------------------------------------------

bool Store::has_row(std::string_view table, std::int64_t id) {
  sql::Lease st = db_->prepare(fmt::format("SELECT 1 FROM {} WHERE id = ?", table));
  st->bind_all(id);
  return st->step();
}

void Store::require_exists(std::int64_t run_id) {
  if (!has_row("runs", run_id)) throw StoreError(fmt::format("no run {} in {}", run_id, path_));
}

void Store::require_running(std::int64_t run_id, std::string_view what) {
  sql::Lease st = db_->prepare("SELECT status FROM runs WHERE id = ?");
  st->bind_all(run_id);
  if (!st->step()) throw StoreError(fmt::format("no run {} in {}", run_id, path_));
  const std::string status = st->get_text(0);
  if (status != "running") {
    throw StoreError(fmt::format(
        "cannot {} run {} in {}: it has finished ({}) and receipts are append-only; add a note with annotate instead",
        what, run_id, path_, status));
  }
}

template <typename Fn>
void Store::write_run(std::int64_t run_id, std::string_view what, Fn&& write) {
  db_->write_transaction([&] {
    require_running(run_id, what);
    write();
  });
}

// ---- writes ------------------------------------------------------------------------------------

std::int64_t Store::begin_run(const RunStart& start) {
  if (start.name.empty()) throw StoreError("a run needs a name");
  if (!start.spec_json.empty()) require_json(start.spec_json, "the spec of run '" + start.name + "'");
  const int matrix_fields = start.matrix_id.has_value() + start.cell.has_value() + start.repeat.has_value();
  if (matrix_fields != 0 && matrix_fields != 3) {
    throw StoreError(
        fmt::format("run '{}': matrix_id, cell and repeat go together (got {} of 3)", start.name, matrix_fields));
  }
  const std::string spec_hash =
      start.spec_hash.empty() && !start.spec_json.empty() ? base::sha256_hex(start.spec_json) : start.spec_hash;
  const double now = base::unix_now();

  return db_->write_transaction([&] {
    if (start.matrix_id && !has_row("matrices", *start.matrix_id)) {
      throw StoreError(fmt::format("run '{}': no matrix {} in {}", start.name, *start.matrix_id, path_));
    }
    {
      sql::Lease st = db_->prepare(
          "INSERT INTO runs (name, status, started_at, heartbeat_at, pid, host, tags, lane, spec_hash, matrix_id, "
          "cell, repeat, uid) VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, lower(hex(randomblob(16))))");
      st->execute(start.name, now, now, start.pid != 0 ? start.pid : static_cast<std::int64_t>(getpid()),
                  start.host.empty() ? base::host_name() : start.host, to_json_array(start.tags), start.lane, spec_hash,
                  start.matrix_id, start.cell, start.repeat);
    }
    const std::int64_t run_id = db_->last_insert_rowid();
    record_env_rows(run_id, start.env);
    if (!start.spec_json.empty()) {
      sql::Lease st = db_->prepare(
          "INSERT INTO run_spec (run_id, spec_json, spec_hash, source_path, source_text) VALUES (?, ?, ?, ?, ?)");
      st->execute(run_id, start.spec_json, spec_hash, start.source_path, start.source_text);
    }
    if (start.matrix_id) {
      sql::Lease st = db_->prepare("INSERT INTO matrix_cells (matrix_id, cell, repeat, run_id) VALUES (?, ?, ?, ?)");
      st->execute(*start.matrix_id, *start.cell, *start.repeat, run_id);
    }
    return run_id;
  });
}

void Store::record_env_rows(std::int64_t run_id, const std::map<std::string, std::string>& env) {
  sql::Lease st = db_->prepare(
      "INSERT INTO run_env (run_id, key, value) VALUES (?, ?, ?) ON CONFLICT (run_id, key) DO UPDATE SET "
      "value = excluded.value");
  for (const auto& [key, value] : env) st->execute(run_id, key, value);
}

void Store::heartbeat(std::int64_t run_id) {
  write_run(run_id, "heartbeat", [&] {
    sql::Lease st = db_->prepare("UPDATE runs SET heartbeat_at = ? WHERE id = ?");
    st->execute(base::unix_now(), run_id);
  });
}

void Store::record_env(std::int64_t run_id, const std::map<std::string, std::string>& env) {
  write_run(run_id, "record the environment of", [&] { record_env_rows(run_id, env); });
}

void Store::record_backends(std::int64_t run_id, const std::vector<BackendRow>& rows) {
  for (const BackendRow& r : rows) {
    if (r.seam.empty()) throw StoreError(fmt::format("run {}: a backend row needs a seam", run_id));
  }
  write_run(run_id, "record backends for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO run_backends (run_id, seam, requested, chosen, observed, reason, mismatch) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, seam) DO UPDATE SET requested = excluded.requested, "
        "chosen = excluded.chosen, observed = excluded.observed, reason = excluded.reason, "
        "mismatch = excluded.mismatch");
    for (const BackendRow& r : rows)
      st->execute(run_id, r.seam, r.requested, r.chosen, r.observed, r.reason, r.mismatch);
  });
}

void Store::record_catalog(std::int64_t run_id, const std::vector<CatalogRow>& rows) {
  for (const CatalogRow& r : rows)
    require_one_of(r.role, backend_roles(), "catalog role of " + r.seam + "/" + r.backend);
  write_run(run_id, "record the catalog for", [&] {
    sql::Lease st =
        db_->prepare("INSERT INTO catalog (run_id, seam, backend, role, fallback, patterns, changes_numerics) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (const CatalogRow& r : rows) {
      st->bind_all(run_id, r.seam, r.backend, r.role, r.fallback, to_json_array(r.patterns),
                   static_cast<std::int64_t>(r.changes_numerics));
      insert_unique(
          *st, [&] { return fmt::format("the catalog of run {} already lists {}/{}", run_id, r.seam, r.backend); });
    }
  });
}

void Store::append_steps(std::int64_t run_id, const std::vector<StepRow>& rows) {
  for (const StepRow& r : rows) {
    require_finite(r.wall_ms, fmt::format("run {} step {}: wall_ms", run_id, r.step));
    if (r.step < 0 || r.rank < 0) {
      throw StoreError(fmt::format("run {}: step ({}) and rank ({}) must be >= 0", run_id, r.step, r.rank));
    }
    if (r.moe_dropped_slots && *r.moe_dropped_slots < 0) {
      throw StoreError(fmt::format("run {} step {}: moe_dropped_slots must be >= 0, not {}", run_id, r.step,
                                   *r.moe_dropped_slots));
    }
  }
  write_run(run_id, "record steps for", [&] {
    // One prepared statement for the whole batch, one transaction: the hot path of a run.
    sql::Lease st = db_->prepare(
        "INSERT INTO steps (run_id, rank, step, wall_ms, tokens, loss, grad_norm, lr, mem_allocated_peak, "
        "mem_reserved_peak, rss_bytes, data_wait_ms, outlier, moe_aux_loss, moe_dropped_slots) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const StepRow& r : rows) {
      st->bind_all(run_id, r.rank, r.step, r.wall_ms, r.tokens, r.loss, r.grad_norm, r.lr, r.mem_allocated_peak,
                   r.mem_reserved_peak, r.rss_bytes, r.data_wait_ms, r.outlier, r.moe_aux_loss, r.moe_dropped_slots);
      insert_unique(*st, [&] {
        return fmt::format("run {} already has step {} of rank {}; steps are append-only", run_id, r.step, r.rank);
      });
    }
  });
}

void Store::record_evaluation(std::int64_t run_id, const EvaluationRow& row) {
  if (row.step < 0 || row.tokens <= 0 || !(row.seconds >= 0)) {
    throw StoreError(fmt::format("an evaluation of run {} needs a step >= 0, tokens > 0 and seconds >= 0 (got step {}, "
                                 "{} tokens, {} s)",
                                 run_id, row.step, row.tokens, row.seconds));
  }
  write_run(run_id, "record an evaluation of", [&] {
    sql::Lease st = db_->prepare("INSERT INTO evaluations (run_id, step, loss, tokens, seconds) VALUES (?, ?, ?, ?, ?)");
    st->execute(run_id, row.step, std::isfinite(row.loss) ? std::optional<double>(row.loss) : std::nullopt, row.tokens,
                row.seconds);
  });
}

void Store::flag_outliers(std::int64_t run_id, std::int64_t rank, const std::vector<std::int64_t>& steps) {
  write_run(run_id, "flag outliers of", [&] {
    sql::Lease st = db_->prepare("UPDATE steps SET outlier = 1 WHERE run_id = ? AND rank = ? AND step = ?");
    for (std::int64_t step : steps) {
      st->execute(run_id, rank, step);
      if (db_->changes() != 1) {
        throw StoreError(fmt::format("run {} has no step {} of rank {} to flag as an outlier", run_id, step, rank));
      }
    }
  });
}

void Store::record_goodput(std::int64_t run_id, const std::map<std::string, double>& seconds) {
  for (const auto& [category, value] : seconds) {
    require_one_of(category, goodput_categories(), "goodput category");
    require_finite(value, fmt::format("run {} goodput '{}' seconds", run_id, category));
  }
  write_run(run_id, "record goodput for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO goodput (run_id, category, seconds) VALUES (?, ?, ?) ON CONFLICT (run_id, category) "
        "DO UPDATE SET seconds = excluded.seconds");
    for (const auto& [category, value] : seconds) {
      st->execute(run_id, category, value);
    }
  });
}

void Store::record_memory(std::int64_t run_id, const std::vector<MemoryRow>& rows) {
  for (const MemoryRow& r : rows) {
    if (r.phase.empty()) throw StoreError(fmt::format("run {} step {}: a memory row needs a phase", run_id, r.step));
  }
  write_run(run_id, "record memory for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO memory (run_id, rank, step, phase, allocated, reserved, active, alloc_retries, ooms, "
        "fragmentation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const MemoryRow& r : rows) {
      st->bind_all(run_id, r.rank, r.step, r.phase, r.allocated, r.reserved, r.active, r.alloc_retries, r.ooms,
                   r.fragmentation);
      insert_unique(*st, [&] {
        return fmt::format("run {} already has memory for step {} phase '{}' of rank {}", run_id, r.step, r.phase,
                           r.rank);
      });
    }
  });
}

void Store::record_kernels(std::int64_t run_id, const std::vector<KernelRow>& rows) {
  for (const KernelRow& r : rows) {
    if (r.name.empty() || r.calls < 0 || r.total_ns < 0) {
      throw StoreError(fmt::format("run {}: kernel row '{}' needs a name and calls/total_ns >= 0", run_id, r.name));
    }
  }
  write_run(run_id, "record kernels for", [&] {
    // Several profiling flushes of one kernel add up; the mean follows the sums.
    sql::Lease st = db_->prepare(
        "INSERT INTO kernels (run_id, rank, name, family, seam, calls, total_ns, mean_ns) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, CAST(?7 AS REAL) / NULLIF(?6, 0)) "
        "ON CONFLICT (run_id, rank, name) DO UPDATE SET calls = calls + excluded.calls, "
        "total_ns = total_ns + excluded.total_ns, "
        "mean_ns = CAST(total_ns + excluded.total_ns AS REAL) / NULLIF(calls + excluded.calls, 0)");
    for (const KernelRow& r : rows) {
      st->execute(run_id, r.rank, r.name, r.family, r.seam, r.calls, r.total_ns);
    }
  });
}

void Store::record_profile_window(std::int64_t run_id, const ProfileWindowRow& r) {
  require_one_of(r.status, {"ok", "unavailable", "off"}, "profile window status");
  if (r.status != "ok" && r.reason.empty())
    throw StoreError(fmt::format("run {}: a profile window with status '{}' needs a reason", run_id, r.status));
  write_run(run_id, "record the profile window of", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO profile_windows (run_id, rank, status, reason, start_step, steps, records, dropped_records, "
        "buffers, buffers_refused, window_ns, compute_ns, non_compute_ns, idle_ns, communication_ns, "
        "exposed_communication_ns, all_reduce_ns, exposed_all_reduce_ns, reduce_scatter_ns, exposed_reduce_scatter_ns, "
        "all_gather_ns, exposed_all_gather_ns, all_to_all_ns, exposed_all_to_all_ns) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    const auto &kind = r.collective_ns, &exposed = r.exposed_collective_ns;
    st->bind_all(run_id, r.rank, r.status, r.reason, r.start_step, r.steps, r.records, r.dropped_records, r.buffers,
                 r.buffers_refused, r.window_ns, r.compute_ns, r.non_compute_ns, r.idle_ns, r.communication_ns,
                 r.exposed_communication_ns, kind.all_reduce, exposed.all_reduce, kind.reduce_scatter,
                 exposed.reduce_scatter, kind.all_gather, exposed.all_gather, kind.all_to_all, exposed.all_to_all);
    insert_unique(*st, [&] { return fmt::format("run {} already has a profile window for rank {}", run_id, r.rank); });
  });
}

void Store::record_profile_time(std::int64_t run_id, const std::vector<ProfileTimeRow>& rows) {
  for (const ProfileTimeRow& r : rows) {
    require_one_of(r.dimension, {"family", "seam"}, "profile time dimension");
    if (r.calls < 0 || r.total_ns < 0) throw StoreError(fmt::format("run {}: profile time needs calls/total_ns >= 0", run_id));
  }
  write_run(run_id, "record profile time for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO profile_time (run_id, rank, step, dimension, key, calls, total_ns) VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (const ProfileTimeRow& r : rows) {
      st->bind_all(run_id, r.rank, r.step, r.dimension, r.key, r.calls, r.total_ns);
      insert_unique(*st, [&] {
        return fmt::format("run {} already has profile time of step {} {} '{}'", run_id, r.step, r.dimension, r.key);
      });
    }
  });
}

void Store::record_kernel_attribution(std::int64_t run_id, const std::vector<KernelAttributionRow>& rows) {
  for (const KernelAttributionRow& r : rows) {
    if (r.name.empty() || r.phase.empty() || r.family.empty() || r.calls < 0 || r.total_ns < 0)
      throw StoreError(fmt::format("run {}: attribution row '{}' needs a name, phase, family and counts >= 0", run_id,
                                   r.name));
  }
  write_run(run_id, "record kernel attribution for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO kernel_attribution (run_id, rank, name, phase, layer, block, seam, backend, family, calls, "
        "total_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const KernelAttributionRow& r : rows) {
      st->bind_all(run_id, r.rank, r.name, r.phase, r.layer, r.block, r.seam, r.backend, r.family, r.calls, r.total_ns);
      insert_unique(*st, [&] {
        return fmt::format("run {} already attributes '{}' to {} layer {} seam '{}'", run_id, r.name, r.phase, r.layer,
                           r.seam);
      });
    }
  });
}

void Store::record_backend_evidence(std::int64_t run_id, const std::vector<BackendEvidenceRow>& rows) {
  for (const BackendEvidenceRow& r : rows) {
    if (r.seam.empty() || r.kernel.empty() || r.calls < 0 || r.total_ns < 0)
      throw StoreError(fmt::format("run {}: backend evidence needs a seam, a kernel and counts >= 0", run_id));
  }
  write_run(run_id, "record backend evidence for", [&] {
    sql::Lease st = db_->prepare(
        "INSERT INTO backend_evidence (run_id, seam, kernel, matches, calls, total_ns) VALUES (?, ?, ?, ?, ?, ?)");
    for (const BackendEvidenceRow& r : rows) {
      st->bind_all(run_id, r.seam, r.kernel, r.matches, r.calls, r.total_ns);
      insert_unique(*st, [&] { return fmt::format("run {} already has evidence '{}' for {}", run_id, r.kernel, r.seam); });
    }
  });
}

ArtifactRow Store::add_artifact(std::int64_t run_id, const std::string& kind, const std::string& path) {
  if (kind.empty()) throw StoreError(fmt::format("run {}: artifact '{}' needs a kind", run_id, path));
  require_running(run_id, "add an artifact to");  // fail before hashing a large file; rechecked when writing
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw StoreError(fmt::format("cannot add artifact '{}' to run {}: no such regular file", path, run_id));
  }
  ArtifactRow row{kind, fs::absolute(path).lexically_normal().string(), base::sha256_file(path),
                  static_cast<std::int64_t>(fs::file_size(path))};
  write_run(run_id, "add an artifact to", [&] {
    sql::Lease st = db_->prepare("INSERT INTO artifacts (run_id, kind, path, sha256, bytes) VALUES (?, ?, ?, ?, ?)");
    st->bind_all(run_id, row.kind, row.path, row.sha256, row.bytes);
    insert_unique(*st, [&] { return fmt::format("run {} already has artifact '{}'", run_id, row.path); });
  });
  return row;
}

void Store::finish_run(std::int64_t run_id, RunStatus status, const std::string& error, const RunSummary& summary) {
  if (status == RunStatus::running || status == RunStatus::abandoned) {
    throw StoreError(fmt::format("run {} can finish only as ok, failed or killed, not {}", run_id, to_string(status)));
  }
  if (status != RunStatus::ok && error.empty()) {
    throw StoreError(
        fmt::format("run {} finishing as {} needs an error message saying why", run_id, to_string(status)));
  }
  const double now = base::unix_now();
  const std::optional<std::string> summary_json =
      summary.facts.empty() ? std::nullopt : std::optional<std::string>(to_json(summary.facts).dump());
  const std::optional<std::string> error_text = error.empty() ? std::nullopt : std::optional<std::string>(error);
  write_run(run_id, "finish", [&] {
    sql::Lease st = db_->prepare(
        "UPDATE runs SET status = ?, error = ?, ended_at = ?, heartbeat_at = ?, steps = ?, median_step_ms = ?, "
        "tokens_per_s = ?, mfu = ?, goodput_pct = ?, peak_memory_bytes = ?, flops_version = ?, summary_json = ? "
        "WHERE id = ?");
    st->execute(to_string(status), error_text, now, now, summary.steps, summary.median_step_ms, summary.tokens_per_s,
                summary.mfu, summary.goodput_pct, summary.peak_memory_bytes, summary.flops_version, summary_json,
                run_id);
  });
}

void Store::annotate(std::int64_t run_id, const std::string& text) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw StoreError(fmt::format("an annotation of run {} needs some text", run_id));
  }
  db_->write_transaction([&] {
    require_exists(run_id);
    sql::Lease st = db_->prepare("INSERT INTO annotations (run_id, text, created_at) VALUES (?, ?, ?)");
    st->execute(run_id, text, base::unix_now());
  });
}

// ---- decisions (matrices: store_matrix.cpp) --------------------------------------------------------------------

std::int64_t Store::record_decision(const Decision& d) {
  if (d.seam.empty() || d.backend.empty()) throw StoreError("a decision needs a seam and a backend");
  return db_->write_transaction([&] {
    for (std::int64_t run_id : d.evidence_run_ids) {
      if (!has_row("runs", run_id)) {
        throw StoreError(fmt::format("decision on {}/{} cites run {} as evidence, but there is no run {} in {}", d.seam,
                                     d.backend, run_id, run_id, path_));
      }
    }
    if (d.matrix_id && !has_row("matrices", *d.matrix_id)) {
      throw StoreError(fmt::format("decision on {}/{}: no matrix {} in {}", d.seam, d.backend, *d.matrix_id, path_));
    }
    sql::Lease st = db_->prepare(
        "INSERT INTO decisions (seam, backend, verdict, evidence_run_ids, matrix_id, details, decided_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)");
    st->execute(d.seam, d.backend, to_string(d.verdict), nlohmann::json(d.evidence_run_ids).dump(), d.matrix_id,
                d.details, base::unix_now());
    return db_->last_insert_rowid();
  });
}

}  // namespace ablate::receipts
