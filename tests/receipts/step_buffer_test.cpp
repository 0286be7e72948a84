// tests/receipts/step_buffer_test.cpp: StepBuffer writes a run's step rows by count or by time,
// whichever comes first, on a real store with an injected clock; a failed write keeps the rows.
// Run: build/tests/receipts_tests --gtest_filter='StepBuffer*'
#include "receipts/step_buffer.h"

#include <gtest/gtest.h>

#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using testing::make_steps;
using testing::sample_start;
using namespace std::chrono_literals;
using Clock = StepBuffer::Clock;

std::int64_t stored_steps(Store& store, std::int64_t run_id) {
  return store.query("SELECT count(*) AS n FROM steps WHERE run_id = ?", {run_id})[0]["n"].get<std::int64_t>();
}

class StepBufferTest : public ::testing::Test {
 protected:
  base::TempDir dir_{"ablate-step-buffer"};
  Store store_ = Store::open(dir_.file("r.db"));
  std::int64_t run_ = store_.begin_run(sample_start("buffered"));
  Clock::time_point t0_ = Clock::now();
};

// Fast steps (10 ms): nothing is written until 64 rows are pending, then all 64 in one write.
TEST_F(StepBufferTest, FastStepsAreWrittenInBatchesOfTheRowCount) {
  StepBuffer buffer(store_, run_, 64, 2.0, t0_);
  const auto rows = make_steps(130);
  for (int i = 0; i < 63; ++i) EXPECT_FALSE(buffer.add(rows[i], t0_ + (i + 1) * 10ms)) << i;
  EXPECT_EQ(stored_steps(store_, run_), 0);
  EXPECT_TRUE(buffer.add(rows[63], t0_ + 640ms));
  EXPECT_EQ(stored_steps(store_, run_), 64);
  EXPECT_EQ(buffer.pending(), 0u);
  for (int i = 64; i < 130; ++i) buffer.add(rows[i], t0_ + (i + 1) * 10ms);
  EXPECT_EQ(stored_steps(store_, run_), 128);
  buffer.flush();
  EXPECT_EQ(stored_steps(store_, run_), 130);
}

// Slow steps (3 s each, longer than the 2 s bound): every row is written as its step ends, so a run
// killed during its 5th step has 4 rows, where a count of 64 alone would have kept none.
TEST_F(StepBufferTest, SlowStepsAreWrittenAsTheyEnd) {
  StepBuffer buffer(store_, run_, 64, 2.0, t0_);
  const auto rows = make_steps(4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(buffer.add(rows[i], t0_ + (i + 1) * 3s)) << i;
    EXPECT_EQ(stored_steps(store_, run_), i + 1);
  }
}

// Steps of 0.5 s: a write every 2 s (4 rows), measured from the last write, not from the first row.
TEST_F(StepBufferTest, MediumStepsAreWrittenOncePerTimeBound) {
  StepBuffer buffer(store_, run_, 64, 2.0, t0_);
  const auto rows = make_steps(9);
  std::vector<int> written_after;
  for (int i = 0; i < 9; ++i)
    if (buffer.add(rows[i], t0_ + (i + 1) * 500ms)) written_after.push_back(i + 1);
  EXPECT_EQ(written_after, (std::vector<int>{4, 8}));
  EXPECT_EQ(stored_steps(store_, run_), 8);
  EXPECT_EQ(buffer.pending(), 1u);
}

TEST_F(StepBufferTest, AFailedWriteKeepsTheRowsPending) {
  StepBuffer buffer(store_, run_, 2, 2.0, t0_);
  auto rows = make_steps(2);
  rows[1].wall_ms = -1;  // refused by the store
  EXPECT_FALSE(buffer.add(rows[0], t0_));
  EXPECT_THROW(buffer.add(rows[1], t0_), StoreError);
  EXPECT_EQ(buffer.pending(), 2u);
  EXPECT_EQ(stored_steps(store_, run_), 0);
}

TEST_F(StepBufferTest, RefusesBoundsThatNeverWrite) {
  EXPECT_THROW(StepBuffer(store_, run_, 0, 2.0), StoreError);
  EXPECT_THROW(StepBuffer(store_, run_, 64, 0.0), StoreError);
  EXPECT_THROW(StepBuffer(store_, run_, 64, std::nan("")), StoreError);
}

}  // namespace
}  // namespace ablate::receipts
