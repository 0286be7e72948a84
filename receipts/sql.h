// receipts/sql.h: a thin checked layer over the SQLite C API, private to receipts/.
// Every call is checked; a failure throws SqliteError carrying sqlite3_errmsg, the statement and the file,
// or, when the file itself is the problem (damaged, read-only, full disk), StoreFileError saying so.
// Prepared statements are cached per connection and handed out as leases that reset on scope exit,
// so no statement is left mid-iteration holding a read snapshot open.
// Not thread-safe: one Connection per thread (connections are opened SQLITE_OPEN_NOMUTEX).
// Tested through tests/receipts/*_test.cpp (receipts_tests).
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>

struct sqlite3;
struct sqlite3_stmt;

namespace ablate::receipts::sql {

// A value bound to a statement parameter (used by the generic read-only query API).
using Param = std::variant<std::nullptr_t, std::int64_t, double, std::string>;

// For a failure that is about the store file rather than the statement (damaged: SQLITE_CORRUPT,
// SQLITE_NOTADB; not writable: SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM; SQLITE_FULL): what is
// wrong and how to fix it, with `detail` (what SQLite or a check found) in parentheses; "" for any
// other code. No SQL: the statement that met the problem does not help the user, the file does.
std::string file_problem(int rc, std::string_view path, std::string_view detail);

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql, bool persistent);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are 1-based, as in SQLite.
  void bind(int index, std::nullptr_t);
  void bind(int index, std::nullopt_t) { bind(index, nullptr); }
  void bind(int index, double value);
  void bind(int index, std::string_view value);
  void bind(int index, const char* value) { bind(index, std::string_view(value)); }
  void bind(int index, const std::string& value) { bind(index, std::string_view(value)); }
  void bind(int index, const Param& value);
  // Binds column `col` of the row `from` (a statement of any connection) stands on, whatever its type.
  void bind_column(int index, const Statement& from, int col);
  template <std::integral T>
  void bind(int index, T value) {
    bind_int64(index, static_cast<std::int64_t>(value));
  }
  template <typename T>
  void bind(int index, const std::optional<T>& value) {
    if (value)
      bind(index, *value);
    else
      bind(index, nullptr);
  }
  // Binds the arguments to parameters 1..N in order.
  template <typename... Args>
  Statement& bind_all(const Args&... args) {
    int index = 0;
    (bind(++index, args), ...);
    return *this;
  }

  bool step();  // true while a row is available
  void run();   // steps to completion, ignoring rows
  void reset();
  // Binds args to 1..N, runs to completion and resets: one execution of a reused statement.
  template <typename... Args>
  void execute(const Args&... args) {
    bind_all(args...);
    run();
    reset();
  }

  int column_count() const;
  std::string column_name(int col) const;
  int column_type(int col) const;  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB, SQLITE_NULL
  bool is_null(int col) const;
  std::int64_t get_int(int col) const;
  double get_double(int col) const;
  std::string get_text(int col) const;
  std::optional<std::int64_t> opt_int(int col) const;
  std::optional<double> opt_double(int col) const;
  std::optional<std::string> opt_text(int col) const;

  bool readonly() const;
  int parameter_count() const;
  // Non-blank text after the first statement (SQLite compiles one statement at a time).
  bool has_trailing_sql() const { return has_tail_; }
  const std::string& sql() const { return sql_; }

 private:
  friend class Lease;
  friend class Connection;
  void bind_int64(int index, std::int64_t value);
  void check_bind(int rc, int index);
  [[noreturn]] void fail(int rc) const;

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
  bool has_tail_ = false;
  bool leased_ = false;
};

// A statement handed out by Connection::prepare: reset and its bindings cleared when the lease ends.
class Lease {
 public:
  explicit Lease(Statement* cached) : stmt_(cached) { stmt_->leased_ = true; }
  explicit Lease(std::unique_ptr<Statement> owned) : owned_(std::move(owned)), stmt_(owned_.get()) {}
  ~Lease();
  Lease(Lease&& other) noexcept : owned_(std::move(other.owned_)), stmt_(std::exchange(other.stmt_, nullptr)) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Lease& operator=(Lease&&) = delete;
  Statement* operator->() const { return stmt_; }
  Statement& operator*() const { return *stmt_; }

 private:
  std::unique_ptr<Statement> owned_;
  Statement* stmt_;
};

enum class OpenMode {
  read_write,  // creating the file if missing
  // An existing file, never written: SQLite reads what its WAL holds without checkpointing it (for a
  // store another machine's run wrote, which `ablate import` reads).
  read_only,
  // An existing file read-only as immutable (no locks, no -wal or -shm file): for a store whose folder
  // nobody can write, where no writer can exist either.
  immutable_snapshot,
};

class Connection {
 public:
  // Opens `path` as `mode` says. An unopenable path throws StoreError with a hint.
  explicit Connection(std::string path, OpenMode mode = OpenMode::read_write);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  // How long a statement waits for another connection's lock before failing with SQLITE_BUSY.
  void set_busy_timeout(int milliseconds);

  // Runs one or more statements that return no rows we need.
  void exec(std::string_view sql);
  // A cached prepared statement (prepared once per connection); a fresh one if that SQL is already leased.
  Lease prepare(std::string_view sql);
  // A one-off prepared statement, not cached (for caller-supplied SQL of unbounded variety).
  Lease prepare_uncached(std::string_view sql);
  // First column of the first row as an integer / text (the statement must return a row).
  std::int64_t scalar_int(std::string_view sql);
  std::string scalar_text(std::string_view sql);

  std::int64_t last_insert_rowid() const;
  int changes() const;

  // Runs fn inside BEGIN IMMEDIATE ... COMMIT: the write lock is taken up front, so concurrent
  // writers queue on busy_timeout instead of failing with SQLITE_BUSY when upgrading a read.
  // Any exception rolls back and propagates.
  template <typename Fn>
  decltype(auto) write_transaction(Fn&& fn) {
    return in_transaction("BEGIN IMMEDIATE", std::forward<Fn>(fn));
  }
  // Runs fn inside a deferred transaction: all its reads see one snapshot, even with writers active.
  template <typename Fn>
  decltype(auto) read_transaction(Fn&& fn) {
    return in_transaction("BEGIN", std::forward<Fn>(fn));
  }

  [[noreturn]] void fail(int rc, std::string_view sql) const;

 private:
  template <typename Fn>
  decltype(auto) in_transaction(const char* begin, Fn&& fn) {
    Transaction txn(*this, begin);
    if constexpr (std::is_void_v<std::invoke_result_t<Fn>>) {
      fn();
      txn.commit();
    } else {
      auto result = fn();
      txn.commit();
      return result;
    }
  }

  class Transaction {
   public:
    Transaction(Connection& db, const char* begin);
    ~Transaction();
    void commit();

   private:
    Connection& db_;
    bool open_ = true;
  };

  std::string path_;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<Statement>> cache_;
};

}  // namespace ablate::receipts::sql
