// tests/harness/gate_cli_test.cpp: roles follow the gate, end to end through the built binary on a
// fixture store: `ablate gate` KEEP is stored, `ablate catalog --db --lane` shows the backend `keep` on
// that lane (only there), a regressed candidate set makes `ablate gate` exit 1 naming the kept backend
// and the decision that kept it, and the stored DROP demotes it; a running run (given by id, matched by
// a tag, in a matrix) is refused (exit 2) and nothing is stored, not even the gates of a matrix
// evaluated before it; a matrix's backend cell without a run fails the gate (exit 1) naming it; the same
// gate asked again of the same runs stores no duplicate; a misspelt --seam is exit 2 with the nearest;
// `catalog --lane` without a store or with an unknown lane is exit 2.
// Build and run: cmake --build build --target ablate harness_tests && build/tests/harness_tests --gtest_filter='GateCli*'
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/cli_runner.h"
#include "tests/receipts/test_util.h"
#include "tests/report/fixture_store.h"

namespace {

namespace fs = std::filesystem;
using ablate::receipts::testing::read_file;
using ablate::report::testing::FixtureRun;
using ablate::report::testing::FixtureStore;
using ablate::report::testing::with_backend;
using ablate::testing::run_cli;

constexpr const char* kFlashLane = "tiny/1gpu/sdpa_flash";  // the fixture's lane for sdpa_flash runs

std::string gate_args(const std::string& baseline, const std::string& candidate, const std::string& db) {
  return fmt::format("gate --baseline {} --candidate {} --seam attention --backend sdpa_flash --db {}", baseline,
                     candidate, db);
}

// attention/sdpa_flash's row of `ablate catalog --json` on a lane (null when there is none: a build
// without LibTorch lists only backends with a standing decision).
nlohmann::json flash_row(const std::string& db, const std::string& lane) {
  const auto r = run_cli("catalog --json --db " + db + " --lane " + lane);
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const auto& row : nlohmann::json::parse(r.out))
    if (row["seam"] == "attention" && row["backend"] == "sdpa_flash") return row;
  return nullptr;
}

// Three reference runs tagged ref (100 ms a step) and three sdpa_flash runs tagged flash (80 ms).
void add_ref_and_flash(FixtureStore& f) {
  f.add_group("ref", {100, 101, 99});
  f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
}

TEST(GateCli, KeepMakesTheBackendKeptOnItsLaneAndARegressionFailsTheGate) {
  FixtureStore f;
  const std::string db = f.store().path();
  add_ref_and_flash(f);

  const auto keep = run_cli(gate_args("tag:ref", "tag:flash", db));
  ASSERT_EQ(keep.rc, 0) << keep.out;
  EXPECT_NE(keep.out.find("gate attention / sdpa_flash: KEEP"), std::string::npos) << keep.out;
  const auto keep_id = f.store().list_decisions("attention", "sdpa_flash").at(0).id;

  auto row = flash_row(db, kFlashLane);
  ASSERT_FALSE(row.is_null());
  EXPECT_EQ(row["role"], "keep") << row.dump();
  EXPECT_EQ(row["decision"]["decision_id"], keep_id);
  const auto other_lane = flash_row(db, "tiny/1gpu/reference");  // kept on its lane only
  EXPECT_TRUE(other_lane.is_null() || (other_lane["role"] != "keep" && other_lane["decision"].is_null()))
      << other_lane.dump();
  const auto table = run_cli("catalog --db " + db);
  ASSERT_EQ(table.rc, 0) << table.out;
  EXPECT_NE(table.out.find(fmt::format("(keep on lane {} by decision {} of", kFlashLane, keep_id)), std::string::npos)
      << table.out;

  // The kept backend regresses on the same lane: exit 1, naming it and the decision that kept it.
  f.add_group("flash-slow", {120, 121, 119}, with_backend("sdpa_flash"));
  const auto regressed = run_cli(gate_args("tag:ref", "tag:flash-slow", db));
  EXPECT_EQ(regressed.rc, 1) << regressed.out;
  EXPECT_NE(regressed.out.find("gate attention / sdpa_flash: DROP"), std::string::npos) << regressed.out;
  EXPECT_NE(regressed.out.find(fmt::format("kept backend attention/sdpa_flash regressed: kept by decision {} (KEEP on "
                                           "lane {}",
                                           keep_id, kFlashLane)),
            std::string::npos)
      << regressed.out;
  EXPECT_NE(regressed.out.find("this DROP demotes it on that lane"), std::string::npos) << regressed.out;

  // Demoted: the catalog shows the static role again (none in a build without LibTorch), citing the
  // DROP, and the same gate now passes CI.
  row = flash_row(db, kFlashLane);
  ASSERT_FALSE(row.is_null());
  EXPECT_EQ(row["role"], row["catalog_role"]) << row.dump();
  EXPECT_EQ(row["decision"]["verdict"], "DROP");
  EXPECT_EQ(run_cli(gate_args("tag:ref", "tag:flash-slow", db)).rc, 0);
}

