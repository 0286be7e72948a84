// report/gate.cpp: the keep/drop gate (see gate.h): backend checks, windowed loss check, failures, the
// minimum evidence, verdict, and the standing decisions that make a backend `keep` on a lane.
// Tests: tests/report/gate_test.cpp (report_tests), tests/harness/gate_cli_test.cpp (harness_tests).
#include "report/gate.h"
#include "base/clock.h"
#include "report/json_fields.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace ablate::report {
namespace {

using nlohmann::json;
using receipts::RunStatus;
using receipts::Verdict;

std::string backend_field(const std::string& seam) { return "spec.backends." + seam; }

// The gate judges one backend: every candidate run must request it at the seam, no baseline run may.
void require_backend_sides(const Comparison& c, const GateOptions& o) {
  const std::string field = backend_field(o.seam), wanted = json(o.backend).dump();
  for (const auto& run : c.b.evidence) {
    const auto it = run.fields.find(field);
    if (it == run.fields.end() || it->second != wanted) {
      throw std::invalid_argument(fmt::format("candidate run {} requests {} at seam {}, not \"{}\"", run.row.id,
                                              it == run.fields.end() ? "no backend" : it->second, o.seam, o.backend));
    }
  }
  for (const auto& run : c.a.evidence) {
    const auto it = run.fields.find(field);
    if (it != run.fields.end() && it->second == wanted) {
      throw std::invalid_argument(fmt::format("baseline run {} already requests \"{}\" at seam {}: the baseline "
                                              "must use another backend there",
                                              run.row.id, o.backend, o.seam));
    }
  }
}

// Spec differences other than backends.<seam> are not what the gate tests: refused, or when allowed,
// moved to the mismatches so the output marks them.
void restrict_factor_to_seam(Comparison& c, const GateOptions& o) {
  const std::string field = backend_field(o.seam);
  std::vector<FieldDifference> seam_only, others;
  for (auto& d : c.factor) (d.field == field ? seam_only : others).push_back(std::move(d));
  c.factor = std::move(seam_only);
  if (others.empty()) return;
  std::vector<std::string> names;
  for (const auto& d : others) names.push_back(d.field);
  if (!o.compare.allow_mismatch) {
    throw MismatchError(fmt::format("baseline and candidate differ in more than {}: {} (pass --allow-mismatch to gate "
                                    "anyway)",
                                    field, fmt::join(names, ", ")),
                        names);
  }
  for (auto& d : others) c.mismatches.push_back(std::move(d));
  c.mismatch_allowed = true;
}

// The median over a side's evidence runs of one optional fact (absent when no run has it).
std::optional<double> median_fact(const Side& side, std::optional<double> receipts::RunFacts::*fact) {
  std::vector<double> values;
  for (const auto& run : side.evidence) {
    if (const auto& v = run.row.summary.facts.*fact) values.push_back(*v);
  }
  if (values.empty()) return std::nullopt;
  return median(values);
}

void measure_loss(receipts::Store& store, GateResult& r) {
  const auto baseline = windowed_run_losses(store, r.comparison.a, r.loss_window, &r.loss_from_summary_runs);
  const auto candidate = windowed_run_losses(store, r.comparison.b, r.loss_window, &r.loss_from_summary_runs);
  if (baseline.empty() || candidate.empty()) return;
  r.baseline_loss = median(baseline);
  r.candidate_loss = median(candidate);
  // Relative to the baseline; a zero baseline loss falls back to the absolute difference.
  const double scale = *r.baseline_loss == 0 ? 1.0 : std::abs(*r.baseline_loss);
  r.loss_relative_difference = std::abs(*r.candidate_loss - *r.baseline_loss) / scale;
  if (baseline.size() >= 2) {
    const auto [low, high] = std::minmax_element(baseline.begin(), baseline.end());
    r.baseline_loss_spread = (*high - *low) / scale;
  }
}

// Each evidence run's final validation loss and the distinct seeds among those runs, per side; whether
// the candidate runs' catalog snapshot says the backend changes numerics.
void measure_validation(receipts::Store& store, GateResult& r, const GateOptions& o) {
  auto side = [&](const Side& s, std::optional<double>& median_loss, std::size_t& seeds) -> std::vector<double> {
    std::vector<double> losses;
    std::set<std::string> seen;
    for (const auto& run : s.evidence) {
      const auto& v = run.row.summary.facts.final_validation_loss;
      if (!v || !std::isfinite(*v)) continue;
      losses.push_back(*v);
      // The run's comparable fields, read once by compare_runs: its seed, or "(default)" without one.
      const auto seed = run.fields.find("spec.experiment.seed");
      seen.insert(seed == run.fields.end() ? absent_value("spec.experiment.seed") : seed->second);
    }
    seeds = seen.size();
    if (!losses.empty()) median_loss = median(losses);
    return losses;
  };
  const auto baseline = side(r.comparison.a, r.baseline_validation_loss, r.baseline_seeds);
  side(r.comparison.b, r.candidate_validation_loss, r.candidate_seeds);
  r.min_seeds = o.min_seeds;
  if (r.baseline_validation_loss && r.candidate_validation_loss) {
    const double scale = *r.baseline_validation_loss == 0 ? 1.0 : std::abs(*r.baseline_validation_loss);
    r.validation_relative_difference = std::abs(*r.candidate_validation_loss - *r.baseline_validation_loss) / scale;
    if (baseline.size() >= 2) {
      const auto [low, high] = std::minmax_element(baseline.begin(), baseline.end());
      r.baseline_validation_spread = (*high - *low) / scale;
    }
  }
  const json rows = store.query(
      "SELECT changes_numerics FROM catalog WHERE seam = ? AND backend = ? AND run_id IN (SELECT value FROM json_each(?)) "
      "ORDER BY run_id DESC LIMIT 1",
      {o.seam, o.backend, json(r.comparison.b.evidence_ids()).dump()});
  r.changes_numerics = !rows.empty() && rows[0]["changes_numerics"] == 1;
}

// The convergence verdict and its reason; then the final verdict from the speed verdict (see gate.h).
void decide_convergence(GateResult& r) {
  const std::string what = r.changes_numerics
                               ? fmt::format("{} changes numerics beyond reduction order (its catalog row)", r.backend)
                               : fmt::format("{} keeps the reference's numerics (its catalog row)", r.backend);
  if (!r.baseline_validation_loss && !r.candidate_validation_loss) {
    r.convergence = r.changes_numerics ? Convergence::inconclusive : Convergence::not_judged;
    r.reasons.push_back(fmt::format("convergence {}: no validation loss on either side; {}{}", to_string(r.convergence),
                                    what,
                                    r.changes_numerics
                                        ? fmt::format(": KEEP needs its validation loss at the end over at least {} "
                                                      "seeds a side (train.eval_every; seeds as a matrix axis)",
                                                      r.min_seeds)
                                        : ""));
  } else if (!r.validation_relative_difference) {
    r.convergence = Convergence::inconclusive;
    r.reasons.push_back(fmt::format("convergence INCONCLUSIVE: validation loss recorded by the {} runs only",
                                    r.baseline_validation_loss ? "baseline" : "candidate"));
  } else {
    const double diff = *r.validation_relative_difference;
    const bool within = diff <= r.loss_tolerance || (r.baseline_validation_spread && diff <= *r.baseline_validation_spread);
    const bool enough = r.baseline_seeds >= r.min_seeds && r.candidate_seeds >= r.min_seeds;
    r.convergence = !enough ? Convergence::inconclusive : within ? Convergence::pass : Convergence::fail;
    r.reasons.push_back(fmt::format(
        "convergence {}: validation loss at the end {:.4f} vs baseline {:.4f}, {:.2f} % apart; tolerance {:.2f} %{}; "
        "{} and {} seed(s), at least {} a side needed; {}",
        to_string(r.convergence), *r.candidate_validation_loss, *r.baseline_validation_loss, diff * 100,
        r.loss_tolerance * 100,
        r.baseline_validation_spread ? fmt::format(", the baseline's seed-to-seed spread {:.2f} %", *r.baseline_validation_spread * 100)
                                     : "",
        r.baseline_seeds, r.candidate_seeds, r.min_seeds, what));
  }
  r.speed_verdict = r.verdict;
  if (r.convergence == Convergence::fail) {
    r.verdict = Verdict::drop;
  } else if (r.changes_numerics && r.verdict == Verdict::keep && r.convergence != Convergence::pass) {
    r.verdict = Verdict::inconclusive;
  }
}

bool captured(const ComparedRun& run) {
  const auto& c = run.row.summary.facts.cuda_graphs;
  return c && c->outcome == receipts::CaptureOutcome::captured;
}

// A whole-step CUDA graph that every baseline run captured and a candidate run (which asked for one)
// did not: the backend breaks capture.
void check_capture(GateResult& r) {
  const auto& a = r.comparison.a.evidence;
  const bool baseline_captured = !a.empty() && std::all_of(a.begin(), a.end(), [](const ComparedRun& run) {
    return captured(run);
  });
  if (!baseline_captured) return;
  for (const auto& run : r.comparison.b.evidence) {
    const auto& c = run.row.summary.facts.cuda_graphs;
    if (!c || !c->requested || captured(run)) continue;
    r.capture_lost_runs.push_back(run.row.id);
    if (r.capture_lost_reason.empty()) r.capture_lost_reason = c->reason.empty() ? "no reason recorded" : c->reason;
  }
}

std::optional<std::string> recorded_role(receipts::Store& store, const std::vector<std::int64_t>& run_ids,
                                         const GateOptions& o) {
  const json rows = store.query(
      "SELECT role FROM catalog WHERE seam = ? AND backend = ? AND run_id IN (SELECT value FROM json_each(?)) "
      "ORDER BY run_id DESC LIMIT 1",
      {o.seam, o.backend, json(run_ids).dump()});
  if (rows.empty()) return std::nullopt;
  return rows[0]["role"].get<std::string>();
}

// Fills the fallback and mismatch lists from what compare_runs set aside at the seam (it reads the
// run_backends rows of every complete ok run; a run without a row there, e.g. an old receipt, is not
// judged on this).
void check_backends_ran(GateResult& r, const GateOptions& o) {
  for (const auto& s : r.comparison.b_shortfalls) {
    if (s.seam != o.seam) continue;
    if (s.chosen != o.backend) r.fallback_candidate_runs.push_back(s.run_id);
    if (s.mismatch) r.mismatched_runs.push_back(s.run_id);
  }
  for (const auto& s : r.comparison.a_shortfalls)
    if (s.seam == o.seam && s.mismatch) r.mismatched_runs.push_back(s.run_id);
  std::sort(r.mismatched_runs.begin(), r.mismatched_runs.end());
}

std::optional<std::int64_t> common_matrix(const Comparison& c) {
  std::optional<std::int64_t> matrix;
  for (const Side* side : {&c.a, &c.b}) {
    for (const auto& run : side->evidence) {
      if (!run.row.matrix_id || (matrix && *matrix != *run.row.matrix_id)) return std::nullopt;
      matrix = run.row.matrix_id;
    }
  }
  return matrix;
}

// A run still running would be left out of a decision stored now (it is no evidence yet): refused.
void refuse_running_runs(receipts::Store& store, const std::vector<std::int64_t>& baseline_ids,
                         const std::vector<std::int64_t>& candidate_ids) {
  std::vector<std::string> running;
  for (const auto& [side, ids] : {std::pair{"baseline", &baseline_ids}, std::pair{"candidate", &candidate_ids}})
    for (const std::int64_t id : *ids)
      if (store.get_run(id).status == RunStatus::running) running.push_back(fmt::format("{} ({})", id, side));
  if (running.empty()) return;
  throw std::invalid_argument(fmt::format(
      "run(s) {} still running: a decision stored now would leave them out. Wait until they finish (`ablate runs "
      "--status running` lists them; a run whose process died reads as abandoned once its heartbeat is {:.0f} s "
      "old), or leave them out of --baseline/--candidate. No decision was stored",
      fmt::join(running, ", "), store.heartbeat_stale_s()));
}

// Sorts the candidate runs that are not evidence: failed ones count against the backend; killed and
// abandoned ones were interrupted from outside and count neither way.
void sort_unfinished_candidates(GateResult& r) {
  for (const auto& e : r.comparison.b.excluded) {
    if (e.status == RunStatus::failed) r.failed_candidate_runs.push_back(e.run_id);
    if (e.status == RunStatus::killed) r.killed_candidate_runs.push_back(e.run_id);
    if (e.status == RunStatus::abandoned) r.abandoned_candidate_runs.push_back(e.run_id);
  }
}

// The options that moved the gate off its defaults, as the command line spells them.
std::vector<std::string> overrides_of(const GateOptions& o, const Comparison& c) {
  const GateOptions defaults;
  std::vector<std::string> out;
  if (o.compare.allow_mismatch) {
    std::vector<std::string> fields;
    for (const auto& d : c.mismatches) fields.push_back(d.field);
    out.push_back(fields.empty() ? "--allow-mismatch (nothing differed beyond the backend)"
                                 : fmt::format("--allow-mismatch ({} differ)", fmt::join(fields, ", ")));
  }
  if (o.loss_tolerance != defaults.loss_tolerance) out.push_back(fmt::format("--loss-tolerance {}", o.loss_tolerance));
  if (o.loss_window != defaults.loss_window) out.push_back(fmt::format("--loss-window {}", o.loss_window));
  if (o.memory_tolerance != defaults.memory_tolerance)
    out.push_back(fmt::format("--memory-tolerance {}", o.memory_tolerance));
  if (o.min_seeds != defaults.min_seeds) out.push_back(fmt::format("--min-seeds {}", o.min_seeds));
  return out;
}

// The standing decisions on the lanes of the candidate runs (every status: a failed run has its lane).
std::vector<StandingDecision> standing_on_candidate_lanes(receipts::Store& store,
                                                          const std::vector<std::int64_t>& candidate_ids,
                                                          const GateOptions& o) {
  std::vector<StandingDecision> out;
  for (const auto& row : store.query("SELECT DISTINCT lane FROM runs WHERE id IN (SELECT value FROM json_each(?)) "
                                     "ORDER BY lane",
                                     {json(candidate_ids).dump()})) {
    const auto on_lane = standing_decisions(store, o.seam, o.backend, row["lane"].get<std::string>());
    out.insert(out.end(), on_lane.begin(), on_lane.end());
  }
  return out;
}

// The docs/architecture.md rules, in order: any DROP condition with the minimum evidence wins; a DROP
// condition on fewer runs is reported and leaves the verdict INCONCLUSIVE; KEEP needs every KEEP condition.
void decide(GateResult& r) {
  const Comparison& c = r.comparison;
  const std::size_t baseline_runs = c.a.evidence.size(), candidate_runs = c.b.evidence.size();
  const std::size_t candidate_attempts = candidate_runs + r.failed_candidate_runs.size();
  const bool enough_runs = baseline_runs >= kMinRepeats && candidate_runs >= kMinRepeats;
  // A failure is judged over attempts: failing on each of kMinRepeats attempts beside a baseline that
  // ran kMinRepeats times is evidence; one failure beside one baseline run is not.
  const bool enough_attempts = baseline_runs >= kMinRepeats && candidate_attempts >= kMinRepeats;
  bool drop = false;           // a DROP condition with the evidence to decide it
  bool drop_too_few = false;   // a DROP condition seen on too few runs to decide it
  auto drop_if = [&](bool enough) { (enough ? drop : drop_too_few) = true; };
  if (!r.failed_candidate_runs.empty()) {
    drop_if(enough_attempts);
    r.reasons.push_back(fmt::format("candidate run(s) {} failed ({} of {} attempt(s))",
                                    fmt::join(r.failed_candidate_runs, ", "), r.failed_candidate_runs.size(),
                                    candidate_attempts));
  }
  if (!r.killed_candidate_runs.empty() || !r.abandoned_candidate_runs.empty()) {
    std::vector<std::string> interrupted;
    if (!r.killed_candidate_runs.empty())
      interrupted.push_back(fmt::format("{} killed", fmt::join(r.killed_candidate_runs, ", ")));
    if (!r.abandoned_candidate_runs.empty())
      interrupted.push_back(fmt::format("{} abandoned (their heartbeat stopped)", fmt::join(r.abandoned_candidate_runs, ", ")));
    r.reasons.push_back(fmt::format("candidate run(s) {}: interrupted, not evidence for or against the backend",
                                    fmt::join(interrupted, "; ")));
  }
  // The loss: within tolerance is ok; beyond it but within the baseline runs' own spread is noise the
  // repeats cannot resolve (no KEEP, no DROP); beyond both is a DROP.
  const bool loss_known = r.loss_relative_difference.has_value();
  const bool loss_ok = loss_known && *r.loss_relative_difference <= r.loss_tolerance;
  const bool loss_within_spread =
      loss_known && !loss_ok && r.baseline_loss_spread && *r.loss_relative_difference <= *r.baseline_loss_spread;
  if (loss_known) {
    if (!loss_ok && !loss_within_spread) drop_if(enough_runs);
    const std::string spread =
        r.baseline_loss_spread ? fmt::format(", the baseline runs' own spread {:.2f} %", *r.baseline_loss_spread * 100) : "";
    r.reasons.push_back(fmt::format("loss over the last {} steps {:.4f} vs baseline {:.4f}: {:.2f} % apart, tolerance "
                                    "{:.2f} %{} ({})",
                                    r.loss_window, *r.candidate_loss, *r.baseline_loss, *r.loss_relative_difference * 100,
                                    r.loss_tolerance * 100, spread,
                                    loss_ok              ? "ok"
                                    : loss_within_spread ? "beyond tolerance but within the baseline's own spread: no loss "
                                                           "verdict, more steps or repeats would tell"
                                                         : "out of tolerance"));
    if (!r.loss_from_summary_runs.empty())
      r.reasons.push_back(fmt::format("run(s) {} have no step rows: their summary's final loss (one step) stands in",
                                      fmt::join(r.loss_from_summary_runs, ", ")));
  } else {
    r.reasons.push_back("loss not recorded on both sides: the loss check cannot be made");
  }
  // Runs that did not run what they asked for at the seam: no verdict on speed or memory either way.
  const bool ran_as_asked = r.fallback_candidate_runs.empty() && r.mismatched_runs.empty();
  if (!r.capture_lost_runs.empty()) {
    drop_if(enough_runs);
    r.reasons.push_back(fmt::format("candidate run(s) {} could not use the whole-step CUDA graph every baseline run "
                                    "captured ({})",
                                    fmt::join(r.capture_lost_runs, ", "), r.capture_lost_reason));
  }
  if (r.baseline_first_step_ms && r.candidate_first_step_ms)
    r.reasons.push_back(fmt::format("first step (warm-up) {:.0f} ms vs baseline {:.0f} ms (reported, not judged)",
                                    *r.candidate_first_step_ms, *r.baseline_first_step_ms));
  if (!r.fallback_candidate_runs.empty())
    r.reasons.push_back(fmt::format("candidate run(s) {} fell back to another backend at {} (run_backends.chosen): "
                                    "they did not run {}, so their timings say nothing about it",
                                    fmt::join(r.fallback_candidate_runs, ", "), r.seam, r.backend));
  if (!r.mismatched_runs.empty())
    r.reasons.push_back(fmt::format("run(s) {} ran kernels of another backend than the chosen one at {} "
                                    "(run_backends.mismatch): requested is not observed, no verdict on speed",
                                    fmt::join(r.mismatched_runs, ", "), r.seam));
  if (c.step_ratio) {
    r.reasons.push_back(fmt::format("step time candidate/baseline {:.4f} [{:.4f}, {:.4f}]: {}", c.step_ratio->ratio,
                                    c.step_ratio->low, c.step_ratio->high, to_string(c.verdict)));
  }
  if (c.verdict == Difference::slower && ran_as_asked) drop = true;
  bool memory_ok = true;
  if (r.memory_relative_increase) {
    memory_ok = *r.memory_relative_increase <= r.memory_tolerance;
    r.reasons.push_back(fmt::format("peak memory {:.3f} GiB vs baseline {:.3f} GiB: {:+.1f} %, tolerance +{:.1f} % ({})",
                                    *r.candidate_peak_memory / 1073741824.0, *r.baseline_peak_memory / 1073741824.0,
                                    *r.memory_relative_increase * 100, r.memory_tolerance * 100,
                                    memory_ok ? "ok" : "grew beyond tolerance"));
    if (!memory_ok && ran_as_asked) drop_if(enough_runs);
  }
  if (!drop && (drop_too_few || c.verdict == Difference::unreliable)) {
    std::string text = fmt::format("{} baseline and {} candidate evidence run(s): at least {} a side are needed",
                                   baseline_runs, candidate_runs, kMinRepeats);
    if (!r.failed_candidate_runs.empty())
      text += fmt::format(" (a failure decides over at least {} candidate attempts beside as many baseline evidence "
                          "runs; {} attempt(s) here)",
                          kMinRepeats, candidate_attempts);
    if (drop_too_few) text += ": the DROP condition(s) above are reported, not decided";
    r.reasons.push_back(std::move(text));
  }
  if (drop) {
    r.verdict = Verdict::drop;
  } else if (c.verdict == Difference::faster && loss_ok && memory_ok && ran_as_asked) {
    r.verdict = Verdict::keep;
  } else {
    r.verdict = Verdict::inconclusive;
  }
}

// "backends.loss=chunked" -> {"loss", "chunked"}; nullopt for a cell that toggles anything else.
std::optional<std::pair<std::string, std::string>> backend_toggle(const std::string& cell) {
  constexpr std::string_view prefix = "backends.";
  const auto eq = cell.find('=');
  if (cell.rfind(prefix, 0) != 0 || eq == std::string::npos || cell.find(',') != std::string::npos) return std::nullopt;
  return std::pair{cell.substr(prefix.size(), eq - prefix.size()), cell.substr(eq + 1)};
}

// The backend a run's spec requests at `seam` (nullopt when its spec has none there).
std::optional<std::string> requested_backend(receipts::Store& store, std::int64_t run_id, const std::string& seam) {
  const auto fields = comparable_fields(store, run_id);
  const auto it = fields.find(backend_field(seam));
  if (it == fields.end()) return std::nullopt;
  const json value = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  return value.is_string() ? std::optional<std::string>(value.get<std::string>()) : std::nullopt;
}

}  // namespace

