// ablations/matrix_run.cpp: the matrix scheduler: store lookups for resume, a claim on each (cell,
// repeat) before it starts (so concurrent runners of one matrix share the work), child processes through
// posix_spawn (no fork of a process that may hold threads), one log file per run, progress and ETA.
// Tests: tests/ablations/matrix_run_test.cpp.
#include "ablations/matrix_run.h"

#include "ablations/child_env.h"
#include "base/clock.h"
#include "base/die_of_signal.h"
#include "receipts/lifecycle.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <csignal>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ablate::ablations {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kMatrixEnv[] = {"ABLATE_MATRIX_ID", "ABLATE_MATRIX_CELL", "ABLATE_MATRIX_REPEAT"};

// This process's environment with the matrix variables (and, with a GPU, CUDA_VISIBLE_DEVICES)
// replaced, so a matrix started from inside another run cannot leak its coordinates into children.
std::vector<std::string> child_env(int64_t matrix_id, const Cell& cell, int64_t repeat, const std::string* gpu) {
  std::set<std::string> replaced(std::begin(kMatrixEnv), std::end(kMatrixEnv));
  if (gpu) replaced.insert("CUDA_VISIBLE_DEVICES");
  auto env = environment_without(environ, [&](const std::string& key) { return replaced.count(key) > 0; });
  env.push_back(fmt::format("{}={}", kMatrixEnv[0], matrix_id));
  env.push_back(fmt::format("{}={}", kMatrixEnv[1], cell.name));
  env.push_back(fmt::format("{}={}", kMatrixEnv[2], repeat));
  if (gpu) env.push_back("CUDA_VISIBLE_DEVICES=" + *gpu);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Starts one child with stdout and stderr going to `log`; returns its pid.
pid_t spawn(const std::string& binary, std::vector<std::string> args, std::vector<std::string> env, const std::string& log) {
  args.insert(args.begin(), binary);
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error(fmt::format("cannot start {}: {}", binary, std::strerror(rc)));
  return pid;
}

// The signal that ends the runner (SIGINT, SIGTERM, SIGHUP), noted by the handler: the loop forwards it
// to the running children, which record their runs `killed`, waits for them, and then dies of it.
volatile std::sig_atomic_t g_stop_signal = 0;
void note_stop_signal(int sig) { g_stop_signal = sig; }

// Installs the handler for the runner's lifetime (no SA_RESTART: a wait returns early), restoring what
// was there before; a signal the runner was started ignoring stays ignored.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    for (size_t i = 0; i < kSignals.size(); ++i) {
      struct sigaction current {};
      sigaction(kSignals[i], nullptr, &current);
      previous_[i] = current;
      if (current.sa_handler == SIG_IGN) continue;
      struct sigaction sa {};
      sa.sa_handler = note_stop_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(kSignals[i], &sa, nullptr);
    }
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

// This process as a runner of the matrix in the store (claims, heartbeat); ended on every way out but a
// fatal signal, which leaves it to go stale. Store trouble after registration is noted, never fatal:
// the runs already started go on.
class RunnerRegistration {
 public:
  RunnerRegistration(const std::string& db, int64_t matrix_id, std::FILE* out)
      // As runs beat (a bad value fails before the store is touched).
      : interval_s_(base::env_seconds("ABLATE_HEARTBEAT_S", receipts::LifecycleOptions{}.heartbeat_interval_s)),
        store_(receipts::Store::open(db)),
        id_(store_.begin_matrix_runner(matrix_id)),
        out_(out) {}
  ~RunnerRegistration() { end(); }
  RunnerRegistration(const RunnerRegistration&) = delete;
  RunnerRegistration& operator=(const RunnerRegistration&) = delete;

  receipts::MatrixClaim claim(const std::string& cell, int64_t repeat) { return store_.claim_matrix_slot(id_, cell, repeat); }
  // Beats when the interval has passed since the last beat.
  void beat() {
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_beat_).count() < interval_s_) return;
    last_beat_ = now;
    try {
      store_.matrix_runner_heartbeat(id_);
    } catch (const std::exception& e) {
      fmt::print(out_, "matrix: heartbeat of runner {} failed, retrying: {}\n", id_, e.what());
    }
  }
  void end() noexcept {
    if (ended_) return;
    ended_ = true;
    try {
      store_.end_matrix_runner(id_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "matrix: could not record runner %lld as ended (its claims free up once stale): %s\n",
                   static_cast<long long>(id_), e.what());
    }
  }

 private:
  double interval_s_;  // seconds between heartbeats, as runs beat (ABLATE_HEARTBEAT_S)
  receipts::Store store_;
  int64_t id_;
  std::FILE* out_;
  Clock::time_point last_beat_ = Clock::now();
  bool ended_ = false;
};

