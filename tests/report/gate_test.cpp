// tests/report/gate_test.cpp: report::evaluate_gate on fixture receipt stores: clear win (KEEP), clear
// loss and failed candidate runs (DROP), noise and missing repeats (INCONCLUSIVE), a loss mismatch (the mean
// over the last steps, against the tolerance and the baseline's own spread),
// peak memory growth, runs that did not run the backend they asked for (fallback, observed mismatch),
// backend and spec checks, the minimum evidence behind every verdict, killed / abandoned / running runs,
// the overrides a decision was made under, the stored decision, and the standing decisions that make a
// backend `keep` on a lane.
// Build and run: ninja -C build-report report_tests && build-report/tests/report_tests --gtest_filter='Gate*'
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "report/gate.h"
#include "tests/report/fixture_store.h"

namespace ablate::report {
namespace {

using receipts::Verdict;
using testing::FixtureRun;
using testing::FixtureStore;
using testing::with_backend;

GateOptions attention_flash(double loss_tolerance = 0.02) {
  GateOptions options;
  options.seam = "attention";
  options.backend = "sdpa_flash";
  options.loss_tolerance = loss_tolerance;
  return options;
}

// `count` sdpa_flash runs tagged "flash" that ended with `status` (running, abandoned: never finished).
std::vector<std::int64_t> add_flash_runs(FixtureStore& f, receipts::RunStatus status, int count) {
  FixtureRun run = with_backend("sdpa_flash");
  run.status = status;
  std::vector<std::int64_t> ids;
  for (int i = 0; i < count; ++i) ids.push_back(f.add("flash", run));
  return ids;
}
std::int64_t add_flash_run(FixtureStore& f, receipts::RunStatus status) { return add_flash_runs(f, status, 1)[0]; }
// Three clearly faster sdpa_flash runs (80 ms against the baseline's 100), then one run per `then` status.
std::vector<std::int64_t> fast_flash_runs_then(FixtureStore& f, const std::vector<receipts::RunStatus>& then) {
  auto ids = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  for (const auto status : then) ids.push_back(add_flash_run(f, status));
  return ids;
}

bool mentions(const GateResult& r, const std::string& text) {
  for (const auto& reason : r.reasons)
    if (reason.find(text) != std::string::npos) return true;
  return false;
}

TEST(Gate, ClearWinIsKeepAndIsStored) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99, 100.5});
  const auto candidate = f.add_group("flash", {80, 81, 79, 80.5}, with_backend("sdpa_flash"));
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::keep);
  EXPECT_DOUBLE_EQ(*r.baseline_loss, 3.0);
  EXPECT_DOUBLE_EQ(*r.loss_relative_difference, 0);
  EXPECT_TRUE(r.failed_candidate_runs.empty());
  EXPECT_FALSE(r.catalog_role);  // the fixture recorded no catalog

  const auto decision = r.decision();
  std::vector<std::int64_t> evidence = baseline;
  evidence.insert(evidence.end(), candidate.begin(), candidate.end());
  EXPECT_EQ(decision.evidence_run_ids, evidence);
  f.store().record_decision(decision);
  const auto stored = f.store().list_decisions("attention", "sdpa_flash");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].verdict, Verdict::keep);
  EXPECT_EQ(stored[0].evidence_run_ids, evidence);
  EXPECT_NE(render_text(r).find("gate attention / sdpa_flash: KEEP"), std::string::npos) << render_text(r);
  EXPECT_EQ(to_json(r)["verdict"], "KEEP");
}

TEST(Gate, ClearLossIsDrop) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = f.add_group("flash", {120, 121, 119}, with_backend("sdpa_flash"));
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::drop);
  EXPECT_TRUE(mentions(r, "slower"));
}

TEST(Gate, NoiseIsInconclusive) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 102, 98, 101, 99});
  const auto candidate = f.add_group("flash", {101, 99, 100, 98.5, 102.5}, with_backend("sdpa_flash"));
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_TRUE(mentions(r, "no difference"));
}

TEST(Gate, MissingRepeatsIsInconclusiveEvenForABigWin) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101});
  const auto candidate = f.add_group("flash", {50, 51}, with_backend("sdpa_flash"));
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_TRUE(mentions(r, "at least 3 a side"));
}

