// receipts/sql.cpp: checked SQLite wrappers (see sql.h). A failure that is about the store file (damaged,
// read-only, full disk) becomes a StoreFileError in the user's terms; any other a SqliteError with the
// statement. Tests: tests/receipts/*_test.cpp (store_file_test.cpp for the file problems).
#include "receipts/sql.h"

#include <fmt/format.h>
#include <cerrno>
#include <sqlite3.h>

#include "receipts/errors.h"

namespace ablate::receipts::sql {
namespace {

std::string describe(sqlite3* db, int rc, std::string_view sql, std::string_view path) {
  // sqlite3_errmsg is only meaningful when the connection's last error is this one; fall back to errstr.
  const char* msg = db != nullptr && sqlite3_extended_errcode(db) == rc ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return fmt::format("SQLite error on '{}': {} ({}, code {}) while running: {}", path, msg, sqlite3_errstr(rc), rc,
                     sql);
}

// An I/O error whose cause is a full disk (the OS said ENOSPC or EDQUOT; growing the WAL's -shm file
// reports SQLITE_IOERR_SHMSIZE) is the full-disk problem, with its remedy, not a raw "disk I/O error".
int as_file_condition(sqlite3* db, int rc) {
  if ((rc & 0xff) != SQLITE_IOERR) return rc;
  const int os_error = db != nullptr ? sqlite3_system_errno(db) : 0;
  if (rc == SQLITE_IOERR_SHMSIZE || os_error == ENOSPC || os_error == EDQUOT) return SQLITE_FULL;
  return rc;
}

[[noreturn]] void throw_failure(sqlite3* db, int raw_rc, std::string_view sql, std::string_view path) {
  const int rc = as_file_condition(db, raw_rc);
  if (std::string problem = file_problem(rc, path, std::string("SQLite: ") + sqlite3_errstr(raw_rc)); !problem.empty())
    throw StoreFileError(rc, problem);
  throw SqliteError(raw_rc, describe(db, raw_rc, sql, path));
}

std::string db_file(sqlite3* db) {
  const char* name = sqlite3_db_filename(db, "main");
  return name != nullptr && *name != '\0' ? name : ":memory:";
}

}  // namespace

std::string file_problem(int rc, std::string_view path, std::string_view detail) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return fmt::format(
          "the receipt store '{}' is damaged ({}): it was truncated or overwritten, and ablate leaves it as it "
          "is. Restore it from a backup, or copy out what is still readable with `sqlite3 '{}' .recover | sqlite3 "
          "recovered.db` and pass --db recovered.db; or pass another --db (or set ABLATE_DB)",
          path, detail, path);
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      return fmt::format(
          "cannot write the receipt store '{}': the file or its folder is read-only ({}). ablate writes the file "
          "and, in WAL mode, creates '{}-wal' and '{}-shm' beside it: make the file and its folder writable, or "
          "pass --db with a writable path (or set ABLATE_DB)",
          path, detail, path, path);
    case SQLITE_FULL:
      return fmt::format(
          "cannot write the receipt store '{}': the disk holding it is full ({}). Free space on that disk, or pass "
          "--db on another disk (or set ABLATE_DB)",
          path, detail);
    default:
      return "";
  }
}

// ---- Statement ---------------------------------------------------------------------------------

Statement::Statement(sqlite3* db, std::string_view sql, bool persistent) : db_(db), sql_(sql) {
  const char* tail = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql_.data(), static_cast<int>(sql_.size()),
                                    persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, &tail);
  if (rc != SQLITE_OK) fail(rc);
  if (stmt_ == nullptr) fail(SQLITE_MISUSE);  // empty SQL: a programming error, say so loudly
  for (const char* p = tail; p != nullptr && p < sql_.data() + sql_.size(); ++p) {
    if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != ';') {
      has_tail_ = true;
      break;
    }
  }
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::fail(int rc) const { throw_failure(db_, rc, sql_, db_file(db_)); }

void Statement::check_bind(int rc, int index) {
  if (rc == SQLITE_RANGE) {
    throw SqliteError(rc, fmt::format("parameter {} out of range (statement has {}) in: {}", index,
                                      sqlite3_bind_parameter_count(stmt_), sql_));
  }
  if (rc != SQLITE_OK) fail(rc);
}

void Statement::bind(int index, std::nullptr_t) { check_bind(sqlite3_bind_null(stmt_, index), index); }
void Statement::bind(int index, double value) { check_bind(sqlite3_bind_double(stmt_, index, value), index); }
void Statement::bind_int64(int index, std::int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), index);
}
void Statement::bind(int index, std::string_view value) {
  check_bind(sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index);
}
void Statement::bind(int index, const Param& value) {
  std::visit([&](const auto& v) { bind(index, v); }, value);
}
void Statement::bind_column(int index, const Statement& from, int col) {
  check_bind(sqlite3_bind_value(stmt_, index, sqlite3_column_value(from.stmt_, col)), index);
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  fail(rc);
}