std::string exit_text(int status) {
  if (WIFEXITED(status)) return fmt::format("failed (exit {})", WEXITSTATUS(status));
  // A child ended by a signal was interrupted, as its receipt says (killed), not failed.
  if (WIFSIGNALED(status)) return fmt::format("killed ({})", ::strsignal(WTERMSIG(status)));
  return "failed";
}

}  // namespace

std::optional<int64_t> find_matrix(receipts::Store& store, const Matrix& matrix) {
  const auto rows = store.query("SELECT id FROM matrices WHERE name = ? AND spec_json = ? ORDER BY id LIMIT 1",
                                {matrix.spec.name, identity_json(matrix).dump()});
  if (rows.empty()) return std::nullopt;
  return rows[0]["id"].get<int64_t>();
}

int64_t find_or_create_matrix(receipts::Store& store, const Matrix& matrix) {
  return store.find_or_create_matrix(matrix.spec.name, identity_json(matrix).dump());
}

std::vector<Slot> pending_slots(receipts::Store& store, int64_t matrix_id, const Matrix& matrix) {
  std::set<std::pair<std::string, int64_t>> done;
  for (const auto& mc : store.matrix_cells(matrix_id))
    if (store.get_run(mc.run_id).status == receipts::RunStatus::ok) done.emplace(mc.cell, mc.repeat);
  std::vector<Slot> pending;
  for (const Slot& s : run_order(matrix))
    if (!done.count({matrix.cells[s.cell].name, s.repeat})) pending.push_back(s);
  return pending;
}

std::vector<std::string> child_args(const Matrix& matrix, const Slot& slot, const std::string& db) {
  std::vector<std::string> args = {matrix.cells[slot.cell].nproc > 1 ? "launch" : "run", matrix.spec.base_path};
  for (const auto& o : run_overrides(matrix.spec, matrix.cells[slot.cell], slot.repeat)) {
    args.push_back("--set");
    args.push_back(o.set_arg());
  }
  args.push_back("--db");
  args.push_back(db);
  return args;
}

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

std::string log_path(const std::string& log_dir, int64_t matrix_id, const Cell& cell, int64_t repeat) {
  std::string safe = cell.name;
  for (char& c : safe)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '=' && c != '-' && c != '_') c = '_';
  return (std::filesystem::path(log_dir) / fmt::format("m{}-{}-r{}.log", matrix_id, safe, repeat)).string();
}

