// tests/harness/cli_test.cpp: the `ablate` binary as a user meets it: exit codes (0 ok, 2 bad input),
// messages on stderr with file:line:column, help for every subcommand, runs/show over a store, the
// git revision override (ABLATE_GIT_REVISION) of `ablate run`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>

#include "base/remove_tree.h"
#include "receipts/schema.h"
#include "receipts/store.h"
#include "tests/cli_runner.h"

namespace fs = std::filesystem;

namespace {

using ablate::testing::run_cli;
using ablate::testing::run_shell;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ablate-cli-" + std::to_string(::getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ablate::base::remove_tree(dir_); }
  fs::path dir_;
};

}  // namespace

TEST_F(CliTest, HelpForEverySubcommand) {
  const auto top = run_cli("--help");
  EXPECT_EQ(top.rc, 0);
  for (const char* sub : {"validate", "runs", "show", "catalog"}) {
    EXPECT_NE(top.out.find(sub), std::string::npos) << sub;
    const auto h = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(h.rc, 0) << sub;
    EXPECT_NE(h.out.find("Usage"), std::string::npos) << sub;
  }
}

// Two executables (harness/cli/hand_off.cpp): `ablate` loads no LibTorch, lists every command as
// `ablate-train` does, and hands the training commands over with their arguments, so their help, messages
// and exit codes are ablate-train's.
TEST_F(CliTest, AblateLoadsNoLibTorchAndHandsTheTrainingCommandsOver) {
  const std::string ablate = std::string(ABLATE_BINARY_DIR) + "/ablate";
  const auto libs = run_shell("ldd " + ablate);
  ASSERT_EQ(libs.rc, 0) << libs.out;
  EXPECT_EQ(libs.out.find("libtorch"), std::string::npos) << libs.out;
  EXPECT_EQ(libs.out.find("libc10"), std::string::npos) << libs.out;
  EXPECT_NE(libs.out.find("libsqlite3"), std::string::npos) << libs.out;

  // The same listing, but for the executable's own name in the usage line.
  const auto own_help = run_cli("--help");
  auto train_help = run_shell(std::string(ABLATE_BINARY_DIR) + "/ablate-train --help");
  ASSERT_EQ(train_help.rc, 0);
  const std::string train_usage = "Usage: " + std::string(ABLATE_BINARY_DIR) + "/ablate-train ";
  ASSERT_NE(train_help.out.find(train_usage), std::string::npos) << train_help.out;
  train_help.out.replace(train_help.out.find(train_usage), train_usage.size(), "Usage: " + ablate + " ");
  EXPECT_EQ(own_help.out, train_help.out);
  for (const char* command : {"  catalog ", "  run ", "  launch ", "  runs ", "  site "})
    EXPECT_NE(own_help.out.find(command), std::string::npos) << command;

  // Handed over: ablate-train parses and answers, under the name it was called by.
  const auto run_help = run_cli("run --help");
  EXPECT_EQ(run_help.rc, 0);
  EXPECT_NE(run_help.out.find("Usage: " + ablate + " run [OPTIONS] [file]"), std::string::npos) << run_help.out;
  const auto bad = run_cli("--db " + (dir_ / "r.db").string() + " run " + (dir_ / "missing.toml").string());
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_NE(bad.out.find("missing.toml"), std::string::npos) << bad.out;
  EXPECT_FALSE(fs::exists(dir_ / "r.db"));
  // validate runs in ablate itself: the spec's backends come from the plain catalog, the same answer.
  const std::string experiments = std::string(ABLATE_SOURCE_DIR) + "/experiments/*.toml";
  const auto validated = run_cli("validate " + experiments);
  EXPECT_EQ(validated.rc, 0) << validated.out;
  EXPECT_EQ(validated.out, run_shell(std::string(ABLATE_BINARY_DIR) + "/ablate-train validate " + experiments).out);
  const auto catalog = run_cli("catalog --json");
  EXPECT_EQ(catalog.rc, 0) << catalog.out;
  EXPECT_NE(catalog.out.find("\"seam\": \"dense_gemm\""), std::string::npos) << catalog.out;
}

