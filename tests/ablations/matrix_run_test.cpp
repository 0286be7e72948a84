// tests/ablations/matrix_run_test.cpp: the matrix scheduler without LibTorch. The store side (matrix
// row reused, ok pairs skipped, failed ones pending) uses hand-made runs; the process side runs a
// shell script in place of `ablate run` that records its arguments and environment and fails one cell.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ablations/matrix_run.h"
#include "base/remove_tree.h"

namespace fs = std::filesystem;
using namespace ablate::ablations;
using namespace ablate::receipts;

namespace {

class MatrixRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ablate-matrix-run-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    const fs::path file = dir_ / "m.toml";
    std::ofstream(file) << "[matrix]\nname = \"loss\"\nbase = \"" ABLATE_SOURCE_DIR "/experiments/tiny.toml\"\nrepeats = 2\n"
                           "[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n";
    matrix_ = load_matrix(file.string());
  }
  void TearDown() override { ablate::base::remove_tree(dir_); }

  // A finished run recorded as the given matrix cell.
  void add_run(Store& store, int64_t matrix_id, const std::string& cell, int64_t repeat, RunStatus status) {
    RunStart start;
    start.name = "fake";
    start.spec_json = "{}";
    start.matrix_id = matrix_id;
    start.cell = cell;
    start.repeat = repeat;
    const auto id = store.begin_run(start);
    store.finish_run(id, status, status == RunStatus::ok ? "" : "boom", {});
  }

  // The matrix's row in the test's store (run_slots registers its runner there).
  int64_t matrix_row(const Matrix& m) {
    auto store = Store::open((dir_ / "r.db").string());
    return find_or_create_matrix(store, m);
  }

  // run_slots on GPUs 3 and 5 with `script_body` (a /bin/sh script) standing in for `ablate`;
  // progress lines go to progress.txt in the test folder.
  Outcome run_fake(const Matrix& m, int64_t matrix_id, const std::string& script_body) {
    const fs::path script = dir_ / "fake-ablate.sh";
    std::ofstream(script) << "#!/bin/sh\n" << script_body;
    fs::permissions(script, fs::perms::owner_all);
    RunnerOptions opt;
    opt.binary = script.string();
    opt.db = (dir_ / "r.db").string();
    opt.gpus = {"3", "5"};
    opt.log_dir = (dir_ / "logs").string();
    opt.out = std::fopen((dir_ / "progress.txt").c_str(), "w");
    const auto outcome = run_slots(m, matrix_id, run_order(m), opt);
    std::fclose(opt.out);
    return outcome;
  }

  fs::path dir_;
  Matrix matrix_;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_F(MatrixRun, SameMatrixReusesItsRowAndSkipsOkPairs) {
  auto store = Store::open((dir_ / "r.db").string());
  EXPECT_FALSE(find_matrix(store, matrix_));
  const int64_t id = find_or_create_matrix(store, matrix_);
  EXPECT_EQ(find_or_create_matrix(store, matrix_), id);
  EXPECT_EQ(pending_slots(store, id, matrix_).size(), 4u);

  add_run(store, id, "baseline", 0, RunStatus::ok);
  add_run(store, id, "backends.loss=chunked", 0, RunStatus::failed);  // failed pairs run again
  add_run(store, id, "baseline", 1, RunStatus::failed);
  add_run(store, id, "baseline", 1, RunStatus::ok);  // ... until one of them is ok
  EXPECT_EQ(pending_slots(store, id, matrix_), (std::vector<Slot>{{1, 0}, {1, 1}}));

  // A different matrix (other cells) gets its own row.
  Matrix other = matrix_;
  other.cells.pop_back();
  EXPECT_NE(find_or_create_matrix(store, other), id);
}

TEST_F(MatrixRun, ChildArgsCarryBaseOverridesAndDb) {
  const auto args = child_args(matrix_, {1, 0}, "/x/r.db");
  EXPECT_EQ(args, (std::vector<std::string>{"run", matrix_.spec.base_path, "--set", "backends.loss=\"chunked\"", "--db", "/x/r.db"}));
}

TEST_F(MatrixRun, ChildrenGetTheirCoordinatesAndOneGpuEach) {
  // Stands in for `ablate run`: appends "cell|repeat|matrix id|gpu|args" and fails the chunked cell.
  const fs::path calls = dir_ / "calls.txt", progress = dir_ / "progress.txt";
  const int64_t id = matrix_row(matrix_);
  const auto outcome = run_fake(matrix_, id,
                                "echo \"$ABLATE_MATRIX_CELL|$ABLATE_MATRIX_REPEAT|$ABLATE_MATRIX_ID|$CUDA_VISIBLE_DEVICES|$*\" >> " +
                                    calls.string() +
                                    "\necho child output\n"
                                    "case \"$ABLATE_MATRIX_CELL\" in *chunked*) exit 1;; esac\n");

  EXPECT_EQ(outcome.ok, 2u);
  EXPECT_EQ(outcome.failed, 2u);
  std::istringstream lines(slurp(calls));
  std::multiset<std::string> seen;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;  // cell, repeat, matrix id, gpu, arguments
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '|');) fields.push_back(field);
    ASSERT_EQ(fields.size(), 5u) << line;
    EXPECT_EQ(fields[2], std::to_string(id)) << line;
    EXPECT_TRUE(fields[3] == "3" || fields[3] == "5") << line;
    seen.insert(fields[0] + "|" + fields[1]);
    EXPECT_EQ(fields[4].rfind("run " + matrix_.spec.base_path + " --set backends.loss=", 0), 0u) << line;
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"baseline|0", "baseline|1", "backends.loss=chunked|0", "backends.loss=chunked|1"}));

  const std::string text = slurp(progress);
  EXPECT_NE(text.find("[4/4] "), std::string::npos) << text;
  EXPECT_NE(text.find("backends.loss=chunked r0 failed (exit 1)"), std::string::npos) << text;
  EXPECT_NE(text.find("baseline r1 ok"), std::string::npos) << text;
  const auto log = log_path((dir_ / "logs").string(), id, matrix_.cells[1], 0);
  EXPECT_EQ(fs::path(log).filename(), "m" + std::to_string(id) + "-backends.loss=chunked-r0.log");
  EXPECT_EQ(slurp(log), "child output\n");
}

