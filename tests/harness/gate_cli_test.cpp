// tests/harness/gate_cli_test.cpp: `ablate gate` through the built binary on a fixture store: a running
// run is refused (exit 2), and nothing is stored, not even the gates of a matrix evaluated before it.
// Build and run: cmake --build build --target ablate harness_tests && build/tests/harness_tests --gtest_filter='GateCli*'
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "tests/cli_runner.h"
#include "tests/report/fixture_store.h"

namespace {

using ablate::report::testing::FixtureRun;
using ablate::report::testing::FixtureStore;
using ablate::report::testing::with_backend;
using ablate::testing::run_cli;

std::string gate_args(const std::string& baseline, const std::string& candidate, const std::string& db) {
  return fmt::format("gate --baseline {} --candidate {} --seam attention --backend sdpa_flash --db {}", baseline,
                     candidate, db);
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

// A matrix whose second gate has a run still running stores no decision at all, not the first gate's.
TEST(GateCli, MatrixWithARunningRunStoresNothing) {
  FixtureStore f;
  auto& s = f.store();
  const std::int64_t matrix = s.create_matrix(
      "m", R"({"cells":[{"name":"baseline"},{"name":"backends.attention=sdpa_flash"},)"
           R"({"name":"backends.attention=sdpa_cudnn"}]})");
  auto add_cell = [&](const std::string& cell, const std::string& backend, std::vector<ablate::receipts::RunStatus> statuses) {
    FixtureRun run = with_backend(backend);
    run.matrix_id = matrix;
    run.cell = cell;
    for (const auto status : statuses) {
      run.status = status;
      f.add("m", run);
    }
  };
  using ablate::receipts::RunStatus;
  add_cell("baseline", "reference", {RunStatus::ok, RunStatus::ok, RunStatus::ok});
  add_cell("backends.attention=sdpa_flash", "sdpa_flash", {RunStatus::ok, RunStatus::ok, RunStatus::ok});
  add_cell("backends.attention=sdpa_cudnn", "sdpa_cudnn", {RunStatus::ok, RunStatus::ok, RunStatus::running});
  const auto r = run_cli("gate --matrix m --db " + s.path());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("(candidate) still running"), std::string::npos) << r.out;
  EXPECT_TRUE(s.list_decisions().empty());
}

}  // namespace