TEST(Gate, FinalLossOutOfToleranceIsDrop) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  FixtureRun diverging = with_backend("sdpa_flash");
  diverging.final_loss = 3.2;  // 6.67 % above 3.0
  const auto candidate = f.add_group("flash", {80, 81, 79}, diverging);
  const auto strict = evaluate_gate(f.store(), baseline, candidate, attention_flash(0.02));
  EXPECT_EQ(strict.verdict, Verdict::drop);
  EXPECT_NEAR(*strict.loss_relative_difference, 0.2 / 3.0, 1e-12);
  EXPECT_TRUE(mentions(strict, "out of tolerance"));
  // The fixture wrote no step rows: each run's summary final_loss stands in, and the gate says so.
  EXPECT_EQ(strict.loss_from_summary_runs.size(), 6u);
  EXPECT_TRUE(mentions(strict, "have no step rows"));
  // The same receipts pass a looser tolerance: the loss check alone decided the drop.
  EXPECT_EQ(evaluate_gate(f.store(), baseline, candidate, attention_flash(0.10)).verdict, Verdict::keep);
}

// A run's loss is the mean of its last --loss-window steps, not its last step's: a candidate whose last
// step happens to land 6.7 % off while its last 10 steps agree with the baseline's keeps its KEEP.
TEST(Gate, LossIsTheMeanOverTheLastStepsNotOneStep) {
  FixtureStore f;
  FixtureRun steady;
  steady.losses = std::vector<double>(30, 3.0);
  const auto baseline = f.add_group("ref", {100, 101, 99}, steady);
  FixtureRun candidate_run = with_backend("sdpa_flash");
  candidate_run.losses = std::vector<double>(30, 3.0);
  candidate_run.losses.back() = 3.2;  // one noisy batch at the end: 3.02 over the last 10 steps
  candidate_run.final_loss = 3.2;
  const auto candidate = f.add_group("flash", {80, 81, 79}, candidate_run);
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::keep);
  EXPECT_NEAR(*r.candidate_loss, 3.02, 1e-12);
  EXPECT_NEAR(*r.loss_relative_difference, 0.02 / 3.0, 1e-12);
  EXPECT_TRUE(r.loss_from_summary_runs.empty());
  EXPECT_TRUE(mentions(r, "loss over the last 10 steps"));
  // Over the last step alone the same receipts are out of tolerance.
  auto one_step = attention_flash();
  one_step.loss_window = 1;
  EXPECT_EQ(evaluate_gate(f.store(), baseline, candidate, one_step).verdict, Verdict::drop);
  one_step.loss_window = 0;
  EXPECT_THROW(evaluate_gate(f.store(), baseline, candidate, one_step), std::invalid_argument);
}

// Beyond the tolerance but within the baseline runs' own spread is noise the repeats cannot resolve:
// INCONCLUSIVE, never KEEP and never DROP; beyond the spread too it is DROP.
TEST(Gate, LossBeyondToleranceWithinTheBaselinesOwnSpreadIsInconclusive) {
  FixtureStore f;
  std::vector<std::int64_t> baseline;
  for (const double loss : {3.00, 3.15, 2.95}) {  // spread (3.15 - 2.95) / 3.00 = 6.7 %
    FixtureRun run;
    run.losses = std::vector<double>(12, loss);
    baseline.push_back(f.add("ref", run));
  }
  auto candidate_at = [&](double loss) {
    FixtureRun run = with_backend("sdpa_flash");
    run.losses = std::vector<double>(12, loss);
    return f.add_group("flash-" + std::to_string(loss), {80, 81, 79}, run);
  };
  const auto within = evaluate_gate(f.store(), baseline, candidate_at(3.12), attention_flash());  // 4 % apart
  EXPECT_EQ(within.verdict, Verdict::inconclusive);
  EXPECT_NEAR(*within.baseline_loss_spread, 0.2 / 3.0, 1e-12);
  EXPECT_TRUE(mentions(within, "within the baseline's own spread"));
  const auto beyond = evaluate_gate(f.store(), baseline, candidate_at(3.30), attention_flash());  // 10 % apart
  EXPECT_EQ(beyond.verdict, Verdict::drop);
  EXPECT_TRUE(mentions(beyond, "out of tolerance"));
}