TEST(MatrixRunFormat, Eta) {
  EXPECT_EQ(format_eta(0.2), "0s");
  EXPECT_EQ(format_eta(45), "45s");
  EXPECT_EQ(format_eta(190), "3m10s");
  EXPECT_EQ(format_eta(7500), "2h05m");
}

TEST_F(MatrixRun, AChildThatCannotStartIsAFailedRun) {
  RunnerOptions opt;
  opt.binary = (dir_ / "no-such-binary").string();
  opt.db = (dir_ / "r.db").string();
  opt.log_dir = (dir_ / "logs").string();
  const fs::path progress = dir_ / "progress.txt";
  opt.out = std::fopen(progress.c_str(), "w");
  const auto outcome = run_slots(matrix_, matrix_row(matrix_), {{0, 0}, {1, 0}}, opt);
  std::fclose(opt.out);
  EXPECT_EQ(outcome.ok, 0u);
  EXPECT_EQ(outcome.failed, 2u);
  EXPECT_NE(slurp(progress).find("[2/2] backends.loss=chunked r0 failed"), std::string::npos) << slurp(progress);
}

// A cell with distributed.nproc > 1 runs as `ablate launch` on that many of the listed GPUs at once; one
// wider than --gpus fails without starting; the order is kept (the 2-GPU cell waits for both lanes).
TEST_F(MatrixRun, DataParallelCellsLaunchOnAsManyGpus) {
  const fs::path file = dir_ / "scaling.toml";
  std::ofstream(file) << "[matrix]\nname = \"scaling\"\nbase = \"" ABLATE_SOURCE_DIR "/experiments/tiny.toml\"\nrepeats = 1\n"
                         "[axes]\n\"distributed.nproc\" = [1, 2, 4]\n";
  const auto m = load_matrix(file.string());
  ASSERT_EQ(m.cells.size(), 3u);
  EXPECT_EQ(m.cells[1].nproc, 2);
  EXPECT_EQ(child_args(m, {0, 0}, "r.db").front(), "run");
  EXPECT_EQ(child_args(m, {1, 0}, "r.db").front(), "launch");

  const fs::path calls = dir_ / "calls.txt", progress = dir_ / "progress.txt";
  const auto outcome = run_fake(m, matrix_row(m), "echo \"$ABLATE_MATRIX_CELL|$CUDA_VISIBLE_DEVICES|$1\" >> " + calls.string() + "\n");
  EXPECT_EQ(outcome.ok, 2u);
  EXPECT_EQ(outcome.failed, 1u);
  const std::string seen = slurp(calls);
  EXPECT_NE(seen.find("distributed.nproc=2|3,5|launch"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("distributed.nproc=4|"), std::string::npos) << seen;
  EXPECT_NE(slurp(progress).find("distributed.nproc = 4 needs 4 GPUs, --gpus lists 2"), std::string::npos) << slurp(progress);
}

// Pairs that another live runner of the same matrix holds, or that already have an ok run, are skipped
// (named in the progress), and this runner's own claims are freed when it ends.
TEST_F(MatrixRun, PairsAnotherRunnerHoldsAreSkipped) {
  const int64_t id = matrix_row(matrix_);
  auto store = Store::open((dir_ / "r.db").string());
  const int64_t other = store.begin_matrix_runner(id);
  ASSERT_EQ(store.claim_matrix_slot(other, "backends.loss=chunked", 1).outcome, MatrixClaim::Outcome::claimed);
  add_run(store, id, "baseline", 1, RunStatus::ok);  // finished since the runner listed its work

  const fs::path calls = dir_ / "calls.txt";
  const auto outcome = run_fake(matrix_, id, "echo \"$ABLATE_MATRIX_CELL|$ABLATE_MATRIX_REPEAT\" >> " + calls.string() + "\n");
  EXPECT_EQ(outcome.ok, 2u);
  EXPECT_EQ(outcome.failed, 0u);
  EXPECT_EQ(outcome.skipped, 2u);
  std::istringstream lines(slurp(calls));
  std::multiset<std::string> seen;
  for (std::string line; std::getline(lines, line);) seen.insert(line);
  EXPECT_EQ(seen, (std::multiset<std::string>{"baseline|0", "backends.loss=chunked|0"}));
  const std::string progress = slurp(dir_ / "progress.txt");
  EXPECT_NE(progress.find(fmt::format("backends.loss=chunked r1 skipped: taken by runner {} (pid {}", other, ::getpid())),
            std::string::npos) << progress;
  EXPECT_NE(progress.find("baseline r1 skipped: already ok in run "), std::string::npos) << progress;

  // The runner has ended: a new one may take the pairs it ran (no ok run was recorded by the fake).
  const int64_t next = store.begin_matrix_runner(id);
  EXPECT_EQ(store.claim_matrix_slot(next, "baseline", 0).outcome, MatrixClaim::Outcome::claimed);
  EXPECT_EQ(store.claim_matrix_slot(next, "backends.loss=chunked", 1).outcome, MatrixClaim::Outcome::taken);
}