Outcome run_slots(const Matrix& matrix, int64_t matrix_id, const std::vector<Slot>& slots, const RunnerOptions& opt) {
  std::filesystem::create_directories(opt.log_dir);
  struct Running {
    Slot slot;
    std::vector<size_t> lanes;  // indices into opt.gpus (lane 0 without GPUs)
    Clock::time_point start;
    std::string log;
  };
  const size_t lanes = std::max<size_t>(1, opt.gpus.size());
  std::vector<bool> busy(lanes, false);
  std::map<pid_t, Running> running;
  Outcome outcome;
  size_t next = 0, finished = 0, timed = 0;
  double busy_seconds = 0;  // summed run time of the `timed` finished children, for the ETA
  // One progress line per finished run; `failure` is empty when it ended ok.
  auto finish = [&](const Slot& slot, double took, const std::string& failure, const std::string& log) {
    ++finished;
    ++timed;
    busy_seconds += took;
    failure.empty() ? ++outcome.ok : ++outcome.failed;
    // Remaining work spread over the lanes, at the mean run time so far.
    const double eta = busy_seconds / static_cast<double>(timed) * static_cast<double>(slots.size() - finished) /
                       static_cast<double>(lanes);
    fmt::print(opt.out, "[{}/{}] {} r{} {} {:.1f} s, {} not ok, {}{}\n", finished, slots.size(), matrix.cells[slot.cell].name,
               slot.repeat, failure.empty() ? "ok" : failure, took, outcome.failed,
               g_stop_signal != 0 ? "stopping" : "ETA " + format_eta(eta), failure.empty() ? "" : ", log " + log);
    std::fflush(opt.out);
  };
  // A pair another runner took (or finished) since this one listed its work: not run here.
  auto skip = [&](const Slot& slot, const receipts::MatrixClaim& claim) {
    ++finished;
    ++outcome.skipped;
    fmt::print(opt.out, "[{}/{}] {} r{} skipped: {} {}\n", finished, slots.size(), matrix.cells[slot.cell].name, slot.repeat,
               claim.outcome == receipts::MatrixClaim::Outcome::done ? "already ok in" : "taken by", claim.holder);
    std::fflush(opt.out);
  };
  RunnerRegistration runner(opt.db, matrix_id, opt.out);
  const StopSignals stop_signals;
  int forwarded = 0;  // the stop signal the children were sent (0: none yet)
  while (finished < slots.size()) {
    if (const int sig = g_stop_signal; sig != 0 && forwarded == 0) {
      // Stopped: no new run starts; each running child gets the signal and records its run killed.
      forwarded = sig;
      for (const auto& [child, r] : running) ::kill(child, sig);
      fmt::print(opt.out, "matrix: got {}: stopping {} running run(s); nothing new starts\n", ::strsignal(sig),
                 running.size());
      std::fflush(opt.out);
    }
    // After the children have gone: the runner dies of the signal it got, as if it had not caught it.
    if (forwarded != 0 && running.empty()) {
      runner.end();
      base::die_of_signal(forwarded);
    }
    runner.beat();
    // Start slots in order while their lanes are free: a data-parallel cell takes nproc GPUs at once
    // (one lane without --gpus); the order is kept, so a wide cell waits for its GPUs rather than being
    // overtaken.
    while (forwarded == 0 && next < slots.size()) {
      const Slot slot = slots[next];
      const Cell& cell = matrix.cells[slot.cell];
      const std::string log = log_path(opt.log_dir, matrix_id, cell, slot.repeat);
      const size_t want = opt.gpus.empty() ? 1 : static_cast<size_t>(std::max<int64_t>(1, cell.nproc));
      if (want > lanes) {
        ++next;
        finish(slot, 0, fmt::format("failed (distributed.nproc = {} needs {} GPUs, --gpus lists {})", cell.nproc, want,
                                    lanes),
               log);
        continue;
      }
      std::vector<size_t> free;
      for (size_t lane = 0; lane < lanes && free.size() < want; ++lane)
        if (!busy[lane]) free.push_back(lane);
      if (free.size() < want) break;
      ++next;
      receipts::MatrixClaim claim;
      try {
        claim = runner.claim(cell.name, slot.repeat);
      } catch (const std::exception& e) {  // the store refused: this pair fails here, the rest go on
        finish(slot, 0, fmt::format("failed (cannot claim it in {}: {})", opt.db, e.what()), log);
        continue;
      }
      if (claim.outcome != receipts::MatrixClaim::Outcome::claimed) {
        skip(slot, claim);
        continue;
      }
      std::string devices;
      for (size_t lane : free) devices += (devices.empty() ? "" : ",") + (opt.gpus.empty() ? "" : opt.gpus[lane]);
      try {
        const pid_t pid = spawn(opt.binary, child_args(matrix, slot, opt.db),
                                child_env(matrix_id, cell, slot.repeat, opt.gpus.empty() ? nullptr : &devices), log);
        running.emplace(pid, Running{slot, free, Clock::now(), log});
        for (size_t lane : free) busy[lane] = true;
      } catch (const std::runtime_error& e) {  // a failed run like any other: the children already started go on
        finish(slot, 0, fmt::format("failed ({})", e.what()), log);
      }
    }
    if (running.empty()) continue;
    // Each child polled by its pid (never waitpid(-1): other children of this process are not ours), so a
    // stop signal that lands between the check above and the wait is seen within 50 ms.
    bool reaped = false;
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t pid = ::waitpid(it->first, &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) {
        ++it;
        continue;
      }
      if (pid < 0) throw std::runtime_error(fmt::format("waiting for matrix run {}: {}", it->first, std::strerror(errno)));
      const Running r = it->second;
      it = running.erase(it);
      reaped = true;
      for (size_t lane : r.lanes) busy[lane] = false;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      finish(r.slot, std::chrono::duration<double>(Clock::now() - r.start).count(), ok ? "" : exit_text(status), r.log);
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return outcome;
}

}  // namespace ablate::ablations
