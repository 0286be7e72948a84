// report/stats.h: the statistics behind `ablate compare` and `ablate gate` (docs/architecture.md "Comparability and
// statistics"): medians, the ratio of two medians with a seeded percentile-bootstrap 95 % interval, the
// two-sided Mann-Whitney U test, and the verdict rule that turns them into faster / slower / no difference /
// unreliable. Pure functions of their inputs: the bootstrap draws from SplitMix64, so a seed gives the same
// interval on every machine and compiler.
// Tests: tests/report/stats_test.cpp (report_tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/rng.h"

namespace ablate::report {

using base::SplitMix64;

// Median of `values` (mean of the two middle values for an even count). Throws std::invalid_argument
// when empty.
double median(std::vector<double> values);

// median(b) / median(a) with a percentile-bootstrap interval: each side is resampled with replacement
// independently, `resamples` times, and the interval is the (1-level)/2 and (1+level)/2 quantiles of
// the resampled ratios.
struct RatioInterval {
  double ratio = 0;
  double low = 0;
  double high = 0;
  double level = 0.95;
};
struct BootstrapOptions {
  int resamples = 2000;
  double level = 0.95;
  std::uint64_t seed = 0x5eed'ab1a7eULL;
};
// Throws std::invalid_argument when a side is empty or median(a) is not positive.
RatioInterval ratio_of_medians(const std::vector<double>& a, const std::vector<double>& b,
                               const BootstrapOptions& options = {});
// median(values) with a percentile-bootstrap interval of the same kind (the per-cell error bars of
// `ablate report`). Throws std::invalid_argument when values is empty.
RatioInterval median_interval(const std::vector<double>& values, const BootstrapOptions& options = {});

// Two-sided Mann-Whitney U test of "a and b come from the same distribution".
struct MannWhitney {
  double u_a = 0;      // pairs (x in a, y in b) with x > y, ties counting 1/2
  double u_b = 0;      // n_a * n_b - u_a
  double p_value = 1;  // two-sided
  bool exact = false;  // enumerated U distribution (small samples, no ties) vs normal approximation
};
// Exact p-value when both sides have at most kExactMaxN values and there are no ties; otherwise the
// normal approximation with tie-corrected variance and continuity correction. Throws
// std::invalid_argument when a side is empty.
inline constexpr std::size_t kExactMaxN = 10;
MannWhitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

// Cumulative probability P(U <= u) of the exact null distribution of U for sizes n_a, n_b (no ties).
double mann_whitney_exact_cdf(int n_a, int n_b, int u);

// Verdict of B against A for a "smaller is better" statistic such as step time.
enum class Difference { faster, slower, no_difference, unreliable };
std::string_view to_string(Difference difference);
// Fewer than kMinRepeats values a side -> unreliable, whatever the numbers say (never a win).
inline constexpr std::size_t kMinRepeats = 3;
// The decision rests on the interval of the ratio B/A: wholly below 1 -> faster, wholly above 1 -> slower,
// otherwise no difference. The U test is reported next to it but does not gate it: with 3 repeats a side
// its smallest two-sided p is 0.1, so requiring p < 0.05 would make the minimum repeat count useless.
Difference classify(std::size_t n_a, std::size_t n_b, const RatioInterval& interval);

}  // namespace ablate::report
