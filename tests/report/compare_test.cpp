// tests/report/compare_test.cpp: report::compare_runs and select_runs on fixture receipt stores: a clear
// win, no difference, too few repeats, non-evidence runs, environment mismatches refused and allowed.
// Build and run: ninja -C build-report report_tests && build-report/tests/report_tests --gtest_filter='Compare*'
#include <gtest/gtest.h>

#include "report/compare.h"
#include "tests/report/fixture_store.h"

namespace ablate::report {
namespace {

using testing::FixtureRun;
using testing::FixtureStore;
using testing::with_backend;

CompareOptions allowing_mismatch() {
  CompareOptions options;
  options.allow_mismatch = true;
  return options;
}

// Compares A and B without --allow-mismatch, which must be refused naming `field` alone; the message.
std::string refusal_of(FixtureStore& f, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                       const std::string& field) {
  try {
    compare_runs(f.store(), a, b);
    ADD_FAILURE() << "a difference in " << field << " must be refused unless allowed";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{field});
    return e.what();
  }
  return "";
}

TEST(Compare, ClearWinNamesTheFactorAndTheDeltas) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99, 100.5, 99.5});
  const auto b = f.add_group("flash", {80, 81, 79, 80.5, 79.5}, with_backend("sdpa_flash"));
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_EQ(c.a.evidence_ids(), a);
  EXPECT_EQ(c.b.evidence_ids(), b);
  EXPECT_DOUBLE_EQ(*c.a.median_step_ms, 100);
  EXPECT_DOUBLE_EQ(*c.b.median_step_ms, 80);
  ASSERT_TRUE(c.step_ratio);
  EXPECT_DOUBLE_EQ(c.step_ratio->ratio, 0.8);
  EXPECT_LT(c.step_ratio->high, 1);
  ASSERT_TRUE(c.u_test);
  EXPECT_TRUE(c.u_test->exact);
  EXPECT_NEAR(c.u_test->p_value, 2.0 / 252, 1e-12);  // 5 vs 5, fully separated
  EXPECT_EQ(c.verdict, Difference::faster);
  // tokens/s = 1e6 / step ms: 10000 -> 12500, +25 %.
  EXPECT_NEAR(*c.tokens_per_s_delta_pct, 25, 1e-9);
  EXPECT_DOUBLE_EQ(*c.goodput_delta_points, 0);
  EXPECT_DOUBLE_EQ(*c.peak_memory_delta_bytes, 0);
  ASSERT_EQ(c.factor.size(), 1u);
  EXPECT_EQ(c.factor[0].field, "spec.backends.attention");
  EXPECT_EQ(c.factor[0].a_values, std::vector<std::string>{"\"reference\""});
  EXPECT_EQ(c.factor[0].b_values, std::vector<std::string>{"\"sdpa_flash\""});
  EXPECT_TRUE(c.mismatches.empty());  // names and tags differ, but they only describe the run

  const auto text = render_text(c);
  EXPECT_NE(text.find("factor under test: spec.backends.attention"), std::string::npos) << text;
  EXPECT_NE(text.find("verdict: B vs A step time: faster"), std::string::npos) << text;
  const auto j = to_json(c);
  EXPECT_EQ(j["verdict"], "faster");
  EXPECT_EQ(j["a"]["evidence_run_ids"].get<std::vector<std::int64_t>>(), a);
  EXPECT_DOUBLE_EQ(j["step_ratio"]["ratio"].get<double>(), 0.8);
  EXPECT_EQ(j["factor"][0]["field"], "spec.backends.attention");
}