// Convergence on held-out data: three seeds a side, each run's validation loss at the end. A backend
// that changes numerics (its catalog row) is KEEP only when it is faster AND its validation loss is
// within the tolerance or the baseline's seed-to-seed spread; one beyond both is DROP (for any backend);
// too few seeds or no validation loss leave it INCONCLUSIVE, while a backend that keeps the reference's
// numerics is judged on speed alone when nothing was evaluated.
TEST(Gate, NumericsChangingBackendsNeedConvergenceOverSeeds) {
  FixtureStore f;
  auto side = [&](const std::string& tag, std::vector<double> step_ms, const std::vector<double>& validation,
                  bool changes_numerics, bool one_seed = false) {
    FixtureRun run = tag == "ref" ? FixtureRun{} : with_backend("sdpa_flash");
    run.catalog_role = "experimental";
    run.changes_numerics = changes_numerics;
    std::vector<std::int64_t> ids;
    for (size_t i = 0; i < step_ms.size(); ++i) {
      run.step_ms = step_ms[i];
      run.seed = one_seed ? 7 : 100 + static_cast<std::int64_t>(i);
      if (!validation.empty()) run.final_validation_loss = validation[i];
      ids.push_back(f.add(tag, run));
    }
    return ids;
  };
  const auto baseline = side("ref", {100, 101, 99}, {3.00, 3.06, 2.97}, false);  // seed spread 3 %
  const auto fp8_within = side("fp8-a", {80, 81, 79}, {3.05, 3.04, 3.08}, true);  // 1.7 % apart
  const auto keep = evaluate_gate(f.store(), baseline, fp8_within, attention_flash(0.01));
  EXPECT_TRUE(keep.changes_numerics);
  EXPECT_EQ(keep.speed_verdict, Verdict::keep);
  EXPECT_EQ(keep.convergence, Convergence::pass) << render_text(keep);
  EXPECT_EQ(keep.verdict, Verdict::keep);
  EXPECT_EQ(keep.baseline_seeds, 3u);
  EXPECT_NEAR(*keep.baseline_validation_spread, 0.09 / 3.0, 1e-12);
  EXPECT_NE(render_text(keep).find("speed KEEP, convergence PASS"), std::string::npos) << render_text(keep);
  EXPECT_EQ(keep.decision().details.rfind("made under --loss-tolerance 0.01; speed KEEP, convergence PASS; ", 0), 0u)
      << keep.decision().details;

  const auto fp8_beyond = side("fp8-b", {80, 81, 79}, {3.30, 3.28, 3.35}, true);  // 10 % apart
  const auto drop = evaluate_gate(f.store(), baseline, fp8_beyond, attention_flash(0.01));
  EXPECT_EQ(drop.convergence, Convergence::fail);
  EXPECT_EQ(drop.verdict, Verdict::drop);
  EXPECT_EQ(to_json(drop)["convergence"], "FAIL");

  // Three repeats of one seed a side: the speed is measured, the seed-to-seed variation is not.
  const auto one_seed_baseline = side("ref", {100, 101, 99}, {3.00, 3.06, 2.97}, false, /*one_seed=*/true);
  const auto one_seed = side("fp8-c", {80, 81, 79}, {3.05, 3.04, 3.08}, true, /*one_seed=*/true);
  const auto few = evaluate_gate(f.store(), one_seed_baseline, one_seed, attention_flash(0.01));
  EXPECT_EQ(few.candidate_seeds, 1u);
  EXPECT_EQ(few.speed_verdict, Verdict::keep);
  EXPECT_EQ(few.convergence, Convergence::inconclusive);
  EXPECT_EQ(few.verdict, Verdict::inconclusive);  // faster, but its convergence is not shown

  const auto unevaluated = side("fp8-d", {80, 81, 79}, {}, true);
  const auto plain_baseline = side("ref", {100, 101, 99}, {}, false);
  const auto blind = evaluate_gate(f.store(), plain_baseline, unevaluated, attention_flash(0.01));
  EXPECT_EQ(blind.convergence, Convergence::inconclusive);
  EXPECT_EQ(blind.verdict, Verdict::inconclusive);
  EXPECT_TRUE(mentions(blind, "KEEP needs its validation loss at the end over at least 3 seeds a side"));
  const auto same_math = side("flash", {80, 81, 79}, {}, false);
  const auto speed_only = evaluate_gate(f.store(), plain_baseline, same_math, attention_flash(0.01));
  EXPECT_EQ(speed_only.convergence, Convergence::not_judged);
  EXPECT_EQ(speed_only.verdict, Verdict::keep);
}