TEST(GateCli, RunningRunIsRefusedAndNothingIsStored) {
  FixtureStore f;
  const std::string db = f.store().path();
  const auto baseline = f.add_group("ref", {100, 101, 99});
  auto candidate = f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  FixtureRun still = with_backend("sdpa_flash");
  still.status = ablate::receipts::RunStatus::running;
  candidate.push_back(f.add("flash", still));
  const auto r = run_cli(gate_args(fmt::format("{}", fmt::join(baseline, ",")), fmt::format("{}", fmt::join(candidate, ",")), db));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(fmt::format("run(s) {} (candidate) still running", candidate.back())), std::string::npos) << r.out;
  EXPECT_TRUE(f.store().list_decisions().empty());
}

// A tag selector's run still running is refused too, not silently left out.
TEST(GateCli, RunningRunMatchedByATagIsRefused) {
  FixtureStore f;
  f.add_group("ref", {100, 101, 99});
  f.add_group("flash", {80, 81, 79}, with_backend("sdpa_flash"));
  FixtureRun still = with_backend("sdpa_flash");
  still.status = ablate::receipts::RunStatus::running;
  const auto running_id = f.add("flash", still);
  const auto r = run_cli(gate_args("tag:ref", "tag:flash", f.store().path()));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(fmt::format("run(s) {} (candidate) still running", running_id)), std::string::npos) << r.out;
  EXPECT_TRUE(f.store().list_decisions().empty());
}

// Matrix "m" in the fixture store: a baseline cell and two attention backends; add() puts a cell's runs
// in, one a status given (three ok runs by default).
struct AttentionMatrix {
  FixtureStore& f;
  std::int64_t id = f.store().create_matrix("m", R"({"cells":[{"name":"baseline"},{"name":"backends.attention=sdpa_flash"},)"
                                                 R"({"name":"backends.attention=sdpa_cudnn"}]})");
  void add(const std::string& cell, const std::string& backend,
           const std::vector<ablate::receipts::RunStatus>& statuses = std::vector<ablate::receipts::RunStatus>(
               3, ablate::receipts::RunStatus::ok)) {
    FixtureRun run = with_backend(backend);
    run.matrix_id = id;
    run.cell = cell;
    for (const auto status : statuses) {
      run.status = status;
      f.add("m", run);
    }
  }
};

// A matrix whose second gate has a run still running stores no decision at all, not the first gate's.
TEST(GateCli, MatrixWithARunningRunStoresNothing) {
  FixtureStore f;
  AttentionMatrix m{f};
  using ablate::receipts::RunStatus;
  m.add("baseline", "reference");
  m.add("backends.attention=sdpa_flash", "sdpa_flash");
  m.add("backends.attention=sdpa_cudnn", "sdpa_cudnn", {RunStatus::ok, RunStatus::ok, RunStatus::running});
  const auto r = run_cli("gate --matrix m --db " + f.store().path());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("(candidate) still running"), std::string::npos) << r.out;
  EXPECT_TRUE(f.store().list_decisions().empty());
}

