// data/loader.h: the data loader thread (docs/architecture.md "One run", step 5). One
// producer thread fills a bounded queue with batches in order from a DataState; next() hands them
// out with the nanoseconds the caller waited (the runner charges them to `data_wait`). An exception
// in the producer is rethrown by next() after the batches made before it; the destructor stops and
// joins the producer even when the consumer quits early.
// Tested in tests/data/ (DataLoaderTest.*).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "data/source.h"

namespace ablate::data {

struct LoadedBatch {
  Batch batch;
  int64_t wait_ns = 0;  // time next() spent waiting for the producer
};

class Loader {
 public:
  // `source` must outlive the loader. prefetch < 1 is taken as 1. Throws DataError (in the caller's
  // thread) when `start` does not fit the source.
  Loader(const DataSource& source, DataState start, int64_t prefetch = 4);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  LoadedBatch next();

 private:
  void produce();

  BatchIterator it_;
  size_t depth_;
  std::mutex mu_;
  std::condition_variable can_put_, can_take_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool done_ = false;  // the producer has exited (after an error)
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace ablate::data