// A copy of `ablate` without its ablate-train beside it: the store commands work, a training command says
// what is missing and where, exit 2.
TEST_F(CliTest, WithoutAblateTrainBesideItATrainingCommandSaysWhatIsMissing) {
  const fs::path lone = dir_ / "ablate";
  fs::copy_file(std::string(ABLATE_BINARY_DIR) + "/ablate", lone);
  const auto valid = run_shell(lone.string() + " validate -q " + std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml");
  EXPECT_EQ(valid.rc, 0) << valid.out;
  for (const char* command : {"run", "launch --nproc 2 x.toml", "catalog"}) {
    const auto r = run_shell(lone.string() + " " + command);
    EXPECT_EQ(r.rc, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find("ablate: error: the training commands (catalog, run, launch) run in ablate-train"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find((dir_ / "ablate-train").string() + ": No such file or directory"), std::string::npos) << r.out;
  }
}

// A number option below its bound (or not a number) is exit 2 with what was given and what to give,
// not CLI11's "not in range 0.000000 to <DBL_MAX>".
TEST_F(CliTest, NumberOptionsBelowTheirBoundSayWhatToGive) {
  const auto limit = run_cli("runs --limit -1 --db " + (dir_ / "none.db").string());
  EXPECT_EQ(limit.rc, 2);
  EXPECT_NE(limit.out.find("ablate: --limit: -1 is below 0: give a number >= 0 (ablate runs --help lists the options)"),
            std::string::npos)
      << limit.out;
  const auto extra = run_cli("runs 8 --steps --db " + (dir_ / "none.db").string());
  EXPECT_EQ(extra.rc, 2);
  EXPECT_EQ(extra.out.rfind("ablate: ", 0), 0u) << "the parser's errors read as ablate's: " << extra.out;
  const auto window = run_cli("gate --matrix m --loss-window abc");
  EXPECT_EQ(window.rc, 2);
  EXPECT_NE(window.out.find("--loss-window: 'abc' is not a number: give a number >= 1"), std::string::npos) << window.out;
  const auto repeats = run_cli("matrix expand " + std::string(ABLATE_SOURCE_DIR) + "/ablations/tiny_cpu.toml --repeats 0");
  EXPECT_EQ(repeats.rc, 2);
  EXPECT_NE(repeats.out.find("--repeats: 0 is below 1: give a number >= 1"), std::string::npos) << repeats.out;
}

TEST_F(CliTest, ValidateUnknownKeyAtLineThreeExitsTwoAndNamesTheLine) {
  const fs::path f = dir_ / "bad.toml";
  std::ofstream(f) << "[train]\nsteps = 10\nstpes = 3\n";
  const auto r = run_cli("validate " + f.string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find(f.string() + ":3:1: error: unknown key 'stpes' in [train] (did you mean 'steps'?)"), std::string::npos)
      << r.out;
}

TEST_F(CliTest, ValidatePrintsCanonicalFormAndHash) {
  const auto r = run_cli("validate " + std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("# spec_hash "), std::string::npos);
  EXPECT_NE(r.out.find("\"pattern\": \"AEMR\""), std::string::npos);
}

// --version names the harness version and the receipt schema this binary writes, and exits 0 (a flag of
// its own: no command needed).
TEST_F(CliTest, VersionNamesTheHarnessAndItsReceiptSchema) {
  const auto v = run_cli("--version");
  EXPECT_EQ(v.rc, 0) << v.out;
  EXPECT_EQ(v.out.rfind("ablate ", 0), 0u) << v.out;
  EXPECT_NE(v.out.find("receipt schema " + std::to_string(ablate::receipts::schema::latest_version()) + ","), std::string::npos)
      << v.out;
  EXPECT_EQ(v.out.find("required"), std::string::npos) << "no command asked for: " << v.out;
}

TEST_F(CliTest, BadCommandLineExitsTwo) {
  const auto unknown = run_cli("frobnicate");
  EXPECT_EQ(unknown.rc, 2);
  // The unknown word is named, with the real commands (not only "a subcommand is required").
  EXPECT_NE(unknown.out.find("unknown command 'frobnicate'"), std::string::npos) << unknown.out;
  EXPECT_NE(unknown.out.find("validate, catalog, runs"), std::string::npos) << unknown.out;
  EXPECT_NE(run_cli("--db " + (dir_ / "r.db").string() + " frobnicate").out.find("unknown command 'frobnicate'"),
            std::string::npos);
  // An empty --db is refused, never read as ./receipts.db.
  const auto empty_db = run_cli("--db \"\" runs");
  EXPECT_EQ(empty_db.rc, 2) << empty_db.out;
  EXPECT_NE(empty_db.out.find("--db is empty"), std::string::npos) << empty_db.out;
  EXPECT_EQ(run_cli("validate /nonexistent.toml").rc, 2);
  EXPECT_EQ(run_cli("runs --status sideways --db " + (dir_ / "r.db").string()).rc, 2);  // no db yet: also 2
}

TEST_F(CliTest, RunsAndShowReadTheStore) {
  const std::string db = (dir_ / "r.db").string();
  {
    auto store = ablate::receipts::Store::open(db);
    ablate::receipts::RunStart s;
    s.name = "cli-demo";
    s.tags = {"t1"};
    s.spec_json = "{}";
    const auto id = store.begin_run(s);
    ablate::receipts::RunSummary sum;
    sum.steps = 5;
    sum.median_step_ms = 12.5;
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", sum);
    s.name = "a name longer than the column of twenty-four";
    store.finish_run(store.begin_run(s), ablate::receipts::RunStatus::ok, "", sum);
    // A run made with --set: its name and tags are the file's, so the list says what was changed.
    s.name = "cli-overridden";
    sum.facts.model = ablate::receipts::ModelFacts{};
    sum.facts.model->overrides = {"train.steps=3", "kernels.ssm_scan=\"fused_cuda\""};
    store.finish_run(store.begin_run(s), ablate::receipts::RunStatus::ok, "", sum);
  }
  auto r = run_cli("runs --db " + db);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("cli-demo"), std::string::npos);
  EXPECT_NE(r.out.find("12.50"), std::string::npos);
  EXPECT_NE(r.out.find("3 run(s) in "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a name longer than the ~"), std::string::npos) << "a cut name says it is cut: " << r.out;
  const auto overridden = r.out.find("cli-overridden");
  ASSERT_NE(overridden, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n       made with --set train.steps=3 --set kernels.ssm_scan=\"fused_cuda\"\n", overridden),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("made with", r.out.find("made with") + 1), std::string::npos) << "only under its row: " << r.out;
  r = run_cli("runs --limit 1 --db " + db);
  EXPECT_NE(r.out.find("1 run(s) shown, the newest in " + db + "; more may match (--limit 0 lists all)"), std::string::npos)
      << r.out;
  r = run_cli("runs --status failed --db " + db);
  EXPECT_NE(r.out.find("0 run(s)"), std::string::npos) << r.out;
  r = run_cli("show 1 --json --db " + db);
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("\"cli-demo\""), std::string::npos);
  r = run_cli("show 99 --db " + db);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("no run 99"), std::string::npos) << r.out;
  // ABLATE_DB is honoured when --db is absent.
  const fs::path missing = dir_ / "none.db";
  r = run_cli("runs --db " + missing.string());  // a query never creates a database
  EXPECT_EQ(r.rc, 2);
  EXPECT_FALSE(fs::exists(missing));
  r = run_shell("env ABLATE_DB=" + db + " " + std::string(ABLATE_BINARY_DIR) + "/ablate runs");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("cli-demo"), std::string::npos);
}