TEST(Gate, FailedCandidateRunIsDropAndCitedAsEvidence) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = fast_flash_runs_then(f, {receipts::RunStatus::failed});
  const auto crashed_id = candidate.back();
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::drop);
  EXPECT_EQ(r.failed_candidate_runs, std::vector<std::int64_t>{crashed_id});
  EXPECT_EQ(r.decision().evidence_run_ids.back(), crashed_id);
  // Tag selectors with failures included find it too.
  EXPECT_EQ(select_runs(f.store(), "tag:flash", true).back(), crashed_id);
}

// A faster candidate that needs 30 % more memory is dropped at the default +10 % tolerance, kept when
// the tolerance allows it; less memory is never held against it.
TEST(Gate, PeakMemoryGrowthBeyondToleranceIsDrop) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  FixtureRun hungry = with_backend("sdpa_flash");
  hungry.peak_memory_bytes = static_cast<std::int64_t>(1.3 * (1 << 30));
  const auto candidate = f.add_group("flash", {80, 81, 79}, hungry);
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::drop);
  EXPECT_NEAR(*r.memory_relative_increase, 0.3, 1e-9);
  EXPECT_TRUE(mentions(r, "+30.0 %, tolerance +10.0 % (grew beyond tolerance)")) << render_text(r);
  auto loose = attention_flash();
  loose.memory_tolerance = 0.5;
  EXPECT_EQ(evaluate_gate(f.store(), baseline, candidate, loose).verdict, Verdict::keep);

  FixtureRun lean = with_backend("sdpa_flash");
  lean.peak_memory_bytes = 1 << 29;
  const auto smaller = f.add_group("lean", {80, 81, 79}, lean);
  const auto kept = evaluate_gate(f.store(), baseline, smaller, attention_flash());
  EXPECT_EQ(kept.verdict, Verdict::keep);
  EXPECT_TRUE(mentions(kept, "-50.0 %")) << render_text(kept);
  EXPECT_THROW(evaluate_gate(f.store(), baseline, candidate, [] {
                 auto o = attention_flash();
                 o.memory_tolerance = -1;
                 return o;
               }()),
               std::invalid_argument);
}

// Requested is not observed: candidate runs that fell back to the reference, or a profiled run whose
// kernels matched another backend, are no evidence about the backend: neither KEEP for a "win" nor DROP
// for a "loss"; the reason names the runs.
TEST(Gate, RunsThatDidNotRunTheBackendAreNoEvidence) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  FixtureRun fell_back = with_backend("sdpa_flash");
  fell_back.backends = {{"attention", "sdpa_flash", "reference", std::nullopt, "sdpa_flash needs a CUDA device", std::nullopt}};
  const auto slow = f.add_group("fallback", {120, 121, 119}, fell_back);
  const auto r = evaluate_gate(f.store(), baseline, slow, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
  EXPECT_EQ(r.fallback_candidate_runs, slow);
  EXPECT_TRUE(mentions(r, "fell back to another backend at attention")) << render_text(r);

  FixtureRun mismatched = with_backend("sdpa_flash");
  mismatched.backends = {{"attention", "sdpa_flash", "sdpa_flash", std::string("sdpa_efficient"), "", true}};
  const auto fast = f.add_group("mismatch", {80, 81, 79}, mismatched);
  const auto m = evaluate_gate(f.store(), baseline, fast, attention_flash());
  EXPECT_EQ(m.verdict, Verdict::inconclusive);
  EXPECT_EQ(m.mismatched_runs, fast);
  EXPECT_TRUE(mentions(m, "requested is not observed")) << render_text(m);
  EXPECT_EQ(to_json(m)["mismatched_runs"].size(), 3u);

  FixtureRun observed = with_backend("sdpa_flash");
  observed.backends = {{"attention", "sdpa_flash", "sdpa_flash", std::string("sdpa_flash"), "", false}};
  const auto clean = f.add_group("observed", {80, 81, 79}, observed);
  EXPECT_EQ(evaluate_gate(f.store(), baseline, clean, attention_flash()).verdict, Verdict::keep);
}