// What the runs needed of a GPU (facts.memory) is compared beside the allocated peak: an allocator
// posture (here a cap with expandable segments) moves it where the allocated peak stays put; runs that
// recorded none say nothing about it.
TEST(Compare, GpuMemoryNeededIsComparedBesideThePeak) {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  FixtureStore f;
  FixtureRun a_run, b_run;
  a_run.memory = {{"device_bytes", 150'000'000'000}, {"peak_reserved_bytes", int64_t{78} << 30},
                  {"outside_allocator_bytes", int64_t{1} << 30}, {"needed_bytes", int64_t{79} << 30}};
  b_run.memory = {{"device_bytes", 150'000'000'000}, {"limit_bytes", int64_t{77} << 30},
                  {"peak_reserved_bytes", int64_t{70} << 30}, {"outside_allocator_bytes", int64_t{1} << 30},
                  {"needed_bytes", int64_t{71} << 30}, {"expandable_segments", true}};
  const auto a = f.add_group("default", {100, 101, 99}, a_run);
  const auto b = f.add_group("capped", {100, 101, 99}, b_run);
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_DOUBLE_EQ(*c.peak_memory_delta_bytes, 0);
  ASSERT_TRUE(c.gpu_needed_delta_bytes);
  EXPECT_DOUBLE_EQ(*c.gpu_needed_delta_bytes / GiB, -8);
  const auto text = render_text(c);
  EXPECT_NE(text.find("gpu memory needed (reserved peak + beside the allocator): A 79.000 GiB  B 71.000 GiB  (-8.000 GiB)"),
            std::string::npos)
      << text;
  EXPECT_DOUBLE_EQ(to_json(c)["deltas"]["gpu_needed_bytes"].get<double>() / GiB, -8);
  // Without the facts on either side: no line, no delta.
  const auto none = compare_runs(f.store(), f.add_group("old-a", {100, 101, 99}), f.add_group("old-b", {100, 101, 99}));
  EXPECT_FALSE(none.gpu_needed_delta_bytes);
  EXPECT_EQ(render_text(none).find("gpu memory needed"), std::string::npos);
}

// Kernel time per step by family comes from the profiled windows: per run the window total over its
// steps, per side the median over profiled evidence runs; a family one side lacks shows as absent.
TEST(Compare, FamilyTimesFromProfiledWindows) {
  FixtureStore f;
  auto window = [](double gemm_ms, std::optional<double> loss_ms) {
    FixtureRun run;
    for (std::int64_t step : {20, 21}) {  // two steps: per-step = total / 2
      run.profile_time.push_back({0, step, "family", "gemm", 10, static_cast<std::int64_t>(gemm_ms * 1e6)});
      if (loss_ms) run.profile_time.push_back({0, step, "family", "loss", 2, static_cast<std::int64_t>(*loss_ms * 1e6)});
      run.profile_time.push_back({0, step, "seam", "attention", 1, 1000});  // other dimension: ignored
    }
    return run;
  };
  std::vector<std::int64_t> a, b;
  for (double gemm : {10.0, 12.0, 11.0}) a.push_back(f.add("ref", window(gemm, 5.0)));
  for (double gemm : {10.0, 10.5, 9.5}) {
    auto run = window(gemm, std::nullopt);
    run.backend = "sdpa_flash";
    b.push_back(f.add("fused", run));
  }
  const auto c = compare_runs(f.store(), a, b);
  ASSERT_EQ(c.family_times.size(), 2u);
  EXPECT_EQ(c.family_times[0].family, "gemm");
  EXPECT_DOUBLE_EQ(*c.family_times[0].a_ms_per_step, 11.0);
  EXPECT_DOUBLE_EQ(*c.family_times[0].b_ms_per_step, 10.0);
  EXPECT_EQ(c.family_times[0].a_runs, 3u);
  EXPECT_EQ(c.family_times[1].family, "loss");
  EXPECT_DOUBLE_EQ(*c.family_times[1].a_ms_per_step, 5.0);
  EXPECT_FALSE(c.family_times[1].b_ms_per_step);
  const auto text = render_text(c);
  EXPECT_NE(text.find("gemm"), std::string::npos) << text;
  EXPECT_NE(text.find("(-1.000 ms)"), std::string::npos) << text;
  EXPECT_EQ(to_json(c)["family_times"][1]["b_ms_per_step"], nullptr);
  // Without profiled runs there is no family section at all.
  FixtureStore plain;
  const auto p = compare_runs(plain.store(), plain.add_group("r", {100, 101, 99}), plain.add_group("s", {90, 91, 89}));
  EXPECT_TRUE(p.family_times.empty());
  EXPECT_EQ(render_text(p).find("by family"), std::string::npos);
}

TEST(Compare, OverlappingGroupsAreNoDifference) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 102, 98, 101, 99});
  const auto b = f.add_group("flash", {101, 99, 100, 98.5, 102.5}, with_backend("sdpa_flash"));
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_LT(c.step_ratio->low, 1);
  EXPECT_GT(c.step_ratio->high, 1);
  EXPECT_EQ(c.verdict, Difference::no_difference);
  EXPECT_GT(c.u_test->p_value, 0.5);
}

