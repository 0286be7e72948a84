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

TEST(Compare, EnvironmentMismatchIsRefusedUnlessAllowed) {
  FixtureStore f;
  const auto a = f.add_group("ref", {100, 101, 99});
  FixtureRun other_gpu = with_backend("sdpa_flash");
  other_gpu.gpu_model = "NVIDIA H200";
  const auto b = f.add_group("flash", {80, 81, 79}, other_gpu);
  try {
    compare_runs(f.store(), a, b);
    FAIL() << "a GPU difference must be refused";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{"env.gpu_model"});
    EXPECT_NE(std::string(e.what()).find("--allow-mismatch"), std::string::npos);
  }
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
  try {
    compare_runs(f.store(), a, b);
    FAIL() << "a harness revision differing within side A must be refused";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.fields(), std::vector<std::string>{"env.git_revision"});
  }
  const auto c = compare_runs(f.store(), a, b, allowing_mismatch());
  ASSERT_EQ(c.mismatches.size(), 1u);
  EXPECT_TRUE(c.mismatches[0].within_side);
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

}  // namespace
}  // namespace ablate::report