// A candidate that cannot be captured in the whole-step CUDA graph the baseline captured is dropped,
// however fast its eager steps; when neither side captured, capture is not held against it; the first
// step's time is reported either way.
TEST(Gate, LosingTheCapturedGraphIsDrop) {
  FixtureStore f;
  FixtureRun captured;
  captured.cuda_graphs = {{"requested", true}, {"eligible", true}, {"achieved", true}, {"reason", "captured at step 3"}};
  captured.first_step_ms = 900;
  const auto baseline = f.add_group("ref", {100, 101, 99}, captured);
  FixtureRun eager = with_backend("sdpa_flash");
  eager.cuda_graphs = {{"requested", true}, {"eligible", true}, {"achieved", false},
                       {"reason", "capture failed at step 3: operation not permitted when stream is capturing"}};
  eager.first_step_ms = 2400;
  const auto candidate = f.add_group("flash", {80, 81, 79}, eager);
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::drop);
  EXPECT_EQ(r.capture_lost_runs, candidate);
  EXPECT_TRUE(mentions(r, "could not use the whole-step CUDA graph every baseline run captured (capture failed at step 3"))
      << render_text(r);
  EXPECT_TRUE(mentions(r, "first step (warm-up) 2400 ms vs baseline 900 ms (reported, not judged)")) << render_text(r);

  FixtureRun also_eager = eager;
  also_eager.backend = "reference";
  const auto eager_baseline = f.add_group("ref-eager", {100, 101, 99}, also_eager);
  const auto both = evaluate_gate(f.store(), eager_baseline, candidate, attention_flash());
  EXPECT_EQ(both.verdict, Verdict::keep);
  EXPECT_TRUE(both.capture_lost_runs.empty());
}

TEST(Gate, CandidateAndBaselineMustDifferInTheBackendUnderTest) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto other = f.add_group("other", {80, 81, 79}, with_backend("sdpa_mem_efficient"));
  EXPECT_THROW(evaluate_gate(f.store(), baseline, other, attention_flash()), std::invalid_argument);
  const auto flash = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  EXPECT_THROW(evaluate_gate(f.store(), flash, other, attention_flash()), std::invalid_argument);
  GateOptions no_seam = attention_flash();
  no_seam.seam.clear();
  EXPECT_THROW(evaluate_gate(f.store(), baseline, flash, no_seam), std::invalid_argument);
}

TEST(Gate, OtherSpecDifferencesAreRefusedUnlessAllowed) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  FixtureRun longer = with_backend("sdpa_flash");
  longer.train_steps = 200;
  const auto candidate = f.add_group("flash", {80, 81, 79}, longer);
  try {
    evaluate_gate(f.store(), baseline, candidate, attention_flash());
    FAIL() << "a train.steps difference is not the backend under test";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{"spec.train.steps"});
  }
  GateOptions allowed = attention_flash();
  allowed.compare.allow_mismatch = true;
  const auto r = evaluate_gate(f.store(), baseline, candidate, allowed);
  EXPECT_TRUE(r.comparison.mismatch_allowed);
  ASSERT_EQ(r.comparison.factor.size(), 1u);
  EXPECT_EQ(r.comparison.factor[0].field, "spec.backends.attention");
  EXPECT_EQ(r.comparison.mismatches[0].field, "spec.train.steps");
  EXPECT_EQ(r.overrides, std::vector<std::string>{"--allow-mismatch (spec.train.steps differ)"});
  EXPECT_EQ(r.decision().details.rfind("made under --allow-mismatch (spec.train.steps differ); ", 0), 0u)
      << r.decision().details;
}