TEST(Compare, SlowerCandidate) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99});
  const auto b = f.add_group("flash", {130, 131, 129}, with_backend("sdpa_flash"));
  EXPECT_EQ(compare_runs(f.store(), a, b).verdict, Difference::slower);
}

TEST(Compare, TooFewRepeatsIsUnreliable) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101});
  const auto b = f.add_group("flash", {50, 51}, with_backend("sdpa_flash"));
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_EQ(c.verdict, Difference::unreliable);
  EXPECT_NE(render_text(c).find("unreliable (needs >= 3 evidence runs a side)"), std::string::npos);
}

TEST(Compare, NonEvidenceRunsAreExcludedWithTheReason) {
  FixtureStore f;
  auto a = f.add_group("ref", {100, 101, 99});
  FixtureRun failed;
  failed.status = receipts::RunStatus::failed;
  FixtureRun incomplete;
  incomplete.with_goodput = false;
  a.push_back(f.add("ref", failed));
  a.push_back(f.add("ref", incomplete));
  const auto b = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_EQ(c.a.evidence.size(), 3u);
  ASSERT_EQ(c.a.excluded.size(), 2u);
  EXPECT_EQ(c.a.excluded[0].run_id, a[3]);
  EXPECT_EQ(c.a.excluded[0].reason, "status failed: CUDA out of memory");
  EXPECT_EQ(c.a.excluded[1].reason, "incomplete summary: no goodput");
  EXPECT_EQ(c.verdict, Difference::faster);
  EXPECT_NE(render_text(c).find(fmt::format("excluded from A: run {}: status failed", a[3])), std::string::npos);
}

// A run whose receipt says another backend ran at the seam under test (a fallback, or kernels that
// matched another backend) is no evidence about the factor: excluded with why, and the text warns. A
// fallback at a seam that is not the factor does not matter here.
TEST(Compare, RunsThatRanAnotherBackendAreNoEvidenceForTheFactor) {
  FixtureStore f;
  FixtureRun reference;
  reference.backends = {{"loss", "chunked", "reference", std::nullopt, "chunked unavailable", std::nullopt}};
  auto a = f.add_group("ref", {100, 101, 99}, reference);
  FixtureRun observed_other;  // A's reference chose itself, but its kernels matched another backend
  observed_other.backends = {{"attention", "reference", "reference", std::string("sdpa_math"), "", true}};
  a.push_back(f.add("ref", observed_other));
  FixtureRun fell_back = with_backend("fused_cuda");
  fell_back.backends = {{"attention", "fused_cuda", "reference", std::nullopt, "fused_cuda needs a CUDA device", std::nullopt}};
  const auto b_fell_back = f.add_group("fused", {100.5, 99.5, 100}, fell_back);
  FixtureRun ran = with_backend("fused_cuda");
  ran.backends = {{"attention", "fused_cuda", "fused_cuda", std::string("fused_cuda"), "", false}};
  const auto b_ran = f.add("fused", ran);
  auto b = b_fell_back;
  b.push_back(b_ran);

  const auto c = compare_runs(f.store(), a, b);
  EXPECT_EQ(c.a.evidence_ids(), (std::vector<std::int64_t>{a[0], a[1], a[2]}));
  EXPECT_EQ(c.b.evidence_ids(), std::vector<std::int64_t>{b_ran});
  ASSERT_EQ(c.factor.size(), 1u);  // the factor is what the runs requested
  EXPECT_EQ(c.factor[0].field, "spec.backends.attention");
  ASSERT_EQ(c.b_shortfalls.size(), 3u);
  EXPECT_TRUE(c.b_shortfalls[0].fell_back());
  ASSERT_EQ(c.a_shortfalls.size(), 1u);
  EXPECT_TRUE(c.a_shortfalls[0].mismatch);
  ASSERT_EQ(c.b.excluded.size(), 3u);
  EXPECT_EQ(c.b.excluded[0].reason,
            "requested fused_cuda at attention but ran reference (run_backends.chosen): no evidence about the factor "
            "under test");
  EXPECT_EQ(c.verdict, Difference::unreliable);  // one run of B really ran fused_cuda
  EXPECT_DOUBLE_EQ(*c.b.median_step_ms, 100);
  const auto text = render_text(c);
  EXPECT_NE(text.find(fmt::format("WARNING: B requested fused_cuda at attention but ran reference in run(s) {}, {}, {}: "
                                  "no evidence about the factor, not counted",
                                  b[0], b[1], b[2])),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("WARNING: A chose reference at attention but its kernels matched sdpa_math in run(s) {}",
                                  a[3])),
            std::string::npos)
      << text;
  const auto j = to_json(c);
  EXPECT_EQ(j["b_backend_shortfalls"].size(), 3u);
  EXPECT_EQ(j["b_backend_shortfalls"][0]["chosen"], "reference");
}