std::vector<double> windowed_run_losses(receipts::Store& store, const Side& side, std::int64_t window,
                                        std::vector<std::int64_t>* from_summary) {
  const json rows = store.query(
      "SELECT s.run_id AS run_id, AVG(s.loss) AS loss FROM steps s JOIN (SELECT run_id, MAX(step) AS last FROM "
      "steps WHERE rank = 0 AND run_id IN (SELECT value FROM json_each(?)) GROUP BY run_id) m ON m.run_id = "
      "s.run_id WHERE s.rank = 0 AND s.step > m.last - ? AND s.loss IS NOT NULL GROUP BY s.run_id",
      {json(side.evidence_ids()).dump(), window});
  std::map<std::int64_t, double> windowed;
  for (const auto& row : rows)
    if (row["loss"].is_number()) windowed[row["run_id"].get<std::int64_t>()] = row["loss"].get<double>();
  std::vector<double> losses;
  for (const auto& run : side.evidence) {
    if (const auto it = windowed.find(run.row.id); it != windowed.end()) {
      losses.push_back(it->second);
    } else if (const auto& v = run.row.summary.facts.final_loss) {
      losses.push_back(*v);
      if (from_summary != nullptr) from_summary->push_back(run.row.id);
    }
  }
  return losses;
}

GateResult evaluate_gate(receipts::Store& store, const std::vector<std::int64_t>& baseline_ids,
                         const std::vector<std::int64_t>& candidate_ids, const GateOptions& options) {
  if (options.seam.empty() || options.backend.empty()) throw std::invalid_argument("the gate needs a seam and a backend");
  if (!(options.loss_tolerance >= 0)) throw std::invalid_argument("the loss tolerance must be >= 0");
  if (options.loss_window < 1) throw std::invalid_argument("the loss window must be at least 1 step");
  if (!(options.memory_tolerance >= 0)) throw std::invalid_argument("the memory tolerance must be >= 0");
  if (options.min_seeds < 1) throw std::invalid_argument("the gate needs at least 1 seed a side");
  GateResult r;
  r.seam = options.seam;
  r.backend = options.backend;
  r.loss_tolerance = options.loss_tolerance;
  r.loss_window = options.loss_window;
  refuse_running_runs(store, baseline_ids, candidate_ids);
  r.comparison = compare_runs(store, baseline_ids, candidate_ids, options.compare);
  require_backend_sides(r.comparison, options);
  restrict_factor_to_seam(r.comparison, options);
  r.overrides = overrides_of(options, r.comparison);
  sort_unfinished_candidates(r);
  measure_loss(store, r);
  r.memory_tolerance = options.memory_tolerance;
  r.baseline_peak_memory = r.comparison.a.median_peak_memory_bytes;
  r.candidate_peak_memory = r.comparison.b.median_peak_memory_bytes;
  if (r.baseline_peak_memory && r.candidate_peak_memory && *r.baseline_peak_memory > 0)
    r.memory_relative_increase = (*r.candidate_peak_memory - *r.baseline_peak_memory) / *r.baseline_peak_memory;
  check_backends_ran(r, options);
  check_capture(r);
  r.baseline_first_step_ms = median_fact(r.comparison.a, &receipts::RunFacts::first_step_ms);
  r.candidate_first_step_ms = median_fact(r.comparison.b, &receipts::RunFacts::first_step_ms);
  r.catalog_role = recorded_role(store, candidate_ids, options);
  r.standing_before = standing_on_candidate_lanes(store, candidate_ids, options);
  r.matrix_id = common_matrix(r.comparison);
  measure_validation(store, r, options);
  decide(r);
  decide_convergence(r);
  return r;
}