// SIGTERM to a running `ablate run` ends the run as `killed` in the store, and the process exits by
// the signal (the conventional status), not with a made-up code.
TEST_F(CliTest, SigtermDuringARunIsRecordedAsKilled) {
  const std::string db = (dir_ / "k.db").string();
  const std::string exe = std::string(ABLATE_BINARY_DIR) + "/ablate";
  const std::string spec = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";
  const std::string cache = "data.cache_dir=\"" + (dir_ / "cache").string() + "\"";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl(exe.c_str(), exe.c_str(), "run", spec.c_str(), "--db", db.c_str(), "-q", "--set", "train.steps=100000",
          "--set", "data.max_bytes=300000", "--set", cache.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until the run row exists (the run is past its validation and training).
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    usleep(100 * 1000);
    if (!fs::exists(db)) continue;
    try {
      auto store = ablate::receipts::Store::open(db);
      running = !store.list_runs({}).empty();
    } catch (const std::exception&) {
    }
  }
  ASSERT_TRUE(running) << "the run never started";
  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs({});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, ablate::receipts::RunStatus::killed);
  ASSERT_TRUE(runs[0].error.has_value());
  EXPECT_NE(runs[0].error->find("SIGTERM"), std::string::npos) << *runs[0].error;
}

// A topology the build cannot run is bad input: refused with exit 2 before the store is created, so
// no receipt claims two ranks for a one-process run.
TEST_F(CliTest, DistributedNprocOtherThanOneIsRefusedBeforeAnythingIsWritten) {
  const std::string db = (dir_ / "nproc.db").string();
  const auto r = run_cli("run " + std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml --db " + db +
                         " -q --set distributed.nproc=2");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("distributed.nproc = 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("set distributed.nproc = 1"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(db));
}

// Profiling enabled on a machine where CUPTI cannot trace (here: the CPU): the run still ends ok, and
// the receipt and `ablate show` say why profiling was unavailable. --no-profile records it as off.
TEST_F(CliTest, ProfiledRunOnTheCpuEndsOkAndSaysWhyProfilingWasUnavailable) {
  const std::string db = (dir_ / "p.db").string();
  const std::string spec = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";
  const std::string common = " --db " + db + " -q --set train.steps=6 --set train.warmup_steps=1 --set data.max_bytes=300000" +
                             " --set 'data.cache_dir=\"" + (dir_ / "cache").string() + "\"' --set train.device=\"cpu\"" +
                             " --set profile.enabled=true --set profile.start_step=2 --set profile.steps=2";
  auto r = run_cli("run " + spec + common);
  ASSERT_EQ(r.rc, 0) << r.out;
  r = run_cli("show 1 --db " + db);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("profiling: unavailable (no CUDA device"), std::string::npos) << r.out;
  // The run's sections a line an entry, not JSON blobs.
  EXPECT_NE(r.out.find("backends (seam: requested -> chosen, observed in the profile):\n  attention       reference -> "
                       "reference, observed -\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("goodput ledger (s): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  device = cpu\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("{\""), std::string::npos) << "no JSON in the text view: " << r.out;
  // Profiling was asked for and unavailable: the kernels view says that, not "enable it".
  r = run_cli("show 1 --kernels 5 --db " + db);
  EXPECT_NE(r.out.find("kernels: no profiled window on rank 0 (profiling unavailable (no CUDA device"), std::string::npos)
      << r.out;

  r = run_cli("run " + spec + common + " --no-profile");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto store = ablate::receipts::Store::open(db);
  const auto doc = store.run_json(2);
  ASSERT_EQ(doc["profile"]["windows"].size(), 1u);
  EXPECT_EQ(doc["profile"]["windows"][0]["status"], "off");
  EXPECT_NE(doc["env"]["profiling"].get<std::string>().find("--no-profile"), std::string::npos);
}

// ABLATE_GIT_REVISION / ABLATE_GIT_DIRTY (set by whoever starts a run on a machine whose checkout is
// stale) go into the receipt with their source; a malformed revision is bad input: exit 2, no database.
TEST_F(CliTest, RunRecordsTheGitRevisionOverrideAndRefusesAMalformedOne) {
  const std::string db = (dir_ / "g.db").string();
  const std::string spec = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";
  const std::string args = " run " + spec + " --db " + db + " -q --set train.steps=2 --set train.warmup_steps=1" +
                           " --set data.max_bytes=300000 --set 'data.cache_dir=\"" + (dir_ / "cache").string() + "\"'" +
                           " --set train.device=\"cpu\" --no-profile";
  const std::string exe = std::string(ABLATE_BINARY_DIR) + "/ablate";
  auto r = run_shell("env -u ABLATE_GIT_DIRTY ABLATE_GIT_REVISION=not-a-sha " + exe + args);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ABLATE_GIT_REVISION='not-a-sha' is not a git revision: expected 7 to 40 hex digits"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(db)) << "a refused run must not create the database";
  r = run_shell("env ABLATE_GIT_REVISION=0123456789abcdef0123456789abcdef01234567 ABLATE_GIT_DIRTY=yes " + exe + args);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ABLATE_GIT_DIRTY='yes': expected true or false"), std::string::npos) << r.out;

  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  r = run_shell("env ABLATE_GIT_REVISION=" + sha + " ABLATE_GIT_DIRTY=true " + exe + args);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto store = ablate::receipts::Store::open(db);
  const auto env = store.run_json(1)["env"];
  EXPECT_EQ(env["git_revision"], sha);
  EXPECT_EQ(env["git_dirty"], "true");
  EXPECT_EQ(env["git_revision_source"], "ABLATE_GIT_REVISION");
}

// `ablate show` gives a data-parallel run's shape, each traced rank's exposed communication and a MoE
// run's drops from the run's summary.
TEST_F(CliTest, ShowPrintsTheDataParallelShapeAndTheMoeRouter) {
  const std::string db = (dir_ / "dp.db").string();
  {
    auto store = ablate::receipts::Store::open(db);
    ablate::receipts::RunStart start;
    start.name = "dp-moe";
    start.spec_json = "{}";
    const auto id = store.begin_run(start);
    ablate::receipts::RunSummary summary;
    ablate::receipts::DistributedFacts d;
    d.world_size = 3;
    d.backend = "nccl";
    d.launcher = "torchrun";
    d.step_time_ratio = 1.0126;
    d.straggler_rank = 1;
    d.straggler_wait_share = 0.1234;
    d.comm_share = 0.0831;
    auto rank = [](int64_t r, double step_ms, double comm_ms) {
      ablate::receipts::RankFacts facts;  // by name: a positional RankFacts leaves its later members out
      facts.rank = r;
      facts.median_step_ms = step_ms;
      facts.median_comm_ms = comm_ms;
      return facts;
    };
    d.per_rank = {rank(0, 39.5, 7.9), rank(1, 39.6, 7.7), rank(2, 39.4, 7.8)};
    d.per_rank[0].median_comm_wait_ms = 0.1;
    d.per_rank[0].collective_wait_ms = 0.0;
    d.per_rank[0].peak_memory_bytes = 1 << 30;
    d.per_rank[0].median_reduce_scatter_ms = 5.28;
    d.per_rank[0].median_all_gather_ms = 2.63;
    d.per_rank[0].exposed_comm_share = 0.0214;
    d.per_rank[2].exposed_comm_share = 0.0387;  // rank 1's window did not trace: it shows nothing
    d.exposed_comm_share = 0.03005;
    d.exposed_by_collective.all_gather = 0.0201;
    d.exposed_by_collective.all_to_all = 0.0098;
    d.sharding = ablate::receipts::ShardingFacts{"optimizer", 20, 144'900'000, 0, 1'159'000'000, 1'159'000'000,
                                                 0, 0, 1'159'000'000, 1'159'000'000};
    d.sharding->param_dtype = "bf16";
    d.sharding->parameter_bytes = 869'000'000;
    d.sharding->expert_parallel = 3;
    summary.facts.distributed = d;
    summary.facts.moe = ablate::receipts::MoeFacts{4, 2, 1.25, 123, 10000, 0.0123, 1.0456};
    constexpr int64_t GiB = int64_t{1} << 30;
    summary.facts.memory = ablate::receipts::MemoryFacts{141 * GiB, 77 * GiB, 70 * GiB, GiB / 2, 70 * GiB + GiB / 2, true};
    summary.facts.model = ablate::receipts::ModelFacts{
        "nam56r-small", {"model.d_model=2048"}, true, "AEMEAEMEAEMR", 2048, 12, 4096, 8, 1'820'000'000, 900'000'000, 1e10};
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", summary);
  }
  const auto r = run_cli("show 1 --db " + db);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("model: nam56r-small (overridden by --set: its name no longer tells the shape)  pattern "
                       "AEMEAEMEAEMR  d_model 2048  12 layers  T 4096  batch 8 a rank  1.82 B parameters (900.0 M active)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("overrides: model.d_model=2048"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpu memory: needed 70.50 GiB of the device's 141.00 GiB (the allocator's reserved peak 70.00 GiB "
                       "+ 0.50 GiB beside it)  allocator capped at 77.00 GiB (train.memory_limit_gib)  expandable segments  (the rank that "
                       "needed most)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("sharding: optimizer  gradients reduced in fp32  GEMM weights in bf16  20 buckets  parameters kept 0.87 GB  "
                       "optimizer state 1.16 GB  gradients kept 1.16 GB  experts over 3 ranks\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("collectives a step (rank 0):  reduce-scatter 5.28 ms of 1.16 GB  all-gather 2.63 ms of 1.16 GB\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("data parallel: 3 ranks over nccl (torchrun)  straggler rank 1 (others waited 12.3% of the "
                       "step for it)  comm share 8.3%  comm wait share -"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("exposed communication (no other GPU work beside it, over the profile window): rank 0 2.1%  "
                       "rank 2 3.9%\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("exposed by collective (median of the ranks): all_gather 2.0%  all_to_all 1.0%\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("moe: 4 E layers, top-2, capacity factor 1.25  dropped 123 of 10000 slots (1.23%)  final aux "
                       "loss 1.0456\n  MFU counts the model's FLOPs for every routed slot; expert parallel at a capacity, "
                       "the 1.23% dropped slots' expert FLOPs were not computed\n"),
            std::string::npos)
      << r.out;
}

// `ablate show --kernels N`: the N kernels with the most GPU time a step in the profiled window (rank
// 0), summed over layers, per phase/block/seam; a run without a window says so.
TEST_F(CliTest, ShowKernelsListsTheTopKernelsOfTheProfiledWindowPerStep) {
  const std::string db = (dir_ / "k.db").string();
  {
    auto store = ablate::receipts::Store::open(db);
    ablate::receipts::RunStart start;
    start.name = "profiled";
    start.spec_json = "{}";
    const auto id = store.begin_run(start);
    ablate::receipts::ProfileWindowRow window;
    window.status = "ok";
    window.start_step = 20;
    window.steps = 5;
    store.record_profile_window(id, window);
    // The scan's backward chunk in two M layers (summed: 2 x 5 calls, 37.5 ms over 5 steps), a GEMM
    // outside any seam, and rank 1's row (not counted).
    store.record_kernel_attribution(
        id, {{0, "ablate_ssm_scan_bwd_chunk<__nv_bfloat16, float>", "backward", 2, "M", "ssm_scan", "fused_cuda",
              "ssm_scan", 5, 18'750'000},
             {0, "ablate_ssm_scan_bwd_chunk<__nv_bfloat16, float>", "backward", 6, "M", "ssm_scan", "fused_cuda",
              "ssm_scan", 5, 18'750'000},
             {0, "nvjet_sm90_gemm", "forward", 1, "A", "", "", "gemm", 10, 2'500'000},
             {1, "nvjet_sm90_gemm", "forward", 1, "A", "", "", "gemm", 10, 99'000'000}});
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", {});
    const auto bare = store.begin_run(start);
    store.finish_run(bare, ablate::receipts::RunStatus::ok, "", {});
  }
  const auto r = run_cli("show 1 --kernels 5 --db " + db);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("kernels: top 2 of 8.00 ms of GPU time a step (5 profiled steps, rank 0)"), std::string::npos)
      << r.out;
  const auto scan = r.out.find("7.500      2.0  backward   M      ssm_scan[fused_cuda]");
  const auto gemm = r.out.find("0.500      2.0  forward    A      -");
  EXPECT_NE(scan, std::string::npos) << r.out;
  EXPECT_NE(gemm, std::string::npos) << r.out;
  EXPECT_LT(scan, gemm) << "largest first";
  EXPECT_NE(run_cli("show 2 --kernels 5 --db " + db).out.find("kernels: no profiled window"), std::string::npos);
  EXPECT_EQ(run_cli("show 1 --kernels -1 --db " + db).rc, 2);
}

// `ablate show` names a seam whose kernels contradict its chosen backend, with the evidence kernels.
TEST_F(CliTest, ShowPrintsBackendMismatchesWithTheirKernelsAndTheGraphPosture) {
  const std::string db = (dir_ / "m.db").string();
  {
    auto store = ablate::receipts::Store::open(db);
    ablate::receipts::RunStart start;
    start.name = "mismatch";
    start.spec_json = "{}";
    const auto id = store.begin_run(start);
    store.record_backends(id, {{"residual_norm", "fused_cuda", "fused_cuda", "reference", "requested backend is available", true},
                               {"attention", "sdpa_flash", "sdpa_flash", "sdpa_flash", "requested backend is available", false}});
    store.record_backend_evidence(id, {{"residual_norm", "vectorized_elementwise_kernel<4, AddFunctor>", "", 24, 9000},
                                       {"attention", "flash_fwd_kernel", "sdpa_flash", 8, 5000}});
    store.record_env(id, {{"profiling", "ok"},
                          {"compile.cuda_graphs_requested", "true"},
                          {"compile.cuda_graphs_achieved", "false"},
                          {"compile.cuda_graphs_reason", "capture failed at step 3: operation not permitted"}});
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", {});
  }
  const auto r = run_cli("show 1 --db " + db);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("profiling: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda graphs: not achieved (capture failed at step 3: operation not permitted)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("backend mismatch: seam residual_norm chose fused_cuda but observed reference; kernels: "
                       "vectorized_elementwise_kernel<4, AddFunctor> (no backend's pattern)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("backend mismatch: seam attention"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("launch ahead:"), std::string::npos) << r.out;  // no replays: no such line
}

// `ablate show` says whether replayed steps were launched ahead, and how many; nothing for a run whose
// receipt predates the key.
TEST_F(CliTest, ShowPrintsLaunchAheadWhereAGraphWasReplayed) {
  const std::string db = (dir_ / "la.db").string();
  {
    auto store = ablate::receipts::Store::open(db);
    for (const auto& [name, ahead, steps] : {std::tuple{"on", "true", "55"}, std::tuple{"off", "false", "0"},
                                             std::tuple{"older", "", ""}}) {
      ablate::receipts::RunStart start;
      start.name = name;
      start.spec_json = "{}";
      const auto id = store.begin_run(start);
      std::map<std::string, std::string> env = {{"compile.cuda_graphs_requested", "true"},
                                                {"compile.cuda_graphs_achieved", "true"},
                                                {"compile.cuda_graphs_reason", "captured at step 3"}};
      if (*ahead) env.insert({{"compile.launch_ahead", ahead}, {"compile.launched_ahead_steps", steps}});
      store.record_env(id, env);
      store.finish_run(id, ablate::receipts::RunStatus::ok, "", {});
    }
  }
  EXPECT_NE(run_cli("show 1 --db " + db).out.find("launch ahead: on, 55 replayed steps queued before the previous step's read"),
            std::string::npos);
  EXPECT_NE(run_cli("show 2 --db " + db).out.find("launch ahead: off"), std::string::npos);
  const auto older = run_cli("show 3 --db " + db);
  EXPECT_NE(older.out.find("cuda graphs: achieved (captured at step 3)"), std::string::npos) << older.out;
  EXPECT_EQ(older.out.find("launch ahead:"), std::string::npos) << older.out;
}

// Every environment input of `ablate run` is read before a run row exists: a malformed one is exit 2
// naming the variable, and no store is created.
TEST_F(CliTest, AMalformedEnvironmentIsExitTwoBeforeARunExists) {
  const std::string db = (dir_ / "env.db").string();
  const std::string tiny = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";
  for (const std::string env : {"ABLATE_HEARTBEAT_S=abc", "ABLATE_MATRIX_ID=abc",
                                "ABLATE_MATRIX_ID=99999999999999999999999", "ABLATE_MATRIX_ID=7 ABLATE_MATRIX_REPEAT=-1"}) {
    SCOPED_TRACE(env);
    const auto r = run_shell(env + " " + std::string(ABLATE_BINARY_DIR) + "/ablate --db " + db + " run " + tiny);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("environment variable " + env.substr(env.rfind(' ') + 1, env.rfind('=') - env.rfind(' ') - 1)),
              std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(db)) << "a run row was begun";
  }
}

// A closed output (`| head`) loses the progress lines, not the run: it ends ok with every step.
TEST_F(CliTest, AClosedOutputLosesTheProgressNotTheRun) {
  const std::string db = (dir_ / "pipe.db").string();
  const auto r = run_shell("bash -c '" + std::string(ABLATE_BINARY_DIR) + "/ablate --db " + db + " run " +
                           ABLATE_SOURCE_DIR + "/experiments/tiny.toml --set train.log_every=1 --set train.steps=30 "
                           "| head -1; exit ${PIPESTATUS[0]}'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("the progress output is lost"), std::string::npos) << r.out;
  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs.front().status, ablate::receipts::RunStatus::ok);
  EXPECT_EQ(store.run_json(runs.front().id)["steps"].size(), 30u);
}

// Redirected to a file, each progress line is there as soon as it is printed: a SIGTERM keeps them,
// the run reads killed, and its last line says so.
TEST_F(CliTest, ProgressLinesSurviveAKillWhenRedirected) {
  const std::string db = (dir_ / "term.db").string(), out = (dir_ / "out.txt").string();
  const auto r = run_shell("bash -c '" + std::string(ABLATE_BINARY_DIR) + "/ablate --db " + db + " run " +
                           ABLATE_SOURCE_DIR + "/experiments/tiny.toml --set train.log_every=1 --set train.steps=1000000 > " +
                           out + " 2>&1 & pid=$!; for i in $(seq 600); do grep -q \"step \" " + out +
                           " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo rc=$?'");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;  // died of SIGTERM, re-raised
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("run 1: tiny"), std::string::npos) << text;
  EXPECT_NE(text.find("  step     0/1000000"), std::string::npos) << text;
  EXPECT_NE(text.find("ablate: run 1 killed by SIGTERM: recorded as killed in " + db + " (not evidence)"), std::string::npos)
      << text;  // the receipt's end is confirmed, not left to a look at the store
  auto store = ablate::receipts::Store::open(db);
  EXPECT_EQ(store.get_run(1).status, ablate::receipts::RunStatus::killed);
}

// Output that cannot be written is never a silent success nor an abort: a full stdout or stderr is
// exit 2 (not 0, not 1, not SIGABRT), whether the write fails at exit's flush (buffered) or inside the
// command (unbuffered by stdbuf -o0, as an output longer than the buffer does), and an output path that
// is a folder is exit 2.
TEST_F(CliTest, OutputThatCannotBeWrittenIsExitTwo) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  const std::string db = (dir_ / "out.db").string();
  ASSERT_EQ(run_cli("--db " + db + " run " + std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml -q --set train.steps=6"
                    " --set train.warmup_steps=2").rc,
            0);
  const std::string A = std::string(ABLATE_BINARY_DIR) + "/ablate --db " + db;
  for (const std::string buffering : {"", "stdbuf -o0 "})
    for (const std::string command : {"runs", "show 1", "export --format csv --what steps"}) {
      SCOPED_TRACE(buffering + command);
      const auto full = run_shell("(" + buffering + A + " " + command + " > /dev/full)");  // stderr still to the test
      EXPECT_EQ(full.rc, 2) << full.out;
      EXPECT_NE(full.out.find("the output could not be written"), std::string::npos) << full.out;
    }
  const auto errors_lost = run_shell(A + " validate " + std::string(ABLATE_SOURCE_DIR) +
                                     "/tests/fixtures/specs/bad/wrong_type.toml 2>/dev/full");
  EXPECT_EQ(errors_lost.rc, 2) << errors_lost.out;
  const auto folder = run_shell(A + " export --format csv --out " + dir_.string());
  EXPECT_EQ(folder.rc, 2) << folder.out;
  EXPECT_NE(folder.out.find("it is a folder"), std::string::npos) << folder.out;
}
