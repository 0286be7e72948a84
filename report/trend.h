// report/trend.h: `ablate trend`: one lane's ok runs over time (docs/architecture.md "Trends") and the
// level shifts in their median step time.
//
// Step detection is binary segmentation with a significance check:
//   1. work on log(median step ms), so a shift is relative (a 5 % slowdown looks the same at 10 ms
//      and at 1 s);
//   2. in a segment, the candidate split is the one that most reduces the squared error of a
//      two-level fit (the classic least-squares change point), splits leaving fewer than
//      `min_segment` runs on a side are not considered;
//   3. the split is kept only if a two-sided Mann-Whitney U test of the two sides (rank-based: one
//      wild run cannot make a shift) has p < alpha / (number of candidate splits), a Bonferroni
//      correction for having picked the best of them;
//   4. otherwise, as in circular binary segmentation (Olshen et al. 2004), the best inner stretch
//      [i, j) against the rest of the segment is tried the same way (least squares, U test, Bonferroni
//      over all (i, j) pairs): a slowdown that was fixed later leaves two weak single splits but one
//      strong inner stretch;
//   5. kept splits are segmented again, recursively; a segment with neither is final.
// Under pure noise the first test fires with probability <= alpha, so a stable lane rarely shows a
// change point; a real shift needs about 5 runs on each side to be called at alpha = 0.05.
// A regression is a shift between consecutive segments whose median step time grows by more than
// `threshold` (default 5 %); the run ids on each side are listed. Shifts smaller than the threshold
// are reported as such, improvements as improvements.
// Tests: tests/report/trend_test.cpp (report_tests), tests/harness/report_cli_test.cpp (CLI errors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/store.h"

namespace ablate::report {

struct ChangePointOptions {
  std::size_t min_segment = 3;  // runs on each side of a split, at least
  double alpha = 0.05;          // family-wise level of each split's test
};

// Indices where a new segment starts (ascending; never 0). Values must be positive. Throws
// std::invalid_argument for a non-positive value or min_segment < 1.
std::vector<std::size_t> detect_change_points(const std::vector<double>& values, const ChangePointOptions& options = {});

struct TrendPoint {
  std::int64_t run_id = 0;
  double started_at = 0;  // unix seconds
  double median_step_ms = 0;
  std::optional<double> tokens_per_s;
};

struct TrendSegment {
  std::size_t first = 0, last = 0;  // indices into Trend::points, inclusive
  double median_step_ms = 0;
  std::optional<double> median_tokens_per_s;
};

enum class ShiftKind { regression, improvement, within_threshold };
std::string_view to_string(ShiftKind kind);

struct LevelShift {
  std::size_t before = 0, after = 0;  // indices into Trend::segments (after == before + 1)
  double change = 0;                  // median step ms after / before - 1
  double p_value = 1;                 // U test of the two segments' runs
  ShiftKind kind = ShiftKind::within_threshold;
};

struct TrendOptions {
  std::string since;        // as `ablate runs --since`; empty: all time
  double threshold = 0.05;  // relative step-time growth that counts as a regression
  ChangePointOptions change_points;
};

struct Trend {
  std::string lane;
  TrendOptions options;
  std::vector<TrendPoint> points;  // oldest first
  std::vector<TrendSegment> segments;
  std::vector<LevelShift> shifts;
  std::vector<std::string> notes;  // runs left out, too few runs to segment
  std::vector<std::int64_t> segment_run_ids(std::size_t segment) const;
  std::size_t regressions() const;
};

// Throws std::invalid_argument for an unknown lane (naming known lanes), a threshold <= 0, and
// StoreError for an unreadable `since`.
Trend build_trend(receipts::Store& store, const std::string& lane, const TrendOptions& options = {});

nlohmann::json to_json(const Trend& trend);
std::string render_text(const Trend& trend);

}  // namespace ablate::report