// Every verdict needs the minimum evidence: a failure beside one baseline run, or a loss or memory
// difference on two runs a side, is reported and INCONCLUSIVE, not DROP.
TEST(Gate, DropNeedsTheMinimumEvidence) {
  FixtureStore f;
  const auto lone_baseline = f.add_group("ref-1", {100});
  const auto crashed_id = add_flash_run(f, receipts::RunStatus::failed);
  const auto one_failure = evaluate_gate(f.store(), lone_baseline, {crashed_id}, attention_flash());
  EXPECT_EQ(one_failure.verdict, Verdict::inconclusive) << render_text(one_failure);
  EXPECT_EQ(one_failure.failed_candidate_runs, std::vector<std::int64_t>{crashed_id});
  EXPECT_TRUE(mentions(one_failure, fmt::format("candidate run(s) {} failed (1 of 1 attempt(s))", crashed_id)))
      << render_text(one_failure);
  EXPECT_TRUE(mentions(one_failure, "the DROP condition(s) above are reported, not decided")) << render_text(one_failure);

  const auto baseline = f.add_group("ref", {100, 101});
  FixtureRun diverging = with_backend("sdpa_flash");
  diverging.final_loss = 3.5;
  const auto loss_off = evaluate_gate(f.store(), baseline, f.add_group("off", {80, 81}, diverging), attention_flash());
  EXPECT_EQ(loss_off.verdict, Verdict::inconclusive) << render_text(loss_off);
  EXPECT_TRUE(mentions(loss_off, "out of tolerance"));
  EXPECT_TRUE(mentions(loss_off, "2 baseline and 2 candidate evidence run(s): at least 3 a side are needed"));

  FixtureRun hungry = with_backend("sdpa_flash");
  hungry.peak_memory_bytes = std::int64_t{2} << 30;
  const auto memory = evaluate_gate(f.store(), baseline, f.add_group("hungry", {80, 81}, hungry), attention_flash());
  EXPECT_EQ(memory.verdict, Verdict::inconclusive) << render_text(memory);
  EXPECT_TRUE(mentions(memory, "grew beyond tolerance"));
}

// A candidate that failed on every one of three attempts beside three baseline runs is a DROP: the
// attempts are the evidence.
TEST(Gate, CandidateThatFailedEveryAttemptIsDrop) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = add_flash_runs(f, receipts::RunStatus::failed, 3);
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::drop) << render_text(r);
  EXPECT_EQ(r.failed_candidate_runs, candidate);
  EXPECT_TRUE(mentions(r, "failed (3 of 3 attempt(s))")) << render_text(r);
  EXPECT_FALSE(mentions(r, "at least 3 a side are needed")) << render_text(r);
  // Beside two baseline runs the same failures decide nothing.
  const auto short_baseline = std::vector<std::int64_t>(baseline.begin(), baseline.begin() + 2);
  EXPECT_EQ(evaluate_gate(f.store(), short_baseline, candidate, attention_flash()).verdict, Verdict::inconclusive);
}

// Killed and abandoned candidate runs were interrupted from outside: said so, never "failed", never a
// DROP, and not cited as evidence.
TEST(Gate, KilledAndAbandonedCandidateRunsAreNotEvidenceEitherWay) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = fast_flash_runs_then(f, {receipts::RunStatus::abandoned, receipts::RunStatus::killed});
  const auto abandoned_id = candidate[3], killed_id = candidate[4];
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.verdict, Verdict::keep) << render_text(r);
  EXPECT_TRUE(r.failed_candidate_runs.empty());
  EXPECT_EQ(r.abandoned_candidate_runs, std::vector<std::int64_t>{abandoned_id});
  EXPECT_EQ(r.killed_candidate_runs, std::vector<std::int64_t>{killed_id});
  EXPECT_TRUE(mentions(r, fmt::format("{} abandoned (their heartbeat stopped)", abandoned_id))) << render_text(r);
  EXPECT_FALSE(mentions(r, "failed")) << render_text(r);
  const auto cited = r.decision().evidence_run_ids;
  EXPECT_EQ(std::count(cited.begin(), cited.end(), abandoned_id), 0);
  EXPECT_EQ(std::count(cited.begin(), cited.end(), killed_id), 0);

  // Abandoned on every attempt: no evidence at all, INCONCLUSIVE.
  const auto all_abandoned = add_flash_runs(f, receipts::RunStatus::abandoned, 3);
  const auto none = evaluate_gate(f.store(), baseline, all_abandoned, attention_flash());
  EXPECT_EQ(none.verdict, Verdict::inconclusive) << render_text(none);
  EXPECT_EQ(none.abandoned_candidate_runs, all_abandoned);
}

// A run still running is refused, naming it and its side: a decision now would leave it out.
TEST(Gate, RunningRunsAreRefused) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = fast_flash_runs_then(f, {receipts::RunStatus::running});
  const auto running_id = candidate.back();
  try {
    evaluate_gate(f.store(), baseline, candidate, attention_flash());
    FAIL() << "a running candidate run must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("run(s) {} (candidate) still running", running_id)),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("Wait until they finish"), std::string::npos) << e.what();
  }
}

