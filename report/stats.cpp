// report/stats.cpp: medians, bootstrap ratio interval, Mann-Whitney U, verdict (see stats.h).
// Tests: tests/report/stats_test.cpp (report_tests).
#include "report/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <stdexcept>

namespace ablate::report {
namespace {

void require_values(const std::vector<double>& values, std::string_view what) {
  if (values.empty()) throw std::invalid_argument(fmt::format("{}: no values", what));
}

// Median of `buffer`, reordering it in place (nth_element keeps resampling cheap).
double median_in_place(std::vector<double>& buffer) {
  const std::size_t n = buffer.size();
  const auto middle = buffer.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(buffer.begin(), middle, buffer.end());
  const double upper = *middle;
  if (n % 2 == 1) return upper;
  const double lower = *std::max_element(buffer.begin(), middle);
  return (lower + upper) / 2;
}

// Fills `out` (already sized) with a resample-with-replacement of `values`.
// The index is the high 32 bits of a draw times the size, shifted (bias below 2^-32 for any sample a
// report holds): a stored seed recomputes the same interval from the same runs, so this mapping is part
// of the report's definition and does not follow SplitMix64::below's rejection sampling.
void resample(const std::vector<double>& values, SplitMix64& rng, std::vector<double>& out) {
  for (double& slot : out) slot = values[((rng.next() >> 32) * values.size()) >> 32];
}

// Quantile of sorted values, linear interpolation between the two closest ranks.
double quantile_sorted(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  const double weight = position - static_cast<double>(below);
  return sorted[below] * (1 - weight) + sorted[above] * weight;
}

}  // namespace

double median(std::vector<double> values) {
  require_values(values, "median");
  return median_in_place(values);
}

namespace {

void require_bootstrap_options(const BootstrapOptions& options) {
  if (options.resamples < 2) throw std::invalid_argument("bootstrap needs at least 2 resamples");
  if (!(options.level > 0 && options.level < 1)) throw std::invalid_argument("bootstrap level must be in (0, 1)");
}

// The percentile interval of `statistic` over options.resamples draws: the (1-level)/2 and
// (1+level)/2 quantiles. `statistic` draws its own resamples from the shared generator.
template <typename Statistic>
void percentile_interval(const BootstrapOptions& options, Statistic statistic, RatioInterval& out) {
  SplitMix64 rng(options.seed);
  std::vector<double> draws;
  draws.reserve(static_cast<std::size_t>(options.resamples));
  for (int i = 0; i < options.resamples; ++i) draws.push_back(statistic(rng));
  std::sort(draws.begin(), draws.end());
  const double tail = (1 - options.level) / 2;
  out.level = options.level;
  out.low = quantile_sorted(draws, tail);
  out.high = quantile_sorted(draws, 1 - tail);
}

}  // namespace

RatioInterval ratio_of_medians(const std::vector<double>& a, const std::vector<double>& b,
                               const BootstrapOptions& options) {
  require_values(a, "ratio of medians, side A");
  require_values(b, "ratio of medians, side B");
  require_bootstrap_options(options);
  const double median_a = median(a);
  if (!(median_a > 0)) throw std::invalid_argument(fmt::format("ratio of medians: median of A is {}, not positive", median_a));

  RatioInterval out;
  out.ratio = median(b) / median_a;
  std::vector<double> draw_a(a.size()), draw_b(b.size());
  percentile_interval(options, [&](SplitMix64& rng) {
    resample(a, rng, draw_a);
    resample(b, rng, draw_b);
    return median_in_place(draw_b) / median_in_place(draw_a);
  }, out);
  return out;
}

RatioInterval median_interval(const std::vector<double>& values, const BootstrapOptions& options) {
  require_values(values, "median interval");
  require_bootstrap_options(options);
  RatioInterval out;
  out.ratio = median(values);
  std::vector<double> draw(values.size());
  percentile_interval(options, [&](SplitMix64& rng) {
    resample(values, rng, draw);
    return median_in_place(draw);
  }, out);
  return out;
}

double mann_whitney_exact_cdf(int n_a, int n_b, int u) {
  if (n_a < 0 || n_b < 0) throw std::invalid_argument("mann_whitney_exact_cdf: negative sample size");
  if (u < 0) return 0;
  if (u >= n_a * n_b) return 1;
  // counts[i][j][k]: orderings of i values of A and j of B (no ties) in which U_a == k. The largest value
  // is from A (it beats all j values of B: U_a grows by j) or from B (U_a unchanged), hence
  //   counts[i][j][k] = counts[i-1][j][k-j] + counts[i][j-1][k].
  std::vector<std::vector<std::vector<double>>> counts(static_cast<std::size_t>(n_a + 1));
  for (int i = 0; i <= n_a; ++i) {
    counts[i].resize(static_cast<std::size_t>(n_b + 1));
    for (int j = 0; j <= n_b; ++j) {
      auto& cell = counts[i][j];
      cell.assign(static_cast<std::size_t>(i * j + 1), 0.0);
      if (i == 0 || j == 0) {
        cell[0] = 1;
        continue;
      }
      for (int k = 0; k <= i * j; ++k) {
        const auto& a_largest = counts[i - 1][j];
        const auto& b_largest = counts[i][j - 1];
        if (k >= j && k - j < static_cast<int>(a_largest.size())) cell[k] += a_largest[k - j];
        if (k < static_cast<int>(b_largest.size())) cell[k] += b_largest[k];
      }
    }
  }
  const auto& last = counts[n_a][n_b];
  double total = 0, at_or_below = 0;
  for (int k = 0; k < static_cast<int>(last.size()); ++k) {
    total += last[k];
    if (k <= u) at_or_below += last[k];
  }
  return at_or_below / total;
}

MannWhitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  require_values(a, "Mann-Whitney U, side A");
  require_values(b, "Mann-Whitney U, side B");
  MannWhitney out;
  for (double x : a)
    for (double y : b) out.u_a += x > y ? 1.0 : (x == y ? 0.5 : 0.0);
  const double n_a = static_cast<double>(a.size()), n_b = static_cast<double>(b.size());
  out.u_b = n_a * n_b - out.u_a;

