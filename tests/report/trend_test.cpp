// tests/report/trend_test.cpp: step detection (report::detect_change_points) on synthetic series with
// known change points, on pure noise (none), with a single wild run (none), and the lane trend over a
// fixture store: a regression found with the run ids on each side, a small shift within the threshold,
// unknown lanes and bad dates refused.
// Build and run: cmake --build build --target report_tests && build/tests/report_tests --gtest_filter='Trend*:ChangePoints*'
#include <gtest/gtest.h>

#include <cmath>

#include "report/stats.h"
#include "report/trend.h"
#include "tests/report/fixture_store.h"

namespace ablate::report {
namespace {

using testing::FixtureRun;
using testing::FixtureStore;

// `levels` as consecutive blocks of `length` runs, with relative Gaussian noise of `noise`.
std::vector<double> blocks(const std::vector<double>& levels, std::size_t length, double noise, std::uint64_t seed) {
  base::SplitMix64 rng(seed);
  std::vector<double> out;
  for (const double level : levels)
    for (std::size_t i = 0; i < length; ++i) out.push_back(level * (1 + noise * rng.normal()));
  return out;
}

TEST(ChangePoints, FindsTwoKnownShifts) {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const auto series = blocks({100, 115, 100}, 10, 0.01, seed);
    EXPECT_EQ(detect_change_points(series), (std::vector<std::size_t>{10, 20})) << "seed " << seed;
  }
}

TEST(ChangePoints, FindsOneShiftAtItsPosition) {
  base::SplitMix64 rng(7);
  std::vector<double> series;
  for (int i = 0; i < 17; ++i) series.push_back(50 * (1 + 0.02 * rng.normal()));
  for (int i = 0; i < 8; ++i) series.push_back(56 * (1 + 0.02 * rng.normal()));
  EXPECT_EQ(detect_change_points(series), (std::vector<std::size_t>{17}));
}

TEST(ChangePoints, NoneOnPureNoise) {
  std::size_t series_with_change_points = 0;
  for (std::uint64_t seed = 100; seed < 140; ++seed)
    series_with_change_points += !detect_change_points(blocks({100}, 60, 0.03, seed)).empty();
  // Each series is one family-wise test at alpha = 0.05 (Bonferroni over candidate splits, so fewer).
  EXPECT_LE(series_with_change_points, 1u);
}

TEST(ChangePoints, OneWildRunIsNotAShift) {
  auto series = blocks({100}, 30, 0.01, 3);
  series[15] = 300;
  EXPECT_TRUE(detect_change_points(series).empty());
}

TEST(ChangePoints, TooShortOrFlatSeriesHaveNone) {
  EXPECT_TRUE(detect_change_points({100, 100, 100, 200, 200}).empty());  // fewer than 2 x min_segment
  EXPECT_TRUE(detect_change_points(std::vector<double>(40, 7.0)).empty());
  EXPECT_TRUE(detect_change_points({}).empty());
}

TEST(ChangePoints, MinimumSegmentIsRespected) {
  const auto series = blocks({100, 130}, 10, 0.005, 5);
  ChangePointOptions wide;
  wide.min_segment = 11;  // a split at 10 would leave 10 on a side
  EXPECT_TRUE(detect_change_points(series, wide).empty());
  EXPECT_EQ(detect_change_points(series), (std::vector<std::size_t>{10}));
}

TEST(ChangePoints, RejectsNonPositiveValues) {
  EXPECT_THROW(detect_change_points({1, 0, 2}), std::invalid_argument);
  EXPECT_THROW(detect_change_points({1, 2}, {.min_segment = 0, .alpha = 0.05}), std::invalid_argument);
}

class TrendStore : public ::testing::Test {
 protected:
  // 12 runs near 100 ms, then 12 near `after` ms, all in the reference lane.
  void add_series(double after) {
    const auto before = blocks({100}, 12, 0.01, 21), later = blocks({after}, 12, 0.01, 22);
    before_ids = f.add_group("nightly", before);
    after_ids = f.add_group("nightly", later);
  }
  FixtureStore f;
  std::vector<std::int64_t> before_ids, after_ids;
  const std::string lane = "tiny/1gpu/reference";  // FixtureStore's lane for the reference backend
};

TEST_F(TrendStore, RegressionIsListedWithRunsOnEachSide) {
  add_series(110);
  FixtureRun failed;
  failed.status = receipts::RunStatus::failed;
  f.add("nightly", failed);
  const auto t = build_trend(f.store(), lane);
  ASSERT_EQ(t.points.size(), 24u);
  ASSERT_EQ(t.segments.size(), 2u);
  ASSERT_EQ(t.shifts.size(), 1u);
  EXPECT_EQ(t.shifts[0].kind, ShiftKind::regression);
  EXPECT_NEAR(t.shifts[0].change, 0.10, 0.02);
  EXPECT_LT(t.shifts[0].p_value, 1e-4);
  EXPECT_EQ(t.segment_run_ids(0), before_ids);
  EXPECT_EQ(t.segment_run_ids(1), after_ids);
  EXPECT_EQ(t.regressions(), 1u);
  ASSERT_EQ(t.notes.size(), 1u);
  EXPECT_NE(t.notes[0].find("1 failed"), std::string::npos) << t.notes[0];

  const auto text = render_text(t);
  EXPECT_NE(text.find(fmt::format("REGRESSION at run {}", after_ids.front())), std::string::npos) << text;
  EXPECT_NE(text.find("1 regression(s) worse than 5.0 %"), std::string::npos) << text;
  const auto j = to_json(t);
  EXPECT_EQ(j["shifts"][0]["kind"], "regression");
  EXPECT_EQ(j["shifts"][0]["runs_before"].get<std::vector<std::int64_t>>(), before_ids);
  EXPECT_EQ(j["shifts"][0]["runs_after"].get<std::vector<std::int64_t>>(), after_ids);
}

// Profiled runs (the tracer's cost) and runs of another length sit in the same lane; pooled with
// today's unprofiled runs they read as a regression. The trend keeps the runs measured as the newest.
TEST_F(TrendStore, ProfiledAndShorterRunsAreNotPooledWithTheOthers) {
  const auto plain = f.add_group("nightly", blocks({100}, 12, 0.01, 31));
  FixtureRun traced;
  traced.profiled = true;
  f.add_group("nightly", blocks({118}, 8, 0.01, 32), traced);
  FixtureRun short_run;
  short_run.summary_steps = 30;
  f.add_group("nightly", blocks({125}, 8, 0.01, 33), short_run);
  const auto newest = f.add_group("nightly", blocks({100}, 4, 0.01, 34));
  const auto t = build_trend(f.store(), lane);
  EXPECT_EQ(t.points.size(), plain.size() + newest.size());
  EXPECT_EQ(t.regressions(), 0u) << render_text(t);
  ASSERT_FALSE(t.notes.empty());
  EXPECT_NE(t.notes[0].find("16 ok run(s) measured otherwise are left out: the trend keeps unprofiled runs of 100 steps"),
            std::string::npos)
      << t.notes[0];
}

TEST_F(TrendStore, ShiftSmallerThanTheThresholdIsNoRegression) {
  add_series(103);
  TrendOptions options;
  options.threshold = 0.05;
  const auto t = build_trend(f.store(), lane, options);
  ASSERT_EQ(t.shifts.size(), 1u);
  EXPECT_EQ(t.shifts[0].kind, ShiftKind::within_threshold);
  EXPECT_EQ(t.regressions(), 0u);
  EXPECT_NE(render_text(t).find("no regression worse than 5.0 %"), std::string::npos);
}

TEST_F(TrendStore, FasterIsAnImprovement) {
  add_series(80);
  const auto t = build_trend(f.store(), lane);
  ASSERT_EQ(t.shifts.size(), 1u);
  EXPECT_EQ(t.shifts[0].kind, ShiftKind::improvement);
}

TEST_F(TrendStore, UnknownLaneNamesKnownLanes) {
  add_series(100);
  try {
    build_trend(f.store(), "no/such/lane");
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no runs in lane 'no/such/lane'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(lane), std::string::npos) << e.what();
  }
}

TEST_F(TrendStore, BadSinceAndThresholdAreRefused) {
  add_series(100);
  TrendOptions options;
  options.since = "last tuesday";
  EXPECT_THROW(build_trend(f.store(), lane, options), std::invalid_argument);
  options.since = "";
  options.threshold = 0;
  EXPECT_THROW(build_trend(f.store(), lane, options), std::invalid_argument);
}

TEST_F(TrendStore, SinceInTheFutureLeavesNoRuns) {
  add_series(110);
  TrendOptions options;
  options.since = "2999-01-01";
  const auto t = build_trend(f.store(), lane, options);
  EXPECT_TRUE(t.points.empty());
  EXPECT_TRUE(t.shifts.empty());
  EXPECT_NE(render_text(t).find("no ok runs in this period"), std::string::npos);
}

}  // namespace
}  // namespace ablate::report
