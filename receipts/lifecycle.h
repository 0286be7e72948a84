// receipts/lifecycle.h: RunLifecycle, the RAII guard the runner holds around one run so that the run
// always ends in `ok`, `failed` or `killed` (docs/architecture.md "One run", step 3):
//   - a heartbeat thread refreshes runs.heartbeat_at every interval (own connection), so a run whose
//     process vanished (SIGKILL, power loss) reads as `abandoned` once the heartbeat is stale;
//   - SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked and taken by a sigwait thread, which marks the
//     run `killed` ("killed by SIGTERM", own connection), restores the default action and re-raises
//     the signal, so the process still exits with the conventional status (128 + signal in a shell);
//   - finish(ok|failed, ...) records the result and stops both threads; destruction without finish
//     (an exception unwinding) marks the run `failed` with "ended without a result".
//
// Construct it EARLY, on the main thread, before any other thread is started (data loader, NCCL,
// CUDA/LibTorch pools): signal masks are per thread and inherited at creation, so a thread created
// before the mask was set could take the signal and die with the default action, unrecorded.
// If threads must exist before the run is opened, call block_termination_signals() first thing in
// main(). Call finish() on the thread that constructed the lifecycle: it restores that thread's mask.
// Tests: tests/receipts/lifecycle_test.cpp (receipts_tests).
#pragma once

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "receipts/records.h"
#include "receipts/store.h"

namespace ablate::receipts {

struct LifecycleOptions {
  // Seconds between heartbeats; environment variable ABLATE_HEARTBEAT_S, when set, overrides it.
  double heartbeat_interval_s = 5.0;
  StoreOptions store;  // for the lifecycle's own connections
};

class RunLifecycle {
 public:
  // Blocks the termination signals in the calling thread (and so in threads it creates afterwards).
  // Idempotent. The constructor calls it too.
  static void block_termination_signals();

  // The run must exist and be `running`. Opens two connections to db_path (heartbeat, signal thread).
  RunLifecycle(const std::string& db_path, std::int64_t run_id, LifecycleOptions options = {});
  ~RunLifecycle();
  RunLifecycle(const RunLifecycle&) = delete;
  RunLifecycle& operator=(const RunLifecycle&) = delete;

  // status: ok or failed (failed needs the error). Stops the threads; the run is then read-only.
  // A second call throws StoreError.
  void finish(RunStatus status, const std::string& error = "", const RunSummary& summary = {});

  std::int64_t run_id() const { return run_id_; }
  double heartbeat_interval_s() const { return interval_s_; }
  bool finished() const;

 private:
  void heartbeat_loop();
  void signal_loop();
  void on_signal(int sig);
  void stop_heartbeat();
  void stop_signal_thread();

  std::int64_t run_id_;
  double interval_s_;
  std::unique_ptr<Store> heartbeat_store_;  // used by the heartbeat thread only
  std::unique_ptr<Store> finish_store_;     // used under mutex_ only: by finish() or the signal thread
  sigset_t handled_{};                      // SIGINT/SIGTERM/SIGHUP/SIGQUIT, minus any the process ignores
  int wake_signal_ = 0;                     // a handled signal, sent to the signal thread to stop it
  sigset_t previous_mask_{};

  mutable std::mutex mutex_;  // serialises finishing: finish() vs the signal thread marking `killed`
  bool ended_ = false;

  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_cv_;
  bool heartbeat_stopping_ = false;
  std::atomic<bool> signal_stopping_{false};
  std::thread heartbeat_thread_;
  std::thread signal_thread_;
};

}  // namespace ablate::receipts