TEST(Compare, EnvironmentMismatchIsRefusedUnlessAllowed) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99});
  FixtureRun other_gpu = with_backend("sdpa_flash");
  other_gpu.gpu_model = "NVIDIA H200";
  const auto b = f.add_group("flash", {80, 81, 79}, other_gpu);
  const std::string refusal = refusal_of(f, a, b, "env.gpu_model");
  EXPECT_NE(refusal.find("--allow-mismatch"), std::string::npos);
  const auto c = compare_runs(f.store(), a, b, allowing_mismatch());
  EXPECT_TRUE(c.mismatch_allowed);
  ASSERT_EQ(c.mismatches.size(), 1u);
  EXPECT_EQ(c.mismatches[0].field, "env.gpu_model");
  EXPECT_EQ(c.verdict, Difference::faster);
  EXPECT_NE(render_text(c).find("MISMATCH (allowed): env.gpu_model"), std::string::npos);
  EXPECT_TRUE(to_json(c)["mismatch_allowed"].get<bool>());
}

TEST(Compare, DifferenceWithinOneSideIsAMismatch) {
  FixtureStore f;
  auto a = f.add_group("ref", {100, 101});
  FixtureRun newer;
  newer.git_revision = "def456";
  a.push_back(f.add("ref", newer));
  const auto b = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  refusal_of(f, a, b, "env.git_revision");  // a harness revision differing within side A
  const auto c = compare_runs(f.store(), a, b, allowing_mismatch());
  ASSERT_EQ(c.mismatches.size(), 1u);
  EXPECT_TRUE(c.mismatches[0].within_side);
}

// Seeds are repeats: sides that ran the same seeds (a matrix's `seeds`, one a repeat) compare; sides
// that ran different seed sets differ in what they measure.
TEST(Compare, TheSameSeedsOnBothSidesAreRepeatsNotADifference) {
  FixtureStore f;
  auto side = [&](const std::string& tag, const FixtureRun& base, const std::vector<std::int64_t>& seeds, double ms) {
    std::vector<std::int64_t> ids;
    for (const auto seed : seeds) {
      FixtureRun run = base;
      run.seed = seed;
      run.step_ms = ms + static_cast<double>(seed % 3);
      ids.push_back(f.add(tag, run));
    }
    return ids;
  };
  const auto a = side("ref", FixtureRun{}, {1, 2, 3}, 100);
  const auto b = side("flash", with_backend("sdpa_flash"), {1, 2, 3}, 80);
  const auto c = compare_runs(f.store(), a, b, {});
  EXPECT_TRUE(c.mismatches.empty());
  ASSERT_EQ(c.factor.size(), 1u);
  EXPECT_EQ(c.factor[0].field, "spec.backends.attention");
  refusal_of(f, a, side("flash", with_backend("sdpa_flash"), {4, 5, 6}, 80), "spec.experiment.seed");
}