std::vector<StandingDecision> standing_decisions(receipts::Store& store, const std::string& seam,
                                                 const std::string& backend, const std::string& lane) {
  // Per KEEP/DROP decision and lane of its candidate runs (cited runs whose spec requests the backend at
  // the seam): the candidate runs there that finished ok or failed, and the decision's ok baseline runs.
  const json rows = store.query(R"(
    WITH cited AS (
      SELECT d.id AS decision_id, d.seam, d.backend, d.verdict, d.decided_at, r.lane, r.status,
             json_extract(s.spec_json, '$.backends.' || d.seam) IS d.backend AS candidate
      FROM decisions d, json_each(d.evidence_run_ids) e JOIN runs r ON r.id = e.value JOIN run_spec s ON s.run_id = r.id
      WHERE d.verdict IN ('KEEP', 'DROP') AND (?1 = '' OR d.seam = ?1) AND (?2 = '' OR d.backend = ?2))
    SELECT c.decision_id, c.seam, c.backend, c.verdict, c.decided_at, c.lane,
           SUM(c.status = 'ok') AS ok_runs, SUM(c.status = 'failed') AS failed_runs,
           (SELECT COUNT(*) FROM cited b WHERE b.decision_id = c.decision_id AND NOT b.candidate AND b.status = 'ok')
             AS baseline_ok_runs
    FROM cited c WHERE c.candidate AND (?3 = '' OR c.lane = ?3)
    GROUP BY c.decision_id, c.lane ORDER BY c.decision_id)",
                                {seam, backend, lane});
  std::map<std::tuple<std::string, std::string, std::string>, StandingDecision> newest;
  for (const auto& row : rows) {
    const Verdict verdict = receipts::parse_verdict(row["verdict"].get<std::string>());
    const auto ok_runs = row["ok_runs"].get<std::size_t>(), failed_runs = row["failed_runs"].get<std::size_t>();
    const std::size_t candidate_runs = verdict == Verdict::keep ? ok_runs : ok_runs + failed_runs;
    if (row["baseline_ok_runs"].get<std::size_t>() < kMinRepeats || candidate_runs < kMinRepeats) continue;
    StandingDecision d{row["seam"].get<std::string>(), row["backend"].get<std::string>(), row["lane"].get<std::string>(),
                       row["decision_id"].get<std::int64_t>(), verdict, row["decided_at"].get<double>()};
    newest[{d.seam, d.backend, d.lane}] = std::move(d);  // rows come oldest decision first
  }
  std::vector<StandingDecision> out;
  for (auto& [key, d] : newest) out.push_back(std::move(d));
  return out;
}

