// tests/data/loader_test.cpp: the prefetching loader thread: same batches, errors, early destruction, waits (data/loader.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataLoader*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/corpus.h"
#include "data/errors.h"
#include "data/hash.h"
#include "data/loader.h"
#include "data/packing.h"
#include "base/rng.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "tests/data/data_fixtures.h"

namespace fs = std::filesystem;
using namespace ablate::data;
using namespace ablate::data::test_fixtures;
using ::testing::HasSubstr;

namespace {

// Rows are their index repeated; optionally throws at a given row, or sleeps per row.
class TestSource final : public DataSource {
 public:
  TestSource(int64_t seq_len, int64_t batch, uint64_t rows, int64_t throw_at = -1, int sleep_ms = 0)
      : DataSource(make_opts(seq_len, batch), DataDescription{}), rows_(rows), throw_at_(throw_at), sleep_ms_(sleep_ms) {}
  uint64_t rows_per_epoch() const override { return rows_; }
  bool shuffled() const override { return true; }
  void fill_row(uint64_t epoch, uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    const int64_t n = filled_++;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (throw_at_ >= 0 && n >= throw_at_) throw std::runtime_error("disk on fire at row " + std::to_string(row));
    for (int64_t i = 0; i <= opts_.seq_len; ++i) tokens[i] = static_cast<int32_t>(row + 1000 * epoch);
    for (int64_t i = 0; i < opts_.seq_len; ++i) mask[i] = 1;
  }
  mutable std::atomic<int64_t> filled_{0};

 private:
  static DataOptions make_opts(int64_t seq_len, int64_t batch) {
    DataOptions o;
    o.seq_len = seq_len;
    o.batch_size = batch;
    o.seed = 3;
    return o;
  }
  uint64_t rows_;
  int64_t throw_at_;
  int sleep_ms_;
};

}  // namespace

TEST(DataLoaderTest, SameBatchesAsDirectIterationAndResume) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));
  BatchIterator it(*src, {});
  std::vector<Batch> direct;
  for (int i = 0; i < 12; ++i) direct.push_back(it.next());
  {
    Loader loader(*src, {}, 2);
    for (int i = 0; i < 12; ++i) {
      const LoadedBatch lb = loader.next();
      EXPECT_GE(lb.wait_ns, 0);
      EXPECT_TRUE(same_batch(lb.batch, direct[static_cast<size_t>(i)])) << i;
    }
  }
  Loader resumed(*src, direct[4].state_after, 4);
  for (int i = 5; i < 12; ++i) EXPECT_TRUE(same_batch(resumed.next().batch, direct[static_cast<size_t>(i)])) << i;
  EXPECT_THROW(Loader(*src, {0, 99}, 4), DataError);
}

TEST(DataLoaderTest, ProducerErrorSurfacesInNextAfterEarlierBatches) {
  TestSource src(8, 2, 100, /*throw_at=*/5);  // rows 0-4 fine: batches 0 and 1 complete, batch 2 fails
  Loader loader(src, {}, 4);
  EXPECT_EQ(loader.next().batch.state_after, (DataState{0, 2}));
  EXPECT_EQ(loader.next().batch.state_after, (DataState{0, 4}));
  EXPECT_THAT([&] { loader.next(); }, ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("disk on fire")));
  EXPECT_THROW(loader.next(), std::runtime_error);  // stays failed, does not hang
}

TEST(DataLoaderTest, EarlyDestructionDoesNotHang) {
  TestSource src(16, 2, 1000);
  const auto t0 = std::chrono::steady_clock::now();
  { Loader never_read(src, {}, 1); }
  {
    Loader one(src, {}, 2);
    one.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the producer block on a full queue
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Bounded by the queue depths (1 and 2, plus one batch in hand each, 2 rows a batch), not the epoch.
  EXPECT_LE(src.filled_.load(), 2 * ((1 + 1) + (1 + 2 + 1)));
}

TEST(DataLoaderTest, WaitTimeIsReportedWhenTheProducerIsSlow) {
  TestSource src(4, 1, 100, -1, /*sleep_ms=*/30);
  Loader loader(src, {}, 1);
  loader.next();
  const LoadedBatch lb = loader.next();  // the producer needs ~30 ms per batch
  EXPECT_GT(lb.wait_ns, 5'000'000);
  // The source sees epoch and shuffled row: the ids are those of shuffled_order(100, 3, 0).
  EXPECT_EQ(lb.batch.tokens[0], static_cast<int32_t>(ablate::base::shuffled_order(100, 3, 0)[1]));
}