// An A/B across revisions (scripts/gpu-ab.sh BASELINE=1): identical specs, the revision the only
// difference; allowed, it is the one thing the text names as differing.
TEST(Compare, IdenticalSpecsAcrossRevisionsSayWhereTheSidesDiffer) {
  FixtureStore f;
  FixtureRun older, newer;
  older.git_revision = "abc123";
  newer.git_revision = "def456";
  const auto a = f.add_group("ref", {100, 101, 99}, older);
  const auto b = f.add_group("ref", {90, 91, 89}, newer);
  const auto c = compare_runs(f.store(), a, b, allowing_mismatch());
  EXPECT_TRUE(c.factor.empty());
  const auto text = render_text(c);
  EXPECT_NE(text.find("factor under test: none in the specs (they are identical); the sides differ only where "
                      "marked MISMATCH below"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("MISMATCH (allowed): env.git_revision"), std::string::npos) << text;
  // Without a mismatch the plain line stays.
  const auto same = f.add_group("ref", {100, 100, 100}, older);
  EXPECT_NE(render_text(compare_runs(f.store(), a, same)).find("factor under test: none (the specs are identical)"),
            std::string::npos);
}

// A side whose runs are none of them evidence (a killed run) has no specs to compare: the factor is
// unknown, never "the specs are identical".
TEST(Compare, ASideWithoutEvidenceLeavesTheFactorUnknown) {
  FixtureStore f;
  FixtureRun killed;
  killed.status = receipts::RunStatus::killed;
  const auto a = f.add_group("ref", {100}, killed);
  const auto b = f.add_group("chunked", {90, 91, 89}, with_backend("sdpa_flash"));
  const auto text = render_text(compare_runs(f.store(), a, b));
  EXPECT_NE(text.find("factor under test: unknown (side A has no evidence runs, so no specs are compared)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("identical"), std::string::npos) << text;
}

// The same revision built by another compiler (a carried prebuilt tree against the GPU machine's own
// build) is another harness binary: refused unless allowed, and then marked.
TEST(Compare, AnotherCompilerIsAMismatch) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99});
  FixtureRun prebuilt = with_backend("sdpa_flash");
  prebuilt.compiler = "GNU 12.2.0";
  const auto b = f.add_group("flash", {80, 81, 79}, prebuilt);
  refusal_of(f, a, b, "env.compiler");
  EXPECT_EQ(compare_runs(f.store(), a, b, allowing_mismatch()).mismatches.size(), 1u);
}

// Every recorded fact about the harness binary and the machine that can move step times is compared:
// each differing alone is refused naming it. A dirty tree against a clean one at the same revision, and
// an unknown dirty flag against a known clean one, are different trees; two clean trees are the same.
TEST(Compare, BuildTreeAndHostKeysAreCompared) {
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> cases = {
      {"git_dirty", {"false", "true"}},
      {"git_dirty", {"false", "unknown"}},
      {"build_type", {"Release", "Debug"}},
      {"build_flags", {"-O3", "-O3 -march=native"}},
      {"cudnn", {"91002", "90800"}},
      {"cuda_arch_list", {"90a", "90"}},
      {"cpu_model", {"AMD EPYC 9654", "Intel Xeon Platinum 8480+"}},
  };
  for (const auto& [key, values] : cases) {
    FixtureStore f;
    FixtureRun a_run, b_run = with_backend("sdpa_flash");
    a_run.env[key] = values.first;
    b_run.env[key] = values.second;
    const auto a = f.add_group("ref", {100, 101, 99}, a_run);
    const auto b = f.add_group("flash", {80, 81, 79}, b_run);
    SCOPED_TRACE(key + ": " + values.first + " vs " + values.second);
    refusal_of(f, a, b, "env." + key);
  }
  // The devices a process could see are not what it used: no mismatch.
  FixtureStore f;
  FixtureRun clean, clean_other_host = with_backend("sdpa_flash");
  clean.env = {{"git_dirty", "false"}, {"gpu_count", "8"}};
  clean_other_host.env = {{"git_dirty", "false"}, {"gpu_count", "1"}};
  const auto c = compare_runs(f.store(), f.add_group("ref", {100, 101, 99}, clean),
                              f.add_group("flash", {80, 81, 79}, clean_other_host));
  EXPECT_TRUE(c.mismatches.empty());
}

