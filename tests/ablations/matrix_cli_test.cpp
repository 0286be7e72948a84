// tests/ablations/matrix_cli_test.cpp: `ablate matrix` through the built binary. expand prints cells
// and order, a bad matrix or a malformed ABLATE_GIT_REVISION exits 2, and (in builds with `ablate run`)
// the real ablations/tiny_cpu.toml runs end to end into a temp store, gets a report and a gate verdict,
// then resumes with nothing left to do.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "receipts/store.h"
#include "tests/cli_runner.h"
#include "tests/corpus_folder.h"
#include "base/remove_tree.h"

namespace fs = std::filesystem;

namespace {

using ablate::testing::run_cli;

const std::string kTinyMatrix = std::string(ABLATE_SOURCE_DIR) + "/ablations/tiny_cpu.toml";

class MatrixCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ablate-matrix-cli-" + std::to_string(::getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ablate::base::remove_tree(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(MatrixCli, ExpandPrintsCellsAndInterleavedOrder) {
  const auto r = run_cli("matrix expand " + kTinyMatrix + " --repeats 2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 cells x 2 repeats = 4 runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("r1: baseline backends.loss=chunked"), std::string::npos) << r.out;
}

TEST_F(MatrixCli, BadMatrixExitsTwoWithLineAndColumn) {
  const fs::path f = dir_ / "bad.toml";
  std::ofstream(f) << "[matrix]\nname = \"b\"\nbase = \"" ABLATE_SOURCE_DIR "/experiments/tiny.toml\"\nrepeats = -1\n";
  for (const char* sub : {"expand", "run"}) {
    const auto r = run_cli(std::string("matrix ") + sub + " " + f.string() + " --db " + (dir_ / "r.db").string());
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find(f.string() + ":4:11: error: matrix.repeats: expected an integer >= 1, got -1"), std::string::npos) << r.out;
  }
  EXPECT_FALSE(fs::exists(dir_ / "r.db")) << "a bad matrix must fail before anything is written";
}

