// tests/harness/report_cli_test.cpp: `ablate report`, `ablate trend` and `ablate export` through the built
// binary on a fixture store: files written, exit 2 with a clear message for an unknown lane, a bad date, a
// bad selector (and then no report folder at all), trend --fail-on-regression (exit 1 only for a
// regression), CSV/JSON export to stdout and to a file.
// Build and run: cmake --build build --target ablate harness_tests && build/tests/harness_tests --gtest_filter='ReportCli*'
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_runner.h"
#include "tests/report/fixture_store.h"

namespace fs = std::filesystem;

namespace {

using ablate::testing::run_cli;

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ablate::report::testing::FixtureRun run;
    run.losses = {4.0, 3.0};
    fixture.add_group("ref", {100, 101, 99}, run);
    run.backend = "sdpa_flash";
    fixture.add_group("flash", {80, 81, 79}, run);
  }
  std::string db() { return fixture.store().path(); }
  std::string out(const std::string& name) { return (fs::path(db()).parent_path() / name).string(); }
  ablate::report::testing::FixtureStore fixture;
};

TEST_F(ReportCli, ReportWritesMarkdownHtmlAndJson) {
  const std::string dir = out("rep");
  const auto r = run_cli("report name:fixture-* --out " + dir + " --db " + db());
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* file : {"report.md", "report.html", "report.json"}) EXPECT_TRUE(fs::exists(fs::path(dir) / file)) << file;
  std::ifstream md(fs::path(dir) / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("| fixture-flash | 3 | 0 |"), std::string::npos) << text;
  EXPECT_NE(text.find("faster"), std::string::npos) << text;
}

TEST_F(ReportCli, BadSelectorExitsTwoAndWritesNothing) {
  const std::string dir = out("never");
  const auto r = run_cli("report tag:no-such-tag --out " + dir + " --db " + db());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("matches no finished runs"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir));
  const auto both = run_cli("report tag:ref --matrix m --db " + db());
  EXPECT_EQ(both.rc, 2) << both.out;
  EXPECT_NE(both.out.find("not both"), std::string::npos) << both.out;
  const auto matrix = run_cli("report --matrix nope --db " + db());
  EXPECT_EQ(matrix.rc, 2) << matrix.out;
  EXPECT_NE(matrix.out.find("no matrix named 'nope'"), std::string::npos) << matrix.out;
}

TEST_F(ReportCli, TrendUnknownLaneAndBadDateExitTwo) {
  const auto unknown = run_cli("trend --lane no/such --db " + db());
  EXPECT_EQ(unknown.rc, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("no runs in lane 'no/such'"), std::string::npos) << unknown.out;
  EXPECT_NE(unknown.out.find("tiny/1gpu/reference"), std::string::npos) << unknown.out;
  const auto bad_date = run_cli("trend --lane tiny/1gpu/reference --since 2024-13-45 --db " + db());
  EXPECT_EQ(bad_date.rc, 2) << bad_date.out;
  EXPECT_NE(bad_date.out.find("--since: cannot read '2024-13-45' as a time"), std::string::npos) << bad_date.out;
  const auto ok = run_cli("trend --lane tiny/1gpu/reference --json --db " + db());
  EXPECT_EQ(ok.rc, 0) << ok.out;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["points"].size(), 3u);
}

// `--fail-on-regression`: exit 1 (and say so) when the lane has a regression, 0 without the flag or
// when the lane is clean. Step times are spread deterministically, 12 runs a level.
TEST_F(ReportCli, TrendFailOnRegressionExitsOneOnlyForARegression) {
  auto add_level = [&](const std::string& backend, double level) {
    ablate::report::testing::FixtureRun run;
    run.backend = backend;
    for (int i = 0; i < 12; ++i) {
      run.step_ms = level * (1 + 0.002 * (i % 5));
      fixture.add("trend", run);
    }
  };
  add_level("slower", 100);
  add_level("slower", 110);  // +10 %: a regression
  add_level("steady", 100);
  add_level("steady", 100);

  const auto listed = run_cli("trend --lane tiny/1gpu/slower --db " + db());
  EXPECT_EQ(listed.rc, 0) << listed.out;
  EXPECT_NE(listed.out.find("1 regression(s) worse than 5.0 %"), std::string::npos) << listed.out;
  const auto failing = run_cli("trend --lane tiny/1gpu/slower --fail-on-regression --db " + db());
  EXPECT_EQ(failing.rc, 1) << failing.out;
  EXPECT_NE(failing.out.find("REGRESSION at run"), std::string::npos) << failing.out;
  EXPECT_NE(failing.out.find("ablate: trend: 1 regression(s) worse than 5.0 % in lane tiny/1gpu/slower: exit 1 "
                             "(--fail-on-regression)"),
            std::string::npos)
      << failing.out;
  const auto failing_json = run_cli("trend --lane tiny/1gpu/slower --fail-on-regression --json --db " + db());
  EXPECT_EQ(failing_json.rc, 1) << failing_json.out;

  const auto clean = run_cli("trend --lane tiny/1gpu/steady --fail-on-regression --db " + db());
  EXPECT_EQ(clean.rc, 0) << clean.out;
  EXPECT_NE(clean.out.find("no regression worse than 5.0 %"), std::string::npos) << clean.out;
  const auto bad = run_cli("trend --lane no/such --fail-on-regression --db " + db());
  EXPECT_EQ(bad.rc, 2) << bad.out;  // bad input stays 2
}