void Statement::run() {
  while (step()) {
  }
}

void Statement::reset() {
  // sqlite3_reset repeats the last step's error, which was already thrown; nothing new to report.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
std::string Statement::column_name(int col) const { return sqlite3_column_name(stmt_, col); }
int Statement::column_type(int col) const { return sqlite3_column_type(stmt_, col); }
bool Statement::is_null(int col) const { return column_type(col) == SQLITE_NULL; }
std::int64_t Statement::get_int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::get_double(int col) const { return sqlite3_column_double(stmt_, col); }
std::string Statement::get_text(int col) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return text == nullptr ? std::string()
                         : std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)));
}
std::optional<std::int64_t> Statement::opt_int(int col) const {
  return is_null(col) ? std::nullopt : std::optional<std::int64_t>(get_int(col));
}
std::optional<double> Statement::opt_double(int col) const {
  return is_null(col) ? std::nullopt : std::optional<double>(get_double(col));
}
std::optional<std::string> Statement::opt_text(int col) const {
  return is_null(col) ? std::nullopt : std::optional<std::string>(get_text(col));
}
bool Statement::readonly() const { return sqlite3_stmt_readonly(stmt_) != 0; }
int Statement::parameter_count() const { return sqlite3_bind_parameter_count(stmt_); }

Lease::~Lease() {
  if (stmt_ == nullptr) return;
  stmt_->reset();
  stmt_->leased_ = false;
}

// ---- Connection --------------------------------------------------------------------------------

namespace {
// `path` as a SQLite URI file name: the characters a URI gives meaning to are percent-encoded.
std::string file_uri(const std::string& path) {
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else uri += c;
  }
  return uri;
}
}  // namespace

Connection::Connection(std::string path, OpenMode mode) : path_(std::move(path)) {
  const int flags = mode == OpenMode::read_write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
                                                 : SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
  const std::string name = mode == OpenMode::immutable_snapshot ? file_uri(path_) + "?immutable=1" : path_;
  const int rc = sqlite3_open_v2(name.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw StoreError(
        fmt::format("cannot open receipt store '{}': {} (does the directory exist and is it writable? "
                    "pass another --db or set ABLATE_DB)",
                    path_, msg));
  }
  sqlite3_extended_result_codes(db_, 1);
}

Connection::~Connection() {
  cache_.clear();  // finalize statements before closing
  sqlite3_close_v2(db_);
}

void Connection::set_busy_timeout(int milliseconds) {
  const int rc = sqlite3_busy_timeout(db_, milliseconds);
  if (rc != SQLITE_OK) fail(rc, fmt::format("sqlite3_busy_timeout({})", milliseconds));
}

void Connection::fail(int rc, std::string_view sql) const { throw_failure(db_, rc, sql, path_); }

void Connection::exec(std::string_view sql) {
  const std::string text(sql);  // sqlite3_exec needs NUL termination
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) fail(rc, sql);
}

Lease Connection::prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) {
    it = cache_.emplace(std::string(sql), std::make_unique<Statement>(db_, sql, true)).first;
  } else if (it->second->leased_) {
    return Lease(std::make_unique<Statement>(db_, sql, false));  // same SQL nested: use a one-off
  }
  return Lease(it->second.get());
}

Lease Connection::prepare_uncached(std::string_view sql) { return Lease(std::make_unique<Statement>(db_, sql, false)); }

std::int64_t Connection::scalar_int(std::string_view sql) {
  Lease st = prepare(sql);
  if (!st->step()) throw SqliteError(SQLITE_ERROR, fmt::format("no row from: {}", sql));
  return st->get_int(0);
}

std::string Connection::scalar_text(std::string_view sql) {
  Lease st = prepare(sql);
  if (!st->step()) throw SqliteError(SQLITE_ERROR, fmt::format("no row from: {}", sql));
  return st->get_text(0);
}

std::int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
int Connection::changes() const { return sqlite3_changes(db_); }

Connection::Transaction::Transaction(Connection& db, const char* begin) : db_(db) { db_.exec(begin); }

Connection::Transaction::~Transaction() {
  if (!open_) return;
  // Best effort: if the failure already rolled the transaction back, ROLLBACK reports "no transaction".
  sqlite3_exec(db_.db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

void Connection::Transaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace ablate::receipts::sql
