// data/loader.cpp: the prefetching producer thread (see loader.h).
// Tested in tests/data/ (DataLoaderTest.*).
#include "data/loader.h"

#include <chrono>

namespace ablate::data {

Loader::Loader(const DataSource& source, DataState start, int64_t prefetch)
    : it_(source, start), depth_(prefetch < 1 ? 1 : static_cast<size_t>(prefetch)), thread_([this] { produce(); }) {}

Loader::~Loader() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  can_put_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::produce() {
  try {
    for (;;) {
      Batch b = it_.next();  // built outside the lock: the consumer is never held up by it
      std::unique_lock lk(mu_);
      can_put_.wait(lk, [&] { return stop_ || queue_.size() < depth_; });
      if (stop_) return;
      queue_.push_back(std::move(b));
      lk.unlock();
      can_take_.notify_one();
    }
  } catch (...) {
    std::lock_guard lk(mu_);
    error_ = std::current_exception();
    done_ = true;
  }
  can_take_.notify_all();
}

LoadedBatch Loader::next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lk(mu_);
  can_take_.wait(lk, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) std::rethrow_exception(error_);  // done_ is only set with an error
  LoadedBatch out;
  out.batch = std::move(queue_.front());
  queue_.pop_front();
  lk.unlock();
  can_put_.notify_one();
  out.wait_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace ablate::data
