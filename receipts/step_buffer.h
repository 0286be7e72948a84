// receipts/step_buffer.h: a run's step rows on their way to the store. Rows are written (one
// transaction, Store::append_steps) when `max_rows` are pending or when `max_seconds` have passed
// since the last write, whichever comes first. The guarantee for a run that dies without finishing
// (SIGKILL, the OOM killer, a lost machine): every step up to the last write is in the receipt, and
// the steps it loses number fewer than `max_rows` and all ended less than `max_seconds` after that
// write. Fast steps (milliseconds) go in batches of 64, one transaction each; slow steps (seconds or
// minutes at scale) are written one by one as they end, so a stretch of slow steps is never held back.
// The check runs when a row is added, on the training thread (a Store is one connection, not shared):
// there is no timer thread, and nothing is pending while no step ends.
// Cost: one steady_clock read per step plus at most one transaction per `max_seconds` beyond the
// count flushes (store_bench: BM_StepBuffer, BM_AppendSteps/1). Tests: tests/receipts/step_buffer_test.cpp,
// tests/harness/cli_test.cpp (a SIGKILLed run keeps its rows).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "receipts/records.h"
#include "receipts/store.h"

namespace ablate::receipts {

class StepBuffer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxRows = 64;
  static constexpr double kMaxSeconds = 2.0;

  // `start`: when the time bound starts counting (the first write is due max_seconds after it).
  // Throws StoreError for max_rows == 0 or max_seconds not > 0.
  StepBuffer(Store& store, std::int64_t run_id, std::size_t max_rows = kMaxRows, double max_seconds = kMaxSeconds,
             Clock::time_point start = Clock::now());

  // Queues the row; writes every pending row when the count or the time bound is reached. Returns true
  // when it wrote. A failed write throws (as Store::append_steps) and keeps the rows pending.
  bool add(const StepRow& row, Clock::time_point now = Clock::now());
  // Writes the pending rows now (the end of the run, ok or failed).
  void flush(Clock::time_point now = Clock::now());
  std::size_t pending() const { return pending_.size(); }

 private:
  Store& store_;
  std::int64_t run_id_;
  std::size_t max_rows_;
  Clock::duration max_age_;
  Clock::time_point last_write_;
  std::vector<StepRow> pending_;
};

}  // namespace ablate::receipts