// A short run's goodput is mostly its fixed start-up cost: steady goodput sets start-up, data prep and
// warm-up apart, and the text says when fixed cost dominates, so a posture that pays more up front
// for faster steps does not read as worse.
TEST(Compare, GoodputSetsTheFixedCostApart) {
  FixtureStore f;
  FixtureRun eager;
  eager.goodput = {{"startup", 2.0}, {"data_prep", 0.5}, {"warmup", 1.0}, {"productive", 6.0}, {"other", 0.5}};
  const auto a = f.add_group("ref", {100, 101, 99}, eager);  // fixed 3.5 s of 10 s; steady 6 / 6.5
  FixtureRun captured = with_backend("sdpa_flash");
  captured.goodput = {{"startup", 5.0}, {"data_prep", 0.5}, {"warmup", 3.0}, {"productive", 4.9}, {"other", 0.1}};
  const auto b = f.add_group("flash", {80, 81, 79}, captured);  // fixed 8.5 s of 13.5 s; steady 4.9 / 5
  const auto c = compare_runs(f.store(), a, b);
  EXPECT_NEAR(*c.a.median_steady_goodput_pct, 600.0 / 6.5, 1e-9);
  EXPECT_NEAR(*c.b.median_steady_goodput_pct, 98, 1e-9);
  EXPECT_NEAR(*c.steady_goodput_delta_points, 98 - 600.0 / 6.5, 1e-9);
  EXPECT_DOUBLE_EQ(*c.a.median_fixed_seconds, 3.5);
  EXPECT_NEAR(*c.b.median_fixed_share, 8.5 / 13.5, 1e-12);
  EXPECT_FALSE(c.a.fixed_cost_dominates());
  EXPECT_TRUE(c.b.fixed_cost_dominates());
  const auto text = render_text(c);
  EXPECT_NE(text.find("steady goodput (start-up, data prep and warm-up set apart): A 92.3 %  B 98.0 %  (+5.69 points); "
                      "fixed cost A 3.5 s (35 % of wall)  B 8.5 s (63 % of wall)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("NOTE: fixed cost is 63 % of B's wall time: its goodput measures start-up, not training"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("of A's wall time"), std::string::npos) << text;
  const auto j = to_json(c);
  EXPECT_EQ(j["b"]["fixed_cost_dominates"], true);
  EXPECT_NEAR(j["deltas"]["steady_goodput_points"].get<double>(), 98 - 600.0 / 6.5, 1e-9);
  // Runs without ledger rows have no steady goodput and no such line.
  FixtureStore plain;
  const auto p = compare_runs(plain.store(), plain.add_group("r", {100, 101, 99}), plain.add_group("s", {90, 91, 89}));
  EXPECT_FALSE(p.a.median_steady_goodput_pct);
  EXPECT_EQ(render_text(p).find("steady goodput"), std::string::npos);
}

TEST(Compare, BadSidesThrow) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99});
  EXPECT_THROW(compare_runs(f.store(), a, {}), std::invalid_argument);
  EXPECT_THROW(compare_runs(f.store(), a, {a[0]}), std::invalid_argument);
  EXPECT_THROW(compare_runs(f.store(), a, {999}), receipts::StoreError);
}

TEST(CompareSelect, IdsListsTagsAndNames) {
  FixtureStore f;
  const auto ref = f.add_group("ref", {100, 101});
  FixtureRun failed;
  failed.status = receipts::RunStatus::failed;
  const auto ref_failed = f.add("ref", failed);
  const auto flash = f.add_group("flash", {80}, with_backend("sdpa_flash"));
  auto& s = f.store();
  EXPECT_EQ(select_runs(s, "7"), std::vector<std::int64_t>{7});
  EXPECT_EQ(select_runs(s, "3,1,2"), (std::vector<std::int64_t>{3, 1, 2}));
  EXPECT_EQ(select_runs(s, "tag:ref"), ref);  // ok runs only, oldest first
  EXPECT_EQ(select_runs(s, "tag:ref", true), (std::vector<std::int64_t>{ref[0], ref[1], ref_failed}));
  EXPECT_EQ(select_runs(s, "name:fixture-fl*"), flash);
  for (const char* bad : {"", "abc", "1,,2", "1,x", "-3", "tag:", "tag:nothing", "name:zzz*"})
    EXPECT_THROW(select_runs(s, bad), std::invalid_argument) << bad;
}