// The stored decision says what it was made under: --allow-mismatch (here nothing differed; the
// fields it lets through: OtherSpecDifferencesAreRefusedUnlessAllowed) and tolerances off their
// defaults. At the defaults nothing is claimed.
TEST(Gate, DecisionCarriesTheOverridesItWasMadeUnder) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto candidate = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  const auto plain = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_TRUE(plain.overrides.empty());
  EXPECT_EQ(plain.decision().details.find("made under"), std::string::npos);

  GateOptions options = attention_flash(0.05);
  options.memory_tolerance = 0.5;
  options.compare.allow_mismatch = true;
  const auto r = evaluate_gate(f.store(), baseline, candidate, options);
  EXPECT_EQ(r.overrides, (std::vector<std::string>{"--allow-mismatch (nothing differed beyond the backend)",
                                                   "--loss-tolerance 0.05", "--memory-tolerance 0.5"}));
  const auto id = f.store().record_decision(r.decision());
  const auto stored = f.store().list_decisions("attention", "sdpa_flash");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].id, id);
  EXPECT_EQ(stored[0].details.rfind("made under --allow-mismatch (nothing differed beyond the backend), "
                                    "--loss-tolerance 0.05, --memory-tolerance 0.5; ",
                                    0),
            0u)
      << stored[0].details;
  EXPECT_NE(render_text(r).find("made under: --allow-mismatch"), std::string::npos) << render_text(r);
  EXPECT_EQ(to_json(r)["overrides"].size(), 3u);
}

// Roles follow the gate: a stored KEEP with its evidence makes the backend `keep` on the candidate
// runs' lane (no other lane); a later gate there sees it kept; a stored DROP demotes it. A KEEP that
// cites too few runs, and INCONCLUSIVE decisions, change nothing.
TEST(Gate, StoredKeepMakesTheBackendKeptOnItsLaneUntilADrop) {
  FixtureStore f;
  auto& s = f.store();
  const std::string lane = "tiny/1gpu/sdpa_flash";  // the fixture's lane for the backend
  const auto baseline = f.add_group("ref", {100, 101, 99});
  const auto fast = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  EXPECT_TRUE(standing_decisions(s).empty());

  // A hand-made KEEP citing one run a side is no evidence.
  receipts::Decision thin;
  thin.seam = "attention";
  thin.backend = "sdpa_flash";
  thin.verdict = Verdict::keep;
  thin.evidence_run_ids = {baseline[0], fast[0]};
  s.record_decision(thin);
  EXPECT_TRUE(standing_decisions(s).empty());

  const auto first = evaluate_gate(s, baseline, fast, attention_flash());
  ASSERT_EQ(first.verdict, Verdict::keep);
  EXPECT_FALSE(first.kept_before());
  const auto keep_id = s.record_decision(first.decision());
  auto standing = standing_decisions(s, "attention", "sdpa_flash", lane);
  ASSERT_EQ(standing.size(), 1u);
  EXPECT_EQ(standing[0].decision_id, keep_id);
  EXPECT_EQ(standing[0].verdict, Verdict::keep);
  EXPECT_EQ(standing[0].lane, lane);
  EXPECT_TRUE(standing_decisions(s, "attention", "sdpa_flash", "tiny/1gpu/reference").empty());
  EXPECT_TRUE(standing_decisions(s, "attention", "sdpa_cudnn").empty());

  // Noise on the same lane: the backend was kept before this gate; INCONCLUSIVE leaves it kept.
  const auto noisy = evaluate_gate(s, baseline, f.add_group("flash-noisy", {100, 101, 99.5}, with_backend("sdpa_flash")),
                                   attention_flash());
  EXPECT_EQ(noisy.verdict, Verdict::inconclusive);
  EXPECT_TRUE(noisy.kept_before());
  ASSERT_EQ(noisy.standing_before.size(), 1u);
  EXPECT_EQ(noisy.standing_before[0].decision_id, keep_id);
  EXPECT_NE(render_text(noisy).find(fmt::format("standing before this gate: decision {} (KEEP on lane {}", keep_id, lane)),
            std::string::npos)
      << render_text(noisy);
  s.record_decision(noisy.decision());
  EXPECT_EQ(standing_decisions(s, "attention", "sdpa_flash", lane).at(0).decision_id, keep_id);

  // A regression: DROP, seen as kept before it; stored, it demotes the backend on the lane.
  const auto slow = evaluate_gate(s, baseline, f.add_group("flash-slow", {120, 121, 119}, with_backend("sdpa_flash")),
                                  attention_flash());
  EXPECT_EQ(slow.verdict, Verdict::drop);
  EXPECT_TRUE(slow.kept_before());
  const auto drop_id = s.record_decision(slow.decision());
  standing = standing_decisions(s, "attention", "sdpa_flash", lane);
  ASSERT_EQ(standing.size(), 1u);
  EXPECT_EQ(standing[0].decision_id, drop_id);
  EXPECT_EQ(standing[0].verdict, Verdict::drop);
  EXPECT_FALSE(evaluate_gate(s, baseline, fast, attention_flash()).kept_before());
}