std::string describe(const StandingDecision& d) {
  return fmt::format("decision {} ({} on lane {}, {} UTC)", d.decision_id, receipts::to_string(d.verdict), d.lane,
                     base::format_utc(d.decided_at));
}

bool GateResult::kept_before() const {
  if (standing_before.empty()) return catalog_role == "keep";
  return std::any_of(standing_before.begin(), standing_before.end(),
                     [](const StandingDecision& d) { return d.verdict == Verdict::keep; });
}

std::string_view to_string(Convergence c) {
  switch (c) {
    case Convergence::pass: return "PASS";
    case Convergence::fail: return "FAIL";
    case Convergence::inconclusive: return "INCONCLUSIVE";
    case Convergence::not_judged: break;
  }
  return "not judged";
}

std::vector<GateJob> matrix_gates(receipts::Store& store, const RunSelection& selection,
                                  std::vector<std::string>* skipped, std::vector<std::string>* unjudged) {
  auto skip = [&](const std::string& why) {
    if (skipped != nullptr) skipped->push_back(why);
  };
  std::vector<GateJob> gates;
  if (selection.groups.empty()) return gates;
  // Without a run of the matrix's own baseline cell no backend cell can be judged: the first group
  // would be another cell, and a verdict against it would answer another question.
  if (const auto* missing = selection.baseline_without_runs()) {
    for (const auto& declared : selection.declared_cells)
      if (backend_toggle(declared.name) && unjudged != nullptr)
        unjudged->push_back(fmt::format("cell {}: the matrix's baseline cell '{}' has no run ({}); its backend is not judged",
                                        declared.name, missing->name, missing->no_runs_reason));
    return gates;
  }
  const auto& baseline = selection.groups[0];
  for (size_t i = 1; i < selection.groups.size(); ++i) {
    const auto& cell = selection.groups[i];
    const auto toggle = backend_toggle(cell.name);
    if (!toggle) {
      skip(fmt::format("cell {}: not a single backends.<seam> toggle, not gated", cell.name));
      continue;
    }
    const auto& [seam, backend] = *toggle;
    if (backend != "reference") {
      gates.push_back({cell.name, baseline.run_ids, cell.run_ids, seam, backend});
      continue;
    }
    const auto in_posture = baseline.run_ids.empty() ? std::nullopt : requested_backend(store, baseline.run_ids[0], seam);
    if (!in_posture || *in_posture == "reference") {
      skip(fmt::format("cell {}: the baseline runs the reference at {} too, nothing to judge", cell.name, seam));
      continue;
    }
    gates.push_back({cell.name, cell.run_ids, baseline.run_ids, seam, *in_posture});
  }
  for (const auto& declared : selection.declared_cells) {
    if (declared.no_runs_reason.empty()) continue;
    if (!backend_toggle(declared.name))
      skip(fmt::format("cell {}: {}; not a single backends.<seam> toggle, not gated", declared.name, declared.no_runs_reason));
    else if (unjudged != nullptr)
      unjudged->push_back(fmt::format("cell {}: {}; its backend is not judged", declared.name, declared.no_runs_reason));
  }
  return gates;
}

