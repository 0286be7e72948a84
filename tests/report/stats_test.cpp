// tests/report/stats_test.cpp: report/stats against known answers: Mann-Whitney U exact p-values from the
// published tables, the normal approximation against hand arithmetic, bootstrap coverage on seeded
// synthetic experiments, and the verdict rule.
// Build and run: ninja -C build-report report_tests && build-report/tests/report_tests --gtest_filter='Stats*'
#include <gtest/gtest.h>

#include <stdexcept>

#include "report/stats.h"

namespace ablate::report {
namespace {

// n values around `center`, with relative noise `spread` (normal), from a seeded stream.
std::vector<double> synthetic(SplitMix64& rng, std::size_t n, double center, double spread) {
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(center * (1 + spread * rng.normal()));
  return out;
}

TEST(StatsMedian, OddEvenAndEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), std::invalid_argument);
}

TEST(StatsMannWhitney, ExactThreeVersusThreeSeparated) {
  // All of A below all of B: U_a = 0. Orderings of 3+3 values: C(6,3) = 20, one with U = 0, so
  // P(U <= 0) = 1/20 = 0.05 and the two-sided p = 2 * 0.05 = 0.1 (tables: n1 = n2 = 3, U = 0: 0.05 one-sided).
  const auto r = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u_a, 0);
  EXPECT_DOUBLE_EQ(r.u_b, 9);
  EXPECT_NEAR(r.p_value, 0.1, 1e-12);
}

TEST(StatsMannWhitney, ExactFiveVersusFiveSeparated) {
  // C(10,5) = 252 orderings, one with U = 0: two-sided p = 2/252 = 0.0079365.
  const auto r = mann_whitney_u({10, 11, 12, 13, 14}, {1, 2, 3, 4, 5});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u_a, 25);
  EXPECT_NEAR(r.p_value, 2.0 / 252, 1e-12);
}

TEST(StatsMannWhitney, ExactCdfMatchesTables) {
  // n1 = n2 = 4: 70 orderings; U = 0 once, U = 1 once, U = 2 twice -> P(U <= 1) = 2/70 = 0.0286,
  // P(U <= 2) = 4/70 = 0.0571 (Mann & Whitney 1947, table for n = 4).
  EXPECT_NEAR(mann_whitney_exact_cdf(4, 4, 1), 2.0 / 70, 1e-12);
  EXPECT_NEAR(mann_whitney_exact_cdf(4, 4, 2), 4.0 / 70, 1e-12);
  // n1 = 3, n2 = 4: C(7,3) = 35 orderings, P(U <= 0) = 1/35 = 0.0286.
  EXPECT_NEAR(mann_whitney_exact_cdf(3, 4, 0), 1.0 / 35, 1e-12);
  // The whole distribution sums to one and is symmetric: P(U <= k) = 1 - P(U <= n1*n2 - k - 1).
  EXPECT_DOUBLE_EQ(mann_whitney_exact_cdf(6, 8, 48), 1.0);
  EXPECT_NEAR(mann_whitney_exact_cdf(6, 8, 20), 1 - mann_whitney_exact_cdf(6, 8, 27), 1e-12);
  // One overlap in 4 vs 4 (A = {1,2,3,5}, B = {4,6,7,8}): U_a = 1 -> two-sided p = 2 * 2/70 = 0.0571.
  EXPECT_NEAR(mann_whitney_u({1, 2, 3, 5}, {4, 6, 7, 8}).p_value, 4.0 / 70, 1e-12);
}

TEST(StatsMannWhitney, NormalApproximationLargeSamples) {
  // 11 vs 11, separated (too large for the exact path): U_a = 0, mean = 121/2 = 60.5,
  // variance = 11*11*(22+1)/12 = 231.9167, sigma = 15.22881, z = (60.5 - 0.5)/15.22881 = 3.93990,
  // p = erfc(z / sqrt 2) = 8.1515e-5.
  std::vector<double> a, b;
  for (int i = 1; i <= 11; ++i) a.push_back(i), b.push_back(11 + i);
  const auto r = mann_whitney_u(a, b);
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u_a, 0);
  EXPECT_NEAR(r.p_value, 8.15154e-5, 1e-9);
}

TEST(StatsMannWhitney, NormalApproximationWithTies) {
  // A = {1,2,2,3}, B = {2,3,4,5}. U_a: 1 beats nothing; each 2 ties B's 2 (0.5) -> 1; 3 beats 2 and
  // ties 3 -> 1.5; U_a = 2.5. Ties: value 2 three times (27-3 = 24), value 3 twice (8-2 = 6): sum 30.
  // variance = 16/12 * ((8+1) - 30/(8*7)) = 11.28571, sigma = 3.35942, z = (|2.5 - 8| - 0.5)/3.35942
  // = 1.48835, p = erfc(z / sqrt 2) = 0.136658. Ties force the approximation even though n <= 10.
  const auto r = mann_whitney_u({1, 2, 2, 3}, {2, 3, 4, 5});
  EXPECT_FALSE(r.exact);
  EXPECT_DOUBLE_EQ(r.u_a, 2.5);
  EXPECT_NEAR(r.p_value, 0.136658, 1e-6);
}