TEST(Gate, CatalogRoleComesFromTheCandidateRuns) {
  FixtureStore f;
  const auto baseline = f.add_group("ref", {100, 101, 99});
  FixtureRun kept = with_backend("sdpa_flash");
  kept.catalog_role = "keep";
  const auto candidate = f.add_group("flash", {100, 101, 99.5}, kept);
  const auto r = evaluate_gate(f.store(), baseline, candidate, attention_flash());
  EXPECT_EQ(r.catalog_role, std::optional<std::string>("keep"));
  EXPECT_TRUE(r.kept_before());  // no stored decision on the lane: the snapshot's role stands
  EXPECT_EQ(r.verdict, Verdict::inconclusive);
}

// A matrix's gates: a cell that sets a fast backend is judged against the baseline cell; over a fast
// posture (the baseline runs sdpa_flash), a cell that turns the seam back to `reference` judges
// sdpa_flash with that cell as its baseline; a cell that is not one backend toggle is skipped, saying so.
TEST(Gate, MatrixGatesJudgeTheFastBackendEitherWay) {
  FixtureStore f;
  auto& s = f.store();
  const std::int64_t matrix = s.create_matrix(
      "posture", R"({"cells":[{"name":"baseline"},{"name":"backends.attention=reference"},)"
                 R"({"name":"backends.attention=sdpa_cudnn"},{"name":"train.steps=200"}]})");
  auto add_cell = [&](const std::string& cell, const std::string& backend, std::vector<double> step_ms) {
    FixtureRun run = with_backend(backend);
    run.matrix_id = matrix;
    run.cell = cell;
    std::vector<std::int64_t> ids;
    for (const double ms : step_ms) {
      run.step_ms = ms;
      ids.push_back(f.add("posture", run));
    }
    return ids;
  };
  const auto fast = add_cell("baseline", "sdpa_flash", {80, 81, 79});
  const auto back_on_reference = add_cell("backends.attention=reference", "reference", {100, 101, 99});
  const auto cudnn = add_cell("backends.attention=sdpa_cudnn", "sdpa_cudnn", {82, 83, 81});
  add_cell("train.steps=200", "sdpa_flash", {80});
  std::vector<std::string> skipped;
  const auto gates = matrix_gates(s, select_matrix(s, "posture"), &skipped);
  ASSERT_EQ(gates.size(), 2u);
  EXPECT_EQ(gates[0].seam, "attention");
  EXPECT_EQ(gates[0].backend, "sdpa_flash");  // the posture's backend, judged against the cell without it
  EXPECT_EQ(gates[0].baseline, back_on_reference);
  EXPECT_EQ(gates[0].candidate, fast);
  EXPECT_EQ(gates[1].backend, "sdpa_cudnn");
  EXPECT_EQ(gates[1].baseline, fast);
  EXPECT_EQ(gates[1].candidate, cudnn);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("train.steps=200"), std::string::npos) << skipped[0];
  // sdpa_flash earns its place: 20 % faster than the posture without it.
  GateOptions options = attention_flash();
  EXPECT_EQ(evaluate_gate(s, gates[0].baseline, gates[0].candidate, options).verdict, Verdict::keep);
}

}  // namespace
}  // namespace ablate::report