// The command line changes the file (recorded, shown), a dry run prints the children's commands with
// those changes and writes nothing, and a bad change exits 2 naming the argument.
TEST_F(MatrixCli, CommandLineChangesShowInExpandAndDryRun) {
  const std::string db = (dir_ / "r.db").string();
  const std::string changes = " --set train.steps=4 --axis 'backends.loss=[\"chunked\"]' --name tiny_cpu_one";
  const auto expand = run_cli("matrix expand " + kTinyMatrix + changes);
  EXPECT_EQ(expand.rc, 0) << expand.out;
  EXPECT_NE(expand.out.find("matrix tiny_cpu_one (one-at-a-time)"), std::string::npos) << expand.out;
  EXPECT_NE(expand.out.find("1 cells x 3 repeats = 3 runs"), std::string::npos) << expand.out;
  EXPECT_NE(expand.out.find("changed on the command line: --name tiny_cpu_one --axis backends.loss=[\"chunked\"] --set train.steps=4"),
            std::string::npos) << expand.out;
  const auto dry = run_cli("matrix run " + kTinyMatrix + " --dry-run --repeats 1" + changes + " --db " + db);
  EXPECT_EQ(dry.rc, 0) << dry.out;
  EXPECT_NE(dry.out.find("matrix tiny_cpu_one (new): 1 of 1 runs to do"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("--set train.steps=4 --set train.warmup_steps=2"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("--set 'backends.loss=\"chunked\"'"), std::string::npos) << dry.out;
  EXPECT_FALSE(fs::exists(db)) << "a dry run writes nothing";
  const auto bad = run_cli("matrix run " + kTinyMatrix + " --set backends.loss=chunked --db " + db);
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("--set backends.loss=chunked: error: 'backends.loss' is an axis of this matrix"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(db)) << "a bad change must fail before anything is written";
}

// A malformed ABLATE_GIT_REVISION would fail every child run: `matrix run` refuses it up front.
TEST_F(MatrixCli, MalformedGitRevisionOverrideExitsTwoBeforeAnything) {
  const auto r = ablate::testing::run_shell("env ABLATE_GIT_REVISION=v1.2 " + std::string(ABLATE_BINARY_DIR) + "/ablate matrix run " +
                                            kTinyMatrix + " --repeats 1 --db " + (dir_ / "r.db").string());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ABLATE_GIT_REVISION='v1.2' is not a git revision"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
}

// A --logs path that cannot be a folder is bad input: exit 2 naming it, before the store learns of the matrix.
TEST_F(MatrixCli, ALogFolderThatIsAFileExitsTwoBeforeAnything) {
  const fs::path file = dir_ / "not-a-folder";
  std::ofstream(file) << "x";
  const std::string db = (dir_ / "r.db").string();
  const auto r = run_cli("matrix run " + kTinyMatrix + " --repeats 1 --logs " + file.string() + " --db " + db);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("matrix run: cannot make the log folder " + file.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("give --logs a folder path you can write"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(db)) << "nothing is written before the log folder is made";
}

TEST_F(MatrixCli, TinyCpuRunsEndToEndAndResumes) {
  if (run_cli("run --help").rc != 0) GTEST_SKIP() << "this build has no `ablate run` (built without LibTorch)";
  const std::string db = (dir_ / "r.db").string();
  // The gate compares git_dirty: the cells' runs record a pinned revision, so an edit to the checkout
  // while the test runs cannot make its two cells incomparable.
  const auto first = ablate::testing::run_shell(
      "env ABLATE_GIT_REVISION=0123456789abcdef0123456789abcdef01234567 ABLATE_GIT_DIRTY=false " +
      std::string(ABLATE_BINARY_DIR) + "/ablate matrix run " + kTinyMatrix + " --repeats 1 --db " + db);
  ASSERT_EQ(first.rc, 0) << first.out;
  EXPECT_NE(first.out.find("[2/2] "), std::string::npos) << first.out;

  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  ASSERT_TRUE(runs[0].matrix_id);
  const auto cells = store.matrix_cells(*runs[0].matrix_id);
  ASSERT_EQ(cells.size(), 2u);
  std::set<std::string> names;
  for (const auto& c : cells) {
    const auto run = store.get_run(c.run_id);
    EXPECT_EQ(run.status, ablate::receipts::RunStatus::ok);
    EXPECT_EQ(c.repeat, 0);
    EXPECT_EQ(run.cell, c.cell);
    names.insert(c.cell);
  }
  EXPECT_EQ(names, (std::set<std::string>{"baseline", "backends.loss=chunked"}));
  // The chunked cell really asked for the chunked loss.
  const auto chunked = store.query("SELECT b.requested FROM run_backends b JOIN matrix_cells c ON c.run_id = b.run_id "
                                   "WHERE c.cell = 'backends.loss=chunked' AND b.seam = 'loss'");
  ASSERT_EQ(chunked.size(), 1u);
  EXPECT_EQ(chunked[0]["requested"], "chunked");

  // The same store read back as a report and a gate verdict. One repeat a cell: unreliable, never a win.
  const std::string report_dir = (dir_ / "report").string();
  const auto report = run_cli("report --matrix tiny_cpu --out " + report_dir + " --db " + db);
  ASSERT_EQ(report.rc, 0) << report.out;
  std::ifstream md(fs::path(report_dir) / "report.md");
  const std::string markdown((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(markdown.find("| backends.loss=chunked | 1 | 0 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("unreliable"), std::string::npos) << markdown;
  EXPECT_TRUE(fs::exists(fs::path(report_dir) / "report.html"));
  std::string baseline_id, chunked_id;
  for (const auto& c : cells) (c.cell == "baseline" ? baseline_id : chunked_id) = std::to_string(c.run_id);
  const auto gate = run_cli("gate --baseline " + baseline_id + " --candidate " + chunked_id +
                            " --seam loss --backend chunked --db " + db);
  EXPECT_EQ(gate.rc, 0) << gate.out;  // chunked is `experimental`: INCONCLUSIVE does not fail CI
  EXPECT_NE(gate.out.find("gate loss / chunked: INCONCLUSIVE"), std::string::npos) << gate.out;
  // The whole matrix at once: every backends.<seam> cell against the baseline cell, one decision each;
  // here the same runs and verdict as the gate above, so that decision stands and none is added.
  const auto matrix_gate = run_cli("gate --matrix tiny_cpu --db " + db);
  EXPECT_EQ(matrix_gate.rc, 0) << matrix_gate.out;
  EXPECT_NE(matrix_gate.out.find("gate loss / chunked: INCONCLUSIVE"), std::string::npos) << matrix_gate.out;
  EXPECT_NE(matrix_gate.out.find("(the same verdict on the same runs) already stored in"), std::string::npos) << matrix_gate.out;
  EXPECT_EQ(store.query("SELECT id FROM decisions WHERE seam = 'loss' AND backend = 'chunked'").size(), 1u);
  // One backend's flags with --matrix is a usage error (exit 2), as is giving neither form.
  EXPECT_EQ(run_cli("gate --matrix tiny_cpu --seam loss --db " + db).rc, 2);
  EXPECT_EQ(run_cli("gate --db " + db).rc, 2);

  const auto second = run_cli("matrix run " + kTinyMatrix + " --repeats 1 --db " + db);
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_NE(second.out.find("2 already ok, 0 to run"), std::string::npos) << second.out;
  EXPECT_EQ(store.list_runs().size(), 2u);
}

// SIGTERM to a running `ablate matrix run`: the runner forwards it to the run it started, which records
// itself killed, starts nothing new, waits for it, then dies of the same signal; no run stays running.
TEST_F(MatrixCli, ATerminatedRunnerEndsItsRunsAsKilled) {
  if (run_cli("run --help").rc != 0) GTEST_SKIP() << "this build has no `ablate run` (built without LibTorch)";
  const fs::path matrix = dir_ / "long.toml";
  std::ofstream(matrix) << "[matrix]\nname = \"long\"\nbase = \"" ABLATE_SOURCE_DIR "/experiments/tiny.toml\"\n"
                           "repeats = 2\n[set]\n\"train.steps\" = 1000000\n\"data.source\" = \"synthetic\"\n";
  const std::string db = (dir_ / "r.db").string();
  const auto r = ablate::testing::run_shell(
      "bash -c '" + std::string(ABLATE_BINARY_DIR) + "/ablate matrix run " + matrix.string() + " --db " + db +
      " --logs " + (dir_ / "logs").string() + " > " + (dir_ / "out.txt").string() +
      " 2>&1 & pid=$!; for i in $(seq 600); do [ -n \"$(ls " + (dir_ / "logs").string() +
      " 2>/dev/null)\" ] && grep -q \"step\" " + (dir_ / "logs").string() + "/*.log 2>/dev/null && break; sleep 0.1; done;"
      " kill -TERM $pid; wait $pid; echo rc=$?'");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;  // the runner died of SIGTERM
  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u) << "the second repeat must not start";
  EXPECT_EQ(runs.front().status, ablate::receipts::RunStatus::killed);
  EXPECT_EQ(store.get_run(runs.front().id).error, "killed by SIGTERM");
}

// Two `ablate matrix run` of one file at once share the work through their claims in the store: each
// (cell, repeat) runs once between them, every run ok, and each runner names what the other ran.
TEST_F(MatrixCli, ConcurrentRunnersRunEachPairOnce) {
  if (run_cli("run --help").rc != 0) GTEST_SKIP() << "this build has no `ablate run` (built without LibTorch)";
  const std::string db = (dir_ / "r.db").string();
  const std::string runner = "env ABLATE_GIT_REVISION=0123456789abcdef0123456789abcdef01234567 ABLATE_GIT_DIRTY=false " +
                             std::string(ABLATE_BINARY_DIR) + "/ablate matrix run " + kTinyMatrix + " --repeats 2 --db " + db +
                             " --logs " + (dir_ / "logs").string();
  const std::string a = (dir_ / "a.txt").string(), b = (dir_ / "b.txt").string();
  const auto r = ablate::testing::run_shell("bash -c '" + runner + " > " + a + " 2>&1 & pa=$!; " + runner + " > " + b +
                                            " 2>&1 & pb=$!; wait $pa; ra=$?; wait $pb; echo rc=$ra,$?'");
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string out_a = slurp(a), out_b = slurp(b);
  EXPECT_NE(r.out.find("rc=0,0"), std::string::npos) << r.out << out_a << out_b;

  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 4u) << out_a << out_b;
  ASSERT_TRUE(runs[0].matrix_id);
  std::multiset<std::string> pairs;
  for (const auto& c : store.matrix_cells(*runs[0].matrix_id)) {
    EXPECT_EQ(store.get_run(c.run_id).status, ablate::receipts::RunStatus::ok);
    pairs.insert(c.cell + " r" + std::to_string(c.repeat));
  }
  EXPECT_EQ(pairs, (std::multiset<std::string>{"baseline r0", "baseline r1", "backends.loss=chunked r0",
                                               "backends.loss=chunked r1"}));
  // Between them: 4 ok and 4 skipped (what the other one took or finished).
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(out_a + out_b, " r0 ok ") + count(out_a + out_b, " r1 ok "), 4u) << out_a << out_b;
  EXPECT_EQ(count(out_a + out_b, " skipped: "), 4u) << out_a << out_b;
}

// The convergence gate end to end on the CPU: a matrix over three seeds (one a repeat) with held-out
// evaluations, the loss seam's chunked backend against the reference. Chunked keeps the reference's
// numerics (the same cross-entropy over row chunks), so on the same seeds its validation loss is the
// reference's to a few ulps: convergence PASS, judged on 3 seeds a side, stored in the decision.
TEST_F(MatrixCli, ConvergenceIsJudgedOverSeedsWithHeldOutEvaluations) {
  if (run_cli("run --help").rc != 0) GTEST_SKIP() << "this build has no `ablate run` (built without LibTorch)";
  const fs::path matrix = dir_ / "seeds.toml";
  ablate::testing::write_corpus(dir_ / "corpus");  // /usr/include may hold too few documents to split
  std::ofstream(matrix) << "[matrix]\nname = \"seeds\"\nbase = \"" ABLATE_SOURCE_DIR "/experiments/tiny.toml\"\n"
                           "seeds = [11, 12, 13]\n[axes]\n\"backends.loss\" = [\"reference\", \"chunked\"]\n[set]\n"
                           "\"data.corpus_dir\" = \"" + (dir_ / "corpus").string() + "\"\n"
                           "\"train.steps\" = 6\n\"train.warmup_steps\" = 2\n\"train.eval_every\" = 3\n"
                           "\"train.eval_tokens\" = 512\n\"data.max_bytes\" = 300000\n\"train.log_every\" = 0\n"
                           "\"train.device\" = \"cpu\"\n";
  const std::string db = (dir_ / "r.db").string();
  const auto ran = ablate::testing::run_shell(
      "env ABLATE_GIT_REVISION=0123456789abcdef0123456789abcdef01234567 ABLATE_GIT_DIRTY=false " +
      std::string(ABLATE_BINARY_DIR) + "/ablate matrix run " + matrix.string() + " --db " + db + " --logs " +
      (dir_ / "logs").string());
  ASSERT_EQ(ran.rc, 0) << ran.out;
  const auto gate = run_cli("gate --matrix seeds --json --db " + db);
  ASSERT_EQ(gate.rc, 0) << gate.out;
  const auto verdicts = nlohmann::json::parse(gate.out.substr(gate.out.find_first_of("[{")));
  const auto& g = verdicts.is_array() ? verdicts[0] : verdicts;
  EXPECT_EQ(g["convergence"], "PASS") << g.dump(2);
  EXPECT_EQ(g["baseline_seeds"], 3);
  EXPECT_EQ(g["candidate_seeds"], 3);
  EXPECT_EQ(g["changes_numerics"], false);
  EXPECT_LT(g["validation_relative_difference"].get<double>(), 1e-4) << g.dump(2);
  auto store = ablate::receipts::Store::open(db);
  const auto decisions = store.list_decisions("loss", "chunked");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_NE(decisions[0].details.find("convergence PASS"), std::string::npos) << decisions[0].details;
}