// A backend cell the matrix declares but holds no run of (its run refused before it began, as
// backends.strict does for a backend this machine cannot run) gets no verdict, and no verdict is no
// pass: the cell is named with why, exit 1; the cells that ran are still judged and stored. With only
// the baseline run, the same, instead of "no cell besides its baseline".
TEST(GateCli, MatrixBackendCellWithoutARunIsNamedAndFailsTheGate) {
  FixtureStore f;
  AttentionMatrix m{f};
  const std::string db = f.store().path();
  m.add("baseline", "reference");
  const auto only_baseline = run_cli("gate --matrix m --db " + db);
  EXPECT_EQ(only_baseline.rc, 1) << only_baseline.out;
  EXPECT_NE(only_baseline.out.find("ablate: gate: 2 backend cell(s) of m have no run, so no verdict"), std::string::npos)
      << only_baseline.out;
  m.add("backends.attention=sdpa_flash", "sdpa_flash");
  const auto r = run_cli("gate --matrix m --db " + db);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("gate attention / sdpa_flash: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cell backends.attention=sdpa_cudnn: no run recorded: never started, or refused before its run "
                       "began (an unavailable backend under backends.strict = true"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("its backend is not judged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ablate: gate: 1 backend cell(s) of m have no run"), std::string::npos) << r.out;
  EXPECT_EQ(f.store().list_decisions().size(), 1u) << "the cell that ran is judged and stored";
}

// Without a run of the matrix's own baseline cell, no backend cell is judged against whichever cell
// happens to come first: each is named, nothing is stored, exit 1; the report says so too.
TEST(GateCli, AMatrixWhoseBaselineCellHasNoRunJudgesNothing) {
  FixtureStore f;
  AttentionMatrix m{f};
  m.add("backends.attention=sdpa_flash", "sdpa_flash");
  m.add("backends.attention=sdpa_cudnn", "sdpa_cudnn");
  const auto r = run_cli("gate --matrix m --db " + f.store().path());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("cell backends.attention=sdpa_cudnn: the matrix's baseline cell 'baseline' has no run"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("gate attention /"), std::string::npos) << "no verdict against another cell: " << r.out;
  EXPECT_TRUE(f.store().list_decisions().empty());
  const auto report = run_cli("report --matrix m --out " + (fs::path(f.store().path()).parent_path() / "rep").string() +
                              " --db " + f.store().path());
  EXPECT_EQ(report.rc, 0) << report.out;
  const std::string markdown = read_file((fs::path(f.store().path()).parent_path() / "rep" / "report.md").string());
  EXPECT_NE(markdown.find("The matrix's baseline cell 'baseline' has no run"), std::string::npos) << markdown;
}

// The same gate asked again of the same runs stores nothing new: it names the decision that stands.
// New evidence (another candidate run) is a new decision.
TEST(GateCli, AGateAskedAgainOfTheSameRunsStoresNoDuplicate) {
  FixtureStore f;
  const std::string db = f.store().path();
  add_ref_and_flash(f);
  const auto first = run_cli(gate_args("tag:ref", "tag:flash", db));
  ASSERT_EQ(first.rc, 0) << first.out;
  const auto again = run_cli(gate_args("tag:ref", "tag:flash", db));
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_NE(again.out.find("(the same verdict on the same runs) already stored in"), std::string::npos) << again.out;
  EXPECT_EQ(f.store().list_decisions("attention", "sdpa_flash").size(), 1u);
  f.add_group("flash", {80.5}, with_backend("sdpa_flash"));
  EXPECT_EQ(run_cli(gate_args("tag:ref", "tag:flash", db)).rc, 0);
  EXPECT_EQ(f.store().list_decisions("attention", "sdpa_flash").size(), 2u);
}

// A misspelt --seam is bad input naming the nearest seam, before any run is read.
TEST(GateCli, AnUnknownSeamIsRefusedWithTheNearestName) {
  FixtureStore f;
  const auto r = run_cli("gate --baseline 1 --candidate 2 --seam atention --backend sdpa_flash --db " + f.store().path());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("gate: --seam 'atention' is not a seam (did you mean 'attention'?); the seams are "), std::string::npos)
      << r.out;
  EXPECT_TRUE(f.store().list_decisions().empty());
}

TEST(GateCli, CatalogLaneNeedsAStoreAndAKnownLane) {
  FixtureStore f;
  f.add_group("ref", {100, 101, 99});
  const std::string missing = (std::filesystem::path(f.store().path()).parent_path() / "none.db").string();
  const auto no_store = run_cli("catalog --lane " + std::string(kFlashLane) + " --db " + missing);
  EXPECT_EQ(no_store.rc, 2) << no_store.out;
  EXPECT_NE(no_store.out.find("pass --db PATH"), std::string::npos) << no_store.out;
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_EQ(run_cli("catalog --db " + missing).rc, 0);  // the static catalog
  const auto unknown = run_cli("catalog --lane no/such --db " + f.store().path());
  EXPECT_EQ(unknown.rc, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("no run in"), std::string::npos) << unknown.out;
}

}  // namespace
