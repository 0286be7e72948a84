// tests/harness/goodput_test.cpp: the goodput ledger charges every second exactly once. Time is
// injected (explicit time points), so the checks are exact and independent of machine speed.
#include <gtest/gtest.h>

#include "harness/goodput.h"

using ablate::harness::Goodput;
using ablate::harness::GoodputLedger;
using namespace std::chrono_literals;

namespace {
double sum(const std::map<std::string, double>& t) {
  double s = 0;
  for (const auto& [k, v] : t) s += v;
  return s;
}
}  // namespace

TEST(Goodput, SequentialChargesAndRemainderIsOther) {
  const auto t0 = GoodputLedger::Clock::time_point{};
  GoodputLedger g(t0);
  g.begin(Goodput::startup, t0);
  g.end(t0 + 2s);
  g.begin(Goodput::productive, t0 + 3s);  // 1 s uncharged -> other
  g.end(t0 + 9s);
  const auto t = g.totals(t0 + 10s);  // 1 s more uncharged
  EXPECT_DOUBLE_EQ(t.at("startup"), 2.0);
  EXPECT_DOUBLE_EQ(t.at("productive"), 6.0);
  EXPECT_DOUBLE_EQ(t.at("other"), 2.0);
  EXPECT_DOUBLE_EQ(sum(t), 10.0);
  EXPECT_DOUBLE_EQ(g.goodput(t0 + 10s), 0.6);
  EXPECT_EQ(t.size(), 9u);  // every category is always reported, zeros included
}

TEST(Goodput, NestedChargeTakesItsTimeFromTheOuter) {
  const auto t0 = GoodputLedger::Clock::time_point{};
  GoodputLedger g(t0);
  g.begin(Goodput::productive, t0);
  g.begin(Goodput::checkpoint, t0 + 4s);
  g.begin(Goodput::eval, t0 + 5s);  // three deep
  g.end(t0 + 7s);
  g.end(t0 + 8s);
  g.end(t0 + 10s);
  const auto t = g.totals(t0 + 10s);
  EXPECT_DOUBLE_EQ(t.at("productive"), 6.0);
  EXPECT_DOUBLE_EQ(t.at("checkpoint"), 2.0);
  EXPECT_DOUBLE_EQ(t.at("eval"), 2.0);
  EXPECT_DOUBLE_EQ(t.at("other"), 0.0);
  EXPECT_DOUBLE_EQ(sum(t), 10.0);
}

TEST(Goodput, OverlappingMeasuredIntervalIsMovedNotDoubleCounted) {
  // A step (productive) during which the loader blocked for 1.5 s, measured by the loader itself.
  const auto t0 = GoodputLedger::Clock::time_point{};
  GoodputLedger g(t0);
  g.begin(Goodput::productive, t0);
  g.move_to(Goodput::data_wait, 1.5);
  g.end(t0 + 5s);
  // A warm-up step first charged as productive, then re-labelled.
  g.begin(Goodput::productive, t0 + 5s);
  g.end(t0 + 7s);
  g.reclassify(Goodput::productive, Goodput::warmup, 2.0);
  const auto t = g.totals(t0 + 8s);
  EXPECT_DOUBLE_EQ(t.at("productive"), 3.5);
  EXPECT_DOUBLE_EQ(t.at("data_wait"), 1.5);
  EXPECT_DOUBLE_EQ(t.at("warmup"), 2.0);
  EXPECT_DOUBLE_EQ(t.at("other"), 1.0);
  EXPECT_DOUBLE_EQ(sum(t), 8.0);
}

TEST(Goodput, OpenChargeCountsUpToNowAndScopesClose) {
  const auto t0 = GoodputLedger::Clock::time_point{};
  GoodputLedger g(t0);
  g.begin(Goodput::data_prep, t0);
  EXPECT_DOUBLE_EQ(g.totals(t0 + 3s).at("data_prep"), 3.0);
  g.end(t0 + 4s);
  EXPECT_THROW(g.end(t0 + 5s), std::logic_error);

  GoodputLedger real;  // the real clock: scopes nest and the sum still equals wall time
  {
    GoodputLedger::Scope a(real, Goodput::startup);
    GoodputLedger::Scope b(real, Goodput::profiling);
  }
  const auto now = GoodputLedger::Clock::now();
  EXPECT_NEAR(sum(real.totals(now)), real.wall_seconds(now), 1e-9);
}