TEST(StatsMannWhitney, AllTiedIsNoEvidence) {
  const auto r = mann_whitney_u({5, 5, 5}, {5, 5, 5});
  EXPECT_DOUBLE_EQ(r.p_value, 1);
  EXPECT_THROW(mann_whitney_u({}, {1}), std::invalid_argument);
}

TEST(StatsBootstrap, ClearTwentyPercentDifferenceExcludesOne) {
  base::SplitMix64 rng(42);
  const auto a = synthetic(rng, 10, 100, 0.03);
  const auto b = synthetic(rng, 10, 80, 0.03);
  const auto interval = ratio_of_medians(a, b);
  EXPECT_NEAR(interval.ratio, 0.8, 0.05);
  EXPECT_LT(interval.low, interval.ratio);
  EXPECT_GT(interval.high, interval.ratio);
  EXPECT_LT(interval.high, 1.0);
  EXPECT_EQ(classify(a.size(), b.size(), interval), Difference::faster);
  EXPECT_EQ(classify(b.size(), a.size(), ratio_of_medians(b, a)), Difference::slower);
  EXPECT_LT(mann_whitney_u(a, b).p_value, 0.001);
}

TEST(StatsBootstrap, IdenticalDistributionsIncludeOne) {
  base::SplitMix64 rng(7);
  const auto a = synthetic(rng, 10, 100, 0.03);
  const auto b = synthetic(rng, 10, 100, 0.03);
  const auto interval = ratio_of_medians(a, b);
  EXPECT_LT(interval.low, 1.0);
  EXPECT_GT(interval.high, 1.0);
  EXPECT_EQ(classify(a.size(), b.size(), interval), Difference::no_difference);
}

TEST(StatsBootstrap, SeededAndReproducible) {
  base::SplitMix64 rng(3);
  const auto a = synthetic(rng, 8, 100, 0.05);
  const auto b = synthetic(rng, 8, 95, 0.05);
  const auto first = ratio_of_medians(a, b, {.resamples = 500, .level = 0.95, .seed = 11});
  const auto again = ratio_of_medians(a, b, {.resamples = 500, .level = 0.95, .seed = 11});
  const auto other = ratio_of_medians(a, b, {.resamples = 500, .level = 0.95, .seed = 12});
  EXPECT_EQ(first.low, again.low);
  EXPECT_EQ(first.high, again.high);
  EXPECT_NE(first.low, other.low);
}

TEST(StatsBootstrap, CoverageOfTrueRatio) {
  // 200 synthetic experiments, 10 repeats a side, true medians 100 and 120 (normal noise is symmetric,
  // so the population medians are the centers): the 95 % interval should cover 1.2 in about 95 % of
  // them. The bootstrap distribution of a median of 10 values is discrete, so coverage is only roughly
  // nominal (this seed gives 96 %): accept 88-99 %, which still fails for a badly wide or narrow interval.
  base::SplitMix64 rng(2024);
  int covered = 0;
  constexpr int kExperiments = 200;
  for (int i = 0; i < kExperiments; ++i) {
    const auto a = synthetic(rng, 10, 100, 0.05);
    const auto b = synthetic(rng, 10, 120, 0.05);
    const auto interval = ratio_of_medians(a, b, {.resamples = 2000, .level = 0.95, .seed = static_cast<std::uint64_t>(i)});
    if (interval.low <= 1.2 && 1.2 <= interval.high) ++covered;
  }
  const double coverage = static_cast<double>(covered) / kExperiments;
  EXPECT_GE(coverage, 0.88);
  EXPECT_LE(coverage, 0.99);
}

TEST(StatsBootstrap, BadInputThrows) {
  EXPECT_THROW(ratio_of_medians({}, {1}), std::invalid_argument);
  EXPECT_THROW(ratio_of_medians({0, 0, 0}, {1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(ratio_of_medians({1}, {1}, {.resamples = 1, .level = 0.95, .seed = 1}), std::invalid_argument);
}

TEST(StatsClassify, FewerThanThreeIsUnreliableNeverAWin) {
  // Two runs a side, a 50 % difference and a tight interval: still not a win.
  const auto interval = ratio_of_medians({100, 101}, {50, 51});
  EXPECT_LT(interval.high, 1.0);
  EXPECT_EQ(classify(2, 2, interval), Difference::unreliable);
  EXPECT_EQ(classify(3, 2, interval), Difference::unreliable);
  EXPECT_EQ(classify(3, 3, interval), Difference::faster);
  EXPECT_EQ(to_string(Difference::no_difference), "no difference");
}

}  // namespace
}  // namespace ablate::report