TEST_F(ReportCli, ExportCsvToStdoutAndJsonToAFile) {
  const auto csv = run_cli("export --format csv --what steps tag:ref --db " + db());
  ASSERT_EQ(csv.rc, 0) << csv.out;
  EXPECT_EQ(csv.out.rfind("run_id,status,evidence,not_evidence_reason,rank,step,wall_ms,", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 7) << csv.out;  // header + 3 runs x 2 steps
  const std::string file = out("runs.json");
  const auto json = run_cli("export --format json --db " + db() + " --out " + file);
  ASSERT_EQ(json.rc, 0) << json.out;
  std::ifstream in(file);
  EXPECT_EQ(nlohmann::json::parse(in).size(), 6u);
  const auto summaries = run_cli("export --format csv --what summaries name:fixture-* --db " + db());
  ASSERT_EQ(summaries.rc, 0) << summaries.out;
  EXPECT_NE(summaries.out.find("fixture-flash,false,3,0,80,"), std::string::npos) << summaries.out;
  const auto bad = run_cli("export --format xml --db " + db());
  EXPECT_EQ(bad.rc, 2) << bad.out;
}

// Steps of a failed run are left out (named on stderr) unless --all; --all means nothing for the
// other tables and is refused there.
TEST_F(ReportCli, ExportStepsOfEvidenceRunsUnlessAll) {
  ablate::report::testing::FixtureRun crashed;
  crashed.losses = {4.0, 3.0};
  crashed.status = ablate::receipts::RunStatus::failed;
  const auto crashed_id = fixture.add("ref", crashed);
  const auto evidence = run_cli("export --format csv --what steps name:fixture-ref --db " + db());
  ASSERT_EQ(evidence.rc, 0) << evidence.out;
  EXPECT_NE(evidence.out.find(fmt::format("left out the steps of 1 run(s) that are not evidence ({}); --all includes them",
                                          crashed_id)),
            std::string::npos)
      << evidence.out;
  EXPECT_EQ(evidence.out.find(fmt::format("\n{},failed,", crashed_id)), std::string::npos) << evidence.out;
  const auto every = run_cli("export --format csv --what steps --all name:fixture-ref --db " + db());
  ASSERT_EQ(every.rc, 0) << every.out;
  EXPECT_NE(every.out.find(fmt::format("\n{},failed,false,status failed: CUDA out of memory,0,0,", crashed_id)),
            std::string::npos)
      << every.out;
  const auto misplaced = run_cli("export --format csv --what runs --all --db " + db());
  EXPECT_EQ(misplaced.rc, 2) << misplaced.out;
  EXPECT_NE(misplaced.out.find("--all applies to --what steps or evaluations only"), std::string::npos) << misplaced.out;
}

// A convergence matrix's validation curves as text: one row per held-out evaluation, the evidence runs'
// alone unless --all, as for steps.
TEST_F(ReportCli, ExportEvaluationsAsValidationCurves) {
  ablate::report::testing::FixtureRun run;
  run.losses = {4.0, 3.0};
  run.evaluations = {{100, 2.5, 65536, 0.25}, {200, 2.125, 65536, 0.5}};
  const auto ok_id = fixture.add("converge", run);
  run.status = ablate::receipts::RunStatus::killed;
  const auto killed_id = fixture.add("converge", run);
  const auto evidence = run_cli("export --format csv --what evaluations name:fixture-converge --db " + db());
  ASSERT_EQ(evidence.rc, 0) << evidence.out;
  EXPECT_NE(evidence.out.find("run_id,status,evidence,not_evidence_reason,step,loss,tokens,seconds\n"), std::string::npos)
      << evidence.out;
  EXPECT_NE(evidence.out.find(fmt::format("\n{},ok,true,,200,2.125,65536,0.5\n", ok_id)), std::string::npos) << evidence.out;
  EXPECT_NE(evidence.out.find(fmt::format("left out the evaluations of 1 run(s) that are not evidence ({})", killed_id)),
            std::string::npos)
      << evidence.out;
  const auto every = run_cli("export --format json --what evaluations --all name:fixture-converge --db " + db());
  ASSERT_EQ(every.rc, 0) << every.out;
  EXPECT_NE(every.out.find(fmt::format("\"run_id\": {}", killed_id)), std::string::npos) << every.out;
}

}  // namespace