  // Tie groups over the pooled sample: sizes t give the variance correction sum(t^3 - t).
  std::map<double, int> multiplicity;
  for (double x : a) ++multiplicity[x];
  for (double y : b) ++multiplicity[y];
  double tie_term = 0;
  for (const auto& [value, t] : multiplicity) tie_term += static_cast<double>(t) * t * t - t;

  const double u_small = std::min(out.u_a, out.u_b);
  if (tie_term == 0 && a.size() <= kExactMaxN && b.size() <= kExactMaxN) {
    out.exact = true;
    // U is symmetric about n_a*n_b/2, so the two-sided p doubles the lower tail of the smaller U.
    const double lower_tail = mann_whitney_exact_cdf(static_cast<int>(a.size()), static_cast<int>(b.size()),
                                                     static_cast<int>(u_small));
    out.p_value = std::min(1.0, 2 * lower_tail);
    return out;
  }
  const double n = n_a + n_b;
  const double mean = n_a * n_b / 2;
  const double variance = n_a * n_b / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (!(variance > 0)) {  // every value tied: no evidence of a difference at all
    out.p_value = 1;
    return out;
  }
  const double z = std::max(0.0, std::abs(out.u_a - mean) - 0.5) / std::sqrt(variance);
  out.p_value = std::min(1.0, std::erfc(z / std::numbers::sqrt2));
  return out;
}

std::string_view to_string(Difference difference) {
  switch (difference) {
    case Difference::faster:
      return "faster";
    case Difference::slower:
      return "slower";
    case Difference::no_difference:
      return "no difference";
    case Difference::unreliable:
      return "unreliable";
  }
  return "unreliable";
}

Difference classify(std::size_t n_a, std::size_t n_b, const RatioInterval& interval) {
  if (n_a < kMinRepeats || n_b < kMinRepeats) return Difference::unreliable;
  if (interval.high < 1) return Difference::faster;
  if (interval.low > 1) return Difference::slower;
  return Difference::no_difference;
}

}  // namespace ablate::report
