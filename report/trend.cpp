// report/trend.cpp: binary-segmentation step detection and the lane trend built on it (see trend.h).
// Tests: tests/report/trend_test.cpp (report_tests).
#include "report/trend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <stdexcept>

#include "base/clock.h"
#include "report/json_fields.h"
#include "report/stats.h"

namespace ablate::report {
namespace {

using nlohmann::json;

// The least-squares split of log values in [begin, end): the k maximising the squared-error reduction
// k_l * k_r / n * (mean_l - mean_r)^2, with at least `min_segment` values a side.
std::optional<std::size_t> best_split(const std::vector<double>& logs, std::size_t begin, std::size_t end,
                                      std::size_t min_segment) {
  if (end - begin < 2 * min_segment) return std::nullopt;
  double total = 0;
  for (std::size_t i = begin; i < end; ++i) total += logs[i];
  const double n = static_cast<double>(end - begin);
  double left = 0, best_gain = 0;
  std::optional<std::size_t> best;
  for (std::size_t k = begin; k + 1 < end; ++k) {
    left += logs[k];
    const std::size_t split = k + 1, n_left = split - begin, n_right = end - split;
    if (n_left < min_segment || n_right < min_segment) continue;
    const double mean_left = left / static_cast<double>(n_left), mean_right = (total - left) / static_cast<double>(n_right);
    const double gain = static_cast<double>(n_left) * static_cast<double>(n_right) / n * (mean_left - mean_right) *
                        (mean_left - mean_right);
    if (gain > best_gain) best_gain = gain, best = split;
  }
  return best;
}

// Mean of logs[a, b) from prefix sums.
double mean(const std::vector<double>& prefix, std::size_t a, std::size_t b) {
  return (prefix[b] - prefix[a]) / static_cast<double>(b - a);
}

// The least-squares "epidemic" split of [begin, end): an inner run [i, j) against the rest, the shape a
// single split misses (a slowdown that was later fixed). Every piece keeps `min_segment` values.
// Returns (i, j, number of candidate pairs).
std::optional<std::pair<std::size_t, std::size_t>> best_inner_segment(const std::vector<double>& prefix, std::size_t begin,
                                                                      std::size_t end, std::size_t m, double& candidates) {
  candidates = 0;
  if (end - begin < 3 * m) return std::nullopt;
  const double n = static_cast<double>(end - begin), total = prefix[end] - prefix[begin];
  double best_gain = 0;
  std::optional<std::pair<std::size_t, std::size_t>> best;
  for (std::size_t i = begin + m; i + 2 * m <= end; ++i) {
    for (std::size_t j = i + m; j + m <= end; ++j) {
      candidates += 1;
      const double n_in = static_cast<double>(j - i), n_out = n - n_in;
      const double in_mean = mean(prefix, i, j), out_mean = (total - (prefix[j] - prefix[i])) / n_out;
      const double gain = n_in * n_out / n * (in_mean - out_mean) * (in_mean - out_mean);
      if (gain > best_gain) best_gain = gain, best = std::pair{i, j};
    }
  }
  return best;
}

std::vector<double> slice(const std::vector<double>& values, std::size_t a, std::size_t b) {
  return {values.begin() + static_cast<std::ptrdiff_t>(a), values.begin() + static_cast<std::ptrdiff_t>(b)};
}

void segment(const std::vector<double>& values, const std::vector<double>& logs, const std::vector<double>& prefix,
             std::size_t begin, std::size_t end, const ChangePointOptions& options, std::vector<std::size_t>& out) {
  const std::size_t m = options.min_segment;
  if (const auto split = best_split(logs, begin, end, m)) {
    const double candidates = static_cast<double>(end - begin - 2 * m + 1);
    if (mann_whitney_u(slice(values, begin, *split), slice(values, *split, end)).p_value < options.alpha / candidates) {
      out.push_back(*split);
      segment(values, logs, prefix, begin, *split, options, out);
      segment(values, logs, prefix, *split, end, options, out);
      return;
    }
  }
  double candidates = 0;
  if (const auto inner = best_inner_segment(prefix, begin, end, m, candidates)) {
    const auto [i, j] = *inner;
    std::vector<double> outside = slice(values, begin, i);
    const auto after = slice(values, j, end);
    outside.insert(outside.end(), after.begin(), after.end());
    if (mann_whitney_u(slice(values, i, j), outside).p_value < options.alpha / candidates) {
      out.push_back(i);
      out.push_back(j);
      segment(values, logs, prefix, begin, i, options, out);
      segment(values, logs, prefix, i, j, options, out);
      segment(values, logs, prefix, j, end, options, out);
    }
  }
}

// How a run's median was measured: with the profiler's window traced or not, over how many steps.
struct MeasurementKey {
  bool profiled = false;
  std::int64_t steps = 0;
  bool operator==(const MeasurementKey&) const = default;
};

MeasurementKey measurement_key(const receipts::RunRow& run) {
  const auto& profile = run.summary.facts.profile;
  return {profile && profile->status == "ok", run.summary.steps.value_or(0)};
}

std::vector<std::string> known_lanes(receipts::Store& store) {
  std::vector<std::string> lanes;
  for (const auto& row : store.query("SELECT lane, MAX(started_at) AS last FROM runs WHERE lane <> '' GROUP BY lane "
                                     "ORDER BY last DESC LIMIT 10"))
    lanes.push_back(row["lane"].get<std::string>());
  return lanes;
}

std::vector<double> segment_step_ms(const Trend& t, const TrendSegment& s) {
  std::vector<double> values;
  for (std::size_t i = s.first; i <= s.last; ++i) values.push_back(t.points[i].median_step_ms);
  return values;
}

}  // namespace

std::vector<std::size_t> detect_change_points(const std::vector<double>& values, const ChangePointOptions& options) {
  if (options.min_segment < 1) throw std::invalid_argument("change points: the minimum segment length must be >= 1");
  std::vector<double> logs;
  for (const double v : values) {
    if (!(v > 0)) throw std::invalid_argument(fmt::format("change points: values must be positive, got {}", v));
    logs.push_back(std::log(v));
  }
  std::vector<double> prefix(logs.size() + 1, 0.0);
  for (std::size_t i = 0; i < logs.size(); ++i) prefix[i + 1] = prefix[i] + logs[i];
  std::vector<std::size_t> out;
  segment(values, logs, prefix, 0, values.size(), options, out);
  std::sort(out.begin(), out.end());
  return out;
}

std::string_view to_string(ShiftKind kind) {
  switch (kind) {
    case ShiftKind::regression:
      return "regression";
    case ShiftKind::improvement:
      return "improvement";
    case ShiftKind::within_threshold:
      return "within threshold";
  }
  return "within threshold";
}

std::vector<std::int64_t> Trend::segment_run_ids(std::size_t s) const {
  std::vector<std::int64_t> ids;
  for (std::size_t i = segments.at(s).first; i <= segments.at(s).last; ++i) ids.push_back(points[i].run_id);
  return ids;
}

std::size_t Trend::regressions() const {
  return static_cast<std::size_t>(
      std::count_if(shifts.begin(), shifts.end(), [](const auto& s) { return s.kind == ShiftKind::regression; }));
}

Trend build_trend(receipts::Store& store, const std::string& lane, const TrendOptions& options) {
  if (!(options.threshold > 0)) throw std::invalid_argument(fmt::format("--threshold must be > 0 (a fraction: 0.05 = 5 %), got {}", options.threshold));
  if (lane.empty()) throw std::invalid_argument("--lane must not be empty");
  if (!options.since.empty()) {
    try {
      base::parse_time(options.since, base::unix_now());
    } catch (const base::InputError& e) {
      throw std::invalid_argument(fmt::format("--since: {}", e.what()));
    }
  }
  Trend t;
  t.lane = lane;
  t.options = options;
  receipts::RunFilter any;
  any.lane = lane;
  any.limit = 1;
  if (store.list_runs(any).empty()) {
    const auto lanes = known_lanes(store);
    throw std::invalid_argument(fmt::format("no runs in lane '{}' in {}; {}", lane, store.path(),
                                            lanes.empty() ? "the store has no runs with a lane"
                                                          : fmt::format("recent lanes: {} (`ablate runs --json` shows "
                                                                        "each run's lane)",
                                                                        fmt::join(lanes, ", "))));
  }
  receipts::RunFilter filter;
  filter.lane = lane;
  filter.since = options.since;
  std::size_t not_evidence = 0, not_ok = 0;
  const auto rows = store.list_runs(filter);
  std::vector<const receipts::RunRow*> evidence;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {  // list_runs is newest first
    if (it->status != receipts::RunStatus::ok) {
      not_ok += it->status != receipts::RunStatus::running;
      continue;
    }
    if (!receipts::is_evidence(*it)) {
      ++not_evidence;
      continue;
    }
    evidence.push_back(&*it);
  }
  // Like with like: a traced run pays the tracer, and a run's length moves its median (the MoE load
  // evens out as training goes), so the trend keeps the runs measured as the newest one was.
  std::size_t other_measurement = 0;
  if (!evidence.empty()) {
    const MeasurementKey newest = measurement_key(*evidence.back());
    for (const auto* run : evidence) {
      if (measurement_key(*run) != newest) {
        ++other_measurement;
        continue;
      }
      t.points.push_back({run->id, run->started_at, *run->summary.median_step_ms, run->summary.tokens_per_s});
    }
    if (other_measurement)
      t.notes.push_back(fmt::format("{} ok run(s) measured otherwise are left out: the trend keeps {} runs of {} steps, "
                                    "as the newest run is",
                                    other_measurement, newest.profiled ? "profiled" : "unprofiled", newest.steps));
  }
  if (not_ok) t.notes.push_back(fmt::format("{} failed, killed or abandoned run(s) in the lane are left out", not_ok));
  if (not_evidence) t.notes.push_back(fmt::format("{} ok run(s) with an incomplete summary are left out", not_evidence));
  if (t.points.empty()) {
    t.notes.push_back("no ok runs in this period");
    return t;
  }
  std::vector<double> step_ms;
  for (const auto& p : t.points) step_ms.push_back(p.median_step_ms);
  const auto change_points = detect_change_points(step_ms, options.change_points);
  if (t.points.size() < 2 * options.change_points.min_segment)
    t.notes.push_back(fmt::format("{} run(s): too few to look for level shifts (needs >= {})", t.points.size(),
                                  2 * options.change_points.min_segment));
  std::size_t first = 0;
  for (std::size_t k = 0; k <= change_points.size(); ++k) {
    const std::size_t end = k < change_points.size() ? change_points[k] : t.points.size();
    TrendSegment s{first, end - 1, 0, std::nullopt};
    s.median_step_ms = median(segment_step_ms(t, s));
    std::vector<double> tokens;
    for (std::size_t i = s.first; i <= s.last; ++i)
      if (t.points[i].tokens_per_s) tokens.push_back(*t.points[i].tokens_per_s);
    if (!tokens.empty()) s.median_tokens_per_s = median(tokens);
    t.segments.push_back(s);
    first = end;
  }
  for (std::size_t s = 1; s < t.segments.size(); ++s) {
    LevelShift shift;
    shift.before = s - 1;
    shift.after = s;
    shift.change = t.segments[s].median_step_ms / t.segments[s - 1].median_step_ms - 1;
    shift.p_value = mann_whitney_u(segment_step_ms(t, t.segments[s - 1]), segment_step_ms(t, t.segments[s])).p_value;
    shift.kind = shift.change > options.threshold     ? ShiftKind::regression
                 : shift.change < -options.threshold  ? ShiftKind::improvement
                                                      : ShiftKind::within_threshold;
    t.shifts.push_back(shift);
  }
  return t;
}

json to_json(const Trend& t) {
  json points = json::array();
  for (const auto& p : t.points)
    points.push_back({{"run_id", p.run_id}, {"started_at", p.started_at}, {"median_step_ms", p.median_step_ms},
                      {"tokens_per_s", value_or_null(p.tokens_per_s)}});
  json segments = json::array();
  for (std::size_t s = 0; s < t.segments.size(); ++s)
    segments.push_back({{"run_ids", t.segment_run_ids(s)},
                        {"median_step_ms", t.segments[s].median_step_ms},
                        {"median_tokens_per_s", value_or_null(t.segments[s].median_tokens_per_s)},
                        {"from", t.points[t.segments[s].first].started_at},
                        {"to", t.points[t.segments[s].last].started_at}});
  json shifts = json::array();
  for (const auto& s : t.shifts)
    shifts.push_back({{"kind", to_string(s.kind)},
                      {"change", s.change},
                      {"p_value", s.p_value},
                      {"first_run_after", t.points[t.segments[s.after].first].run_id},
                      {"runs_before", t.segment_run_ids(s.before)},
                      {"runs_after", t.segment_run_ids(s.after)}});
  return {{"lane", t.lane},
          {"since", t.options.since.empty() ? json(nullptr) : json(t.options.since)},
          {"threshold", t.options.threshold},
          {"min_segment", t.options.change_points.min_segment},
          {"alpha", t.options.change_points.alpha},
          {"points", points},
          {"segments", segments},
          {"shifts", shifts},
          {"regressions", t.regressions()},
          {"notes", t.notes}};
}

std::string render_text(const Trend& t) {
  std::string out = fmt::format("lane {}: {} ok run(s){}; regression threshold {:.1f} %\n", t.lane, t.points.size(),
                                t.options.since.empty() ? "" : fmt::format(" since {}", t.options.since),
                                t.options.threshold * 100);
  for (const auto& note : t.notes) out += fmt::format("note: {}\n", note);
  if (t.points.empty()) return out;
  out += fmt::format("{:>6}  {:<19}  {:>10}  {:>10}  {}\n", "run", "started (UTC)", "step ms", "tokens/s", "segment");
  for (std::size_t s = 0; s < t.segments.size(); ++s)
    for (std::size_t i = t.segments[s].first; i <= t.segments[s].last; ++i) {
      const auto& p = t.points[i];
      out += fmt::format("{:>6}  {:<19}  {:>10.3f}  {:>10}  {}\n", p.run_id, base::format_utc(p.started_at), p.median_step_ms,
                         p.tokens_per_s ? fmt::format("{:.0f}", *p.tokens_per_s) : "-", s + 1);
    }
  out += "segments:\n";
  for (std::size_t s = 0; s < t.segments.size(); ++s) {
    const auto& seg = t.segments[s];
    out += fmt::format("  {}: {} run(s), {} .. {}: median step {:.3f} ms, tokens/s {}\n", s + 1, seg.last - seg.first + 1,
                       base::format_utc(t.points[seg.first].started_at), base::format_utc(t.points[seg.last].started_at), seg.median_step_ms,
                       seg.median_tokens_per_s ? fmt::format("{:.0f}", *seg.median_tokens_per_s) : "-");
  }
  for (const auto& s : t.shifts) {
    out += fmt::format("{} at run {}: median step {:.3f} -> {:.3f} ms ({:+.1f} %), U test p {:.2g}\n  runs before: {}\n  runs after: {}\n",
                       s.kind == ShiftKind::regression ? "REGRESSION" : std::string(to_string(s.kind)),
                       t.points[t.segments[s.after].first].run_id, t.segments[s.before].median_step_ms,
                       t.segments[s.after].median_step_ms, s.change * 100, s.p_value,
                       fmt::join(t.segment_run_ids(s.before), ","), fmt::join(t.segment_run_ids(s.after), ","));
  }
  out += t.regressions() ? fmt::format("{} regression(s) worse than {:.1f} %\n", t.regressions(), t.options.threshold * 100)
                         : fmt::format("no regression worse than {:.1f} %\n", t.options.threshold * 100);
  return out;
}

}  // namespace ablate::report