receipts::Decision GateResult::decision() const {
  receipts::Decision d;
  d.seam = seam;
  d.backend = backend;
  d.verdict = verdict;
  d.evidence_run_ids = comparison.a.evidence_ids();
  for (const auto id : comparison.b.evidence_ids()) d.evidence_run_ids.push_back(id);
  for (const auto id : failed_candidate_runs) d.evidence_run_ids.push_back(id);
  // Runs that did not run what they asked for are not in the comparison's evidence, but the verdict rests on them.
  for (const auto* shortfalls : {&comparison.a_shortfalls, &comparison.b_shortfalls}) {
    for (const auto& s : *shortfalls)
      if (s.seam == seam && std::find(d.evidence_run_ids.begin(), d.evidence_run_ids.end(), s.run_id) == d.evidence_run_ids.end())
        d.evidence_run_ids.push_back(s.run_id);
  }
  d.matrix_id = matrix_id;
  d.details = fmt::format("{}speed {}, convergence {}; {}",
                          overrides.empty() ? "" : fmt::format("made under {}; ", fmt::join(overrides, ", ")),
                          receipts::to_string(speed_verdict), to_string(convergence), fmt::join(reasons, "; "));
  return d;
}

nlohmann::json to_json(const GateResult& r) {
  json standing = json::array();
  for (const auto& d : r.standing_before)
    standing.push_back({{"decision_id", d.decision_id}, {"verdict", receipts::to_string(d.verdict)}, {"lane", d.lane},
                        {"decided_at", d.decided_at}});
  return {{"seam", r.seam},
          {"backend", r.backend},
          {"verdict", receipts::to_string(r.verdict)},
          {"speed_verdict", receipts::to_string(r.speed_verdict)},
          {"convergence", to_string(r.convergence)},
          {"changes_numerics", r.changes_numerics},
          {"baseline_validation_loss", value_or_null(r.baseline_validation_loss)},
          {"candidate_validation_loss", value_or_null(r.candidate_validation_loss)},
          {"validation_relative_difference", value_or_null(r.validation_relative_difference)},
          {"baseline_validation_spread", value_or_null(r.baseline_validation_spread)},
          {"baseline_seeds", r.baseline_seeds},
          {"candidate_seeds", r.candidate_seeds},
          {"min_seeds", r.min_seeds},
          {"reasons", r.reasons},
          {"baseline_loss", value_or_null(r.baseline_loss)},
          {"candidate_loss", value_or_null(r.candidate_loss)},
          {"loss_window_steps", r.loss_window},
          {"loss_relative_difference", value_or_null(r.loss_relative_difference)},
          {"baseline_loss_spread", value_or_null(r.baseline_loss_spread)},
          {"loss_tolerance", r.loss_tolerance},
          {"loss_from_summary_runs", r.loss_from_summary_runs},
          {"failed_candidate_runs", r.failed_candidate_runs},
          {"killed_candidate_runs", r.killed_candidate_runs},
          {"abandoned_candidate_runs", r.abandoned_candidate_runs},
          {"overrides", r.overrides},
          {"baseline_peak_memory_bytes", value_or_null(r.baseline_peak_memory)},
          {"candidate_peak_memory_bytes", value_or_null(r.candidate_peak_memory)},
          {"memory_relative_increase", value_or_null(r.memory_relative_increase)},
          {"memory_tolerance", r.memory_tolerance},
          {"fallback_candidate_runs", r.fallback_candidate_runs},
          {"mismatched_runs", r.mismatched_runs},
          {"capture_lost_runs", r.capture_lost_runs},
          {"baseline_first_step_ms", value_or_null(r.baseline_first_step_ms)},
          {"candidate_first_step_ms", value_or_null(r.candidate_first_step_ms)},
          {"catalog_role", value_or_null(r.catalog_role)},
          {"standing_before", standing},
          {"kept_before", r.kept_before()},
          {"matrix_id", value_or_null(r.matrix_id)},
          {"evidence_run_ids", r.decision().evidence_run_ids},
          {"comparison", to_json(r.comparison)}};
}

std::string render_text(const GateResult& r) {
  std::string out = fmt::format("gate {} / {}: {}\n", r.seam, r.backend, receipts::to_string(r.verdict));
  out += fmt::format("  speed {}, convergence {}\n", receipts::to_string(r.speed_verdict), to_string(r.convergence));
  if (!r.overrides.empty()) out += fmt::format("made under: {}\n", fmt::join(r.overrides, ", "));
  for (const auto& reason : r.reasons) out += fmt::format("  - {}\n", reason);
  for (const auto& d : r.standing_before) out += fmt::format("standing before this gate: {}\n", describe(d));
  out += fmt::format("evidence runs: {}\n", fmt::join(r.decision().evidence_run_ids, ","));
  out += "A = baseline, B = candidate:\n" + render_text(r.comparison);
  return out;
}

}  // namespace ablate::report
