// tests/receipts/test_util.h: helpers shared by the receipts_tests suites: scoped environment
// variables, file snapshots, sample records, forked child processes, raw SQLite access.
// Build and run: ninja -C build-receipts receipts_tests && build-receipts/tests/receipts_tests
#pragma once

#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "receipts/schema.h"
#include "receipts/store.h"
#include "base/temp_dir.h"
#include "tests/base/scoped_env.h"

namespace ablate::receipts::testing {

namespace fs = std::filesystem;

using base::testing::ScopedEnv;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Bytes and modification time of a file, to prove that a refused file was left untouched.
struct FileSnapshot {
  std::string bytes;
  fs::file_time_type mtime;
  static FileSnapshot of(const std::string& path) { return {read_file(path), fs::last_write_time(path)}; }
  bool operator==(const FileSnapshot&) const = default;
};

// Raw SQLite connection for setting up fixtures and for bypassing the Store API on purpose.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("cannot open " + path);
    sqlite3_busy_timeout(db_, 10000);
    schema::register_functions(db_);  // so that migrations() can be applied here too
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  // Returns the SQLite error message, or an empty string on success.
  std::string exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return "";
    std::string msg = err != nullptr ? err : "unknown error";
    sqlite3_free(err);
    return msg;
  }
  void exec_ok(const std::string& sql) {
    const std::string err = exec(sql);
    if (!err.empty()) throw std::runtime_error(err + " in: " + sql);
  }
  // First column of the first row, as text ("" for NULL or no row).
  std::string scalar(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    }
    std::string out;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

inline RunStart sample_start(const std::string& name, std::vector<std::string> tags = {}) {
  RunStart s;
  s.name = name;
  s.tags = std::move(tags);
  s.lane = "tiny-AMEM/1gpu/reference";
  s.spec_json = R"({"model":{"pattern":"AMEM"},"train":{"steps":20}})";
  s.source_path = "experiments/tiny.toml";
  s.source_text = "[model]\npattern = \"AMEM\"\n";
  s.env = {{"gpu_model", "NVIDIA H100"}, {"cuda_runtime", "12.4"}};
  return s;
}

inline std::vector<StepRow> make_steps(int count, int first = 0, int rank = 0) {
  std::vector<StepRow> rows;
  for (int i = first; i < first + count; ++i) {
    StepRow r;
    r.step = i;
    r.rank = rank;
    r.wall_ms = 100.0 + i * 0.5;
    r.tokens = 8192;
    r.loss = 10.0 / (1 + i);
    r.grad_norm = 1.5;
    r.lr = 1e-4;
    r.mem_allocated_peak = 1 << 30;
    r.data_wait_ms = 0.25;
    rows.push_back(r);
  }
  return rows;
}

inline RunSummary sample_summary(std::int64_t steps = 20) {
  RunSummary s;
  s.steps = steps;
  s.median_step_ms = 104.5;
  s.tokens_per_s = 78392.3;
  s.goodput_pct = 87.5;
  s.peak_memory_bytes = std::int64_t{1} << 31;
  s.flops_version = "v1";
  s.facts.warmup_steps = 2;
  return s;
}

// Runs `body` in a forked child. The child exits 0 when body returns, 1 (message on stderr) when it
// throws; it never returns into the test framework. Fork only while this process has no open Store.
inline pid_t fork_child(const std::function<void()>& body) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid > 0) return pid;
  try {
    body();
  } catch (const std::exception& e) {
    fmt::print(stderr, "child {}: {}\n", getpid(), e.what());
    _exit(1);
  }
  _exit(0);
}

inline int wait_status(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

// A one-shot pipe used as a "child is ready" / "go" signal between processes.
class Pipe {
 public:
  Pipe() {
    if (pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  }
  ~Pipe() { close_both(); }
  void close_both() {
    close_read();
    close_write();
  }
  void close_read() { close_fd(fds_[0]); }
  void close_write() { close_fd(fds_[1]); }
  void send(char c = 'x') {
    if (write(fds_[1], &c, 1) != 1) throw std::runtime_error("pipe write failed");
  }
  void send_int64(std::int64_t value) {
    if (write(fds_[1], &value, sizeof value) != static_cast<ssize_t>(sizeof value)) {
      throw std::runtime_error("pipe write failed");
    }
  }
  std::int64_t receive_int64() {
    std::int64_t value = 0;
    if (read(fds_[0], &value, sizeof value) != static_cast<ssize_t>(sizeof value)) {
      throw std::runtime_error("pipe read failed");
    }
    return value;
  }
  // Blocks until one byte arrives (true) or the writing side is closed (false).
  bool receive() {
    char c = 0;
    ssize_t n = 0;
    do {
      n = read(fds_[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1;
  }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  int fds_[2] = {-1, -1};
};

// Polls `predicate` until it holds or `timeout` passes; returns its last value.
inline bool eventually(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return predicate();
}

inline std::string fixture(const std::string& name) {
  return std::string(ABLATE_SOURCE_DIR) + "/tests/fixtures/receipts/" + name;
}

}  // namespace ablate::receipts::testing
