// receipts/step_buffer.cpp: see step_buffer.h. Tests: tests/receipts/step_buffer_test.cpp.
#include "receipts/step_buffer.h"

#include <fmt/format.h>

#include <cmath>

namespace ablate::receipts {

StepBuffer::StepBuffer(Store& store, std::int64_t run_id, std::size_t max_rows, double max_seconds,
                       Clock::time_point start)
    : store_(store), run_id_(run_id), max_rows_(max_rows), last_write_(start) {
  if (max_rows == 0) throw StoreError("StepBuffer: max_rows must be >= 1");
  if (!(max_seconds > 0) || !std::isfinite(max_seconds))
    throw StoreError(fmt::format("StepBuffer: max_seconds must be a finite number > 0, got {}", max_seconds));
  max_age_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_seconds));
  pending_.reserve(max_rows);
}

bool StepBuffer::add(const StepRow& row, Clock::time_point now) {
  pending_.push_back(row);
  if (pending_.size() < max_rows_ && now - last_write_ < max_age_) return false;
  flush(now);
  return true;
}

void StepBuffer::flush(Clock::time_point now) {
  if (!pending_.empty()) store_.append_steps(run_id_, pending_);  // throws: the rows stay pending
  pending_.clear();
  last_write_ = now;
}

}  // namespace ablate::receipts
