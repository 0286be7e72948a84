// tests/receipts/run_recorder_test.cpp: RunRecorder, the one writer of a run: the owner begins,
// records and finishes it; an attached rank adds only its own rows and cannot touch the run's facts;
// a failed run keeps its step rows (the failing step's included) and the facts known when it failed.
// Run: build/tests/receipts_tests --gtest_filter='RunRecorder*'
#include "receipts/run_recorder.h"

#include <gtest/gtest.h>

#include "receipts/errors.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

StepRow step_row(std::int64_t step, double loss) {
  StepRow r;
  r.step = step;
  r.wall_ms = 10;
  r.loss = loss;
  return r;
}

class RunRecorderTest : public ::testing::Test {
 protected:
  base::TempDir dir_;
  std::string path_ = dir_.file("receipts.db");
  testing::ScopedEnv no_interval_override_{"ABLATE_HEARTBEAT_S", std::nullopt};
};

TEST_F(RunRecorderTest, OwnerAndRanksWriteOneRun) {
  auto owner = RunRecorder::begin(path_, testing::sample_start("dp"));
  ASSERT_TRUE(owner->owns_run());
  auto rank1 = RunRecorder::attach(path_, owner->run_id(), 1);
  EXPECT_FALSE(rank1->owns_run());
  for (std::int64_t s = 0; s < 3; ++s) {
    owner->step(step_row(s, 2.0));
    StepRow other = step_row(s, 2.0);
    other.rank = 0;  // the recorder's rank wins: a rank cannot write rows as another
    rank1->step(other);
  }
  rank1->flush_steps();
  rank1->outliers({2});
  EXPECT_THROW(rank1->env({{"x", "y"}}), StoreError);
  EXPECT_THROW(rank1->finish_ok(testing::sample_summary()), StoreError);
  CaptureFacts capture;
  capture.requested = true;
  capture.outcome = CaptureOutcome::refused;
  capture.reason = "refused: data parallel";
  EXPECT_THROW(rank1->capture(capture), StoreError);
  owner->capture(capture);
  owner->finish_ok(testing::sample_summary());

  auto& store = owner->store();
  const auto rows = store.query("SELECT rank, COUNT(*) AS n, SUM(outlier) AS outliers FROM steps WHERE run_id = ? "
                                "GROUP BY rank ORDER BY rank",
                                {owner->run_id()});
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["n"], 3);
  EXPECT_EQ(rows[1]["n"], 3);
  EXPECT_EQ(rows[0]["outliers"], 0);
  EXPECT_EQ(rows[1]["outliers"], 1);  // rank 1 flags its own outliers
  const auto env = store.run_json(owner->run_id())["env"];
  EXPECT_EQ(env["compile.cuda_graphs_outcome"], "refused");
  EXPECT_EQ(store.get_run(owner->run_id()).status, RunStatus::ok);
}

TEST_F(RunRecorderTest, AttachingToAFinishedOrUnknownRunIsRefused) {
  auto owner = RunRecorder::begin(path_, testing::sample_start("x"));
  const auto id = owner->run_id();
  EXPECT_THROW(RunRecorder::attach(path_, id + 1, 1), StoreError);
  EXPECT_THROW(RunRecorder::attach(path_, id, 0), StoreError);
  owner->finish_failed("boom");
  EXPECT_THROW(RunRecorder::attach(path_, id, 1), StoreError);
}

TEST_F(RunRecorderTest, AFailedRunKeepsItsRowsAndFacts) {
  auto rec = RunRecorder::begin(path_, testing::sample_start("fails"));
  rec->step(step_row(0, 2.0));
  rec->step(step_row(1, std::nan("")));  // the non-finite step that fails the run
  RunFacts facts;
  facts.first_step_ms = 5;
  rec->finish_failed("non-finite loss at step 1", facts);
  auto store = Store::open_existing(path_);
  const auto run = store.get_run(rec->run_id());
  EXPECT_EQ(run.status, RunStatus::failed);
  EXPECT_EQ(run.summary.facts.first_step_ms, 5.0);
  const auto steps = store.query("SELECT step, loss FROM steps WHERE run_id = ? ORDER BY step", {rec->run_id()});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_TRUE(steps[1]["loss"].is_null());  // NaN is stored as NULL
  EXPECT_THROW(rec->finish_ok(testing::sample_summary()), StoreError);
}

TEST_F(RunRecorderTest, ADamagedStoreIsRefusedBeforeAnyRunBegins) {
  testing::write_file(path_, std::string(8192, 'x'));
  const auto before = testing::FileSnapshot::of(path_);
  EXPECT_THROW(RunRecorder::begin(path_, testing::sample_start("x")), std::runtime_error);
  EXPECT_EQ(testing::FileSnapshot::of(path_), before);
}

}  // namespace
}  // namespace ablate::receipts
