// receipts/lifecycle.cpp: heartbeat thread + sigwait thread around one run (see lifecycle.h).
// Tests: tests/receipts/lifecycle_test.cpp (forks children and kills them with SIGTERM/SIGINT/SIGKILL).
#include "receipts/lifecycle.h"

#include <fmt/format.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "base/clock.h"
#include "base/die_of_signal.h"

namespace ablate::receipts {
namespace {

// A note on stderr that cannot throw: these run in the lifecycle's threads and its destructor, where
// a failed write (stderr on a full disk) must not terminate the process.
template <typename... Args>
void say_error(fmt::format_string<Args...> format, Args&&... args) noexcept {
  try {
    const std::string text = fmt::format(format, std::forward<Args>(args)...);
    std::fwrite(text.data(), 1, text.size(), stderr);
  } catch (...) {
  }
}

// The signals that end a run as `killed`: SIGINT and SIGTERM, and SIGHUP and SIGQUIT (a closed
// terminal or remote login, a quit key are ordinary ends too), except those the process was told to
// ignore (e.g. SIGINT of a background job started by a non-interactive shell, SIGHUP under nohup):
// an ignored signal must keep being ignored.
sigset_t termination_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&set, sig);
  }
  return set;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return fmt::format("signal {}", sig);
  }
}


}  // namespace

void RunLifecycle::block_termination_signals() {
  const sigset_t set = termination_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

RunLifecycle::RunLifecycle(const std::string& db_path, std::int64_t run_id, LifecycleOptions options)
    : run_id_(run_id), interval_s_(base::env_seconds("ABLATE_HEARTBEAT_S", options.heartbeat_interval_s)) {
  if (interval_s_ <= 0) throw StoreError(fmt::format("heartbeat interval must be > 0 s, got {}", interval_s_));
  heartbeat_store_ = std::make_unique<Store>(Store::open(db_path, options.store));
  finish_store_ = std::make_unique<Store>(Store::open(db_path, options.store));
  heartbeat_store_->heartbeat(run_id_);  // throws if the run is unknown or already finished

  // Mask first, threads second: both threads inherit the mask, so only sigwait ever sees the signals.
  handled_ = termination_signals();
  pthread_sigmask(SIG_BLOCK, &handled_, &previous_mask_);
  wake_signal_ = sigismember(&handled_, SIGTERM) ? SIGTERM : sigismember(&handled_, SIGINT) ? SIGINT : 0;
  try {
    if (wake_signal_ != 0) signal_thread_ = std::thread([this] { signal_loop(); });
    heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  } catch (...) {
    stop_signal_thread();
    throw;
  }
}

RunLifecycle::~RunLifecycle() {
  if (finished()) return;
  try {
    finish(RunStatus::failed, "ended without a result");
  } catch (const std::exception& e) {
    say_error("ablate: could not record the end of run {}: {}\n", run_id_, e.what());
    stop_heartbeat();
    stop_signal_thread();
  }
}

bool RunLifecycle::finished() const {
  std::lock_guard lock(mutex_);
  return ended_;
}

void RunLifecycle::finish(RunStatus status, const std::string& error, const RunSummary& summary) {
  if (status != RunStatus::ok && status != RunStatus::failed) {
    throw StoreError(
        fmt::format("RunLifecycle::finish takes ok or failed, not {} (killed is recorded by the signal thread)",
                    to_string(status)));
  }
  if (status == RunStatus::failed && error.empty()) {
    throw StoreError(fmt::format("run {} finishing as failed needs an error message saying why", run_id_));
  }
  {
    std::lock_guard lock(mutex_);
    if (ended_) throw StoreError(fmt::format("run {} has already finished", run_id_));
    stop_heartbeat();  // no heartbeat may race the final write
    try {
      finish_store_->finish_run(run_id_, status, error, summary);
    } catch (const SqliteError& e) {
      if ((e.code() & 0xff) != SQLITE_FULL) throw;
      // A full disk may still take the smallest end, one row rewritten in place of the summary's pages:
      // the run ends failed with its reason, never `running` or "ended without a result". A run that
      // trained to the end without its summary is no evidence.
      finish_store_->finish_run(
          run_id_, RunStatus::failed,
          status == RunStatus::ok ? fmt::format("training ended, but its summary could not be written: {}", e.what())
                                  : fmt::format("{} (its summary could not be written: {})", error, e.what()),
          {});
    }
    ended_ = true;
  }
  stop_signal_thread();
}

void RunLifecycle::heartbeat_loop() {
  const auto interval = std::chrono::duration<double>(interval_s_);
  std::unique_lock lock(heartbeat_mutex_);
  while (!heartbeat_cv_.wait_for(lock, interval, [this] { return heartbeat_stopping_; })) {
    lock.unlock();
    try {
      heartbeat_store_->heartbeat(run_id_);
    } catch (const StoreError&) {
      return;  // the run was finished elsewhere (e.g. marked killed): nothing left to keep alive
    } catch (const std::exception& e) {
      // Transient (a lock held past busy_timeout): a missed beat is harmless, keep trying.
      say_error("ablate: heartbeat of run {} failed, retrying: {}\n", run_id_, e.what());
    }
    lock.lock();
  }
}

void RunLifecycle::stop_heartbeat() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    heartbeat_stopping_ = true;
  }
  heartbeat_cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void RunLifecycle::signal_loop() {
  while (true) {
    siginfo_t info{};
    const int sig = sigwaitinfo(&handled_, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      say_error("ablate: sigwaitinfo failed ({}); run {} will not be marked killed on a signal\n",
                std::strerror(errno), run_id_);
      return;
    }
    // Our own wake-up from stop_signal_thread(): queued by this process with this object as payload.
    // (si_code alone would not do: some kernels report tgkill as SI_USER, like an outside kill.)
    const bool wake = info.si_code == SI_QUEUE && info.si_pid == getpid() && info.si_value.sival_ptr == this;
    if (wake && signal_stopping_.load()) return;
    if (wake) continue;
    on_signal(sig);
  }
}

void RunLifecycle::on_signal(int sig) {
  {
    std::lock_guard lock(mutex_);
    if (!ended_) {
      try {
        finish_store_->finish_run(run_id_, RunStatus::killed, fmt::format("killed by {}", signal_name(sig)), {});
        say_error("ablate: run {} killed by {}: recorded as killed in {} (not evidence)\n", run_id_, signal_name(sig),
                  finish_store_->path());
      } catch (const std::exception& e) {
        say_error("ablate: could not mark run {} killed: {}\n", run_id_, e.what());
      }
      ended_ = true;
    }
  }
  base::die_of_signal(sig);
}

void RunLifecycle::stop_signal_thread() {
  if (signal_thread_.joinable()) {
    signal_stopping_ = true;
    sigval payload{};
    payload.sival_ptr = this;
    pthread_sigqueue(signal_thread_.native_handle(), wake_signal_, payload);
    signal_thread_.join();
  }
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

}  // namespace ablate::receipts