TEST(CompareSelect, LaneSinceCombinedFiltersAndMatrixCells) {
  FixtureStore f;
  const auto ref = f.add_group("ref", {100, 101});  // lane tiny/1gpu/reference
  const auto flash = f.add_group("flash", {80, 81}, with_backend("sdpa_flash"));
  auto& s = f.store();
  EXPECT_EQ(select_runs(s, "lane:tiny/1gpu/sdpa_flash"), flash);
  EXPECT_EQ(select_runs(s, "tag:ref&lane:tiny/1gpu/reference"), ref);
  EXPECT_EQ(select_runs(s, "lane:tiny/1gpu/reference&since:1d"), ref);  // all started just now
  EXPECT_THROW(select_runs(s, "tag:ref&lane:tiny/1gpu/sdpa_flash"), std::invalid_argument);  // matches nothing
  EXPECT_THROW(select_runs(s, "since:2999-01-01"), std::invalid_argument);
  for (const char* bad : {"tag:ref&tag:flash", "tag:ref&", "color:red&tag:ref", "lane:", "tag:ref&since:"})
    EXPECT_THROW(select_runs(s, bad), std::invalid_argument) << bad;

  const std::int64_t matrix = s.create_matrix("m", R"({"cells":[{"name":"baseline"},{"name":"backends.attention=sdpa_flash"}]})");
  std::vector<std::int64_t> cell_runs;
  for (int i = 0; i < 2; ++i) {
    FixtureRun run = with_backend("sdpa_flash");
    run.matrix_id = matrix;
    run.cell = "backends.attention=sdpa_flash";
    cell_runs.push_back(f.add("m", run));
  }
  EXPECT_EQ(select_runs(s, "cell:m/backends.attention=sdpa_flash"), cell_runs);
  // A declared cell without runs is named as such, with why, not as an unknown cell.
  try {
    select_runs(s, "cell:m/baseline");
    ADD_FAILURE() << "a cell without runs selects nothing";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cell 'baseline' of matrix m (id 1) has no runs (no run recorded: never started"),
              std::string::npos)
        << e.what();
  }
  for (const char* bad : {"cell:m", "cell:/x", "cell:m/", "cell:m/nosuchcell", "cell:nosuchmatrix/baseline"})
    EXPECT_THROW(select_runs(s, bad), std::invalid_argument) << bad;
}

// A spec key left out of the canonical spec is at its default, and says so (not "absent").
TEST(Compare, ASpecKeyLeftOutAtItsDefaultReadsAsTheDefault) {
  FixtureStore f;
  std::vector<std::int64_t> a, b;
  for (int i = 0; i < 3; ++i) {
    a.push_back(f.add("unsharded", FixtureRun{.step_ms = 100.0 + i}));
    FixtureRun sharded{.step_ms = 102.0 + i};
    sharded.sharding = "optimizer";
    b.push_back(f.add("sharded", sharded));
  }
  const auto c = compare_runs(f.store(), a, b);
  ASSERT_EQ(c.factor.size(), 1u);
  EXPECT_EQ(c.factor[0].field, "spec.distributed.sharding");
  EXPECT_EQ(c.factor[0].a_values, std::vector<std::string>{"(default)"});
  EXPECT_EQ(c.factor[0].b_values, std::vector<std::string>{"\"optimizer\""});
  const auto text = render_text(c);
  EXPECT_NE(text.find("factor under test: spec.distributed.sharding: A (default) | B \"optimizer\""), std::string::npos)
      << text;
  EXPECT_EQ(absent_value("env.nccl"), "(absent)");
}

}  // namespace
}  // namespace ablate::report
