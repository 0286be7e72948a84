// tests/harness/cli_receipts_test.cpp: receipts that keep what happened, through the `ablate` binary as
// a user meets it: a run SIGKILLed during slow steps keeps its step rows (written by time, not only by
// count) and never counts as evidence; an empty spec file, an unknown --set section, a damaged store and
// a store that cannot be written are bad input (exit 2) with a message that says what and how to fix it,
// and the store file stays byte for byte as it was.
// Run: build/tests/harness_tests --gtest_filter='CliReceipts*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "base/sha256.h"
#include "receipts/store.h"
#include "base/temp_dir.h"
#include "tests/cli_runner.h"
#include "tests/corpus_folder.h"
#include "tests/small_disk.h"

namespace fs = std::filesystem;
using ablate::testing::run_cli;
using ablate::testing::run_shell;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

const std::string kTiny = std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml";
const std::string kExe = std::string(ABLATE_BINARY_DIR) + "/ablate";

class CliReceiptsTest : public ::testing::Test {
 protected:
  ablate::base::TempDir dir_{"ablate-cli-receipts"};
  // A short CPU run of tiny on 300 kB of the corpus, its cache in the test folder.
  std::string short_run(const std::string& db) const {
    return "run " + kTiny + " --db " + db + " -q --no-profile --set train.steps=2 --set train.warmup_steps=1" +
           " --set data.max_bytes=300000 --set 'data.cache_dir=\"" + dir_.file("cache") + "\"'" +
           " --set train.device=\"cpu\" --set train.log_every=0";
  }
  // The prefix that runs a command with permission bits enforced: "" for an ordinary user; as root,
  // setpriv without CAP_DAC_OVERRIDE (none when this machine cannot drop it: the caller skips).
  std::optional<std::string> as_ordinary_user() const {
    if (geteuid() != 0) return std::string();
    const std::string prefix = "setpriv --bounding-set=-dac_override,-dac_read_search ";
    const std::string probe = dir_.file("probe");
    std::ofstream(probe) << "x";
    fs::permissions(probe, fs::perms::owner_read);
    if (run_shell(prefix + "sh -c 'echo y >> " + probe + "'").rc == 0) return std::nullopt;
    return prefix;
  }
  // A store holding one finished run with 2,000 steps: many pages, so damage past page 1 is reachable.
  std::string make_store(const std::string& name) const {
    const std::string db = dir_.file(name);
    auto store = ablate::receipts::Store::open(db);
    ablate::receipts::RunStart start;
    start.name = "kept";
    start.spec_json = "{}";
    const auto id = store.begin_run(start);
    std::vector<ablate::receipts::StepRow> rows(2000);
    for (int i = 0; i < 2000; ++i) rows[i].step = i, rows[i].wall_ms = 10.0 + i % 7, rows[i].loss = 3.0;
    store.append_steps(id, rows);
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", {});
    return db;
  }
};

// A store problem is bad input (exit 2) with a message for a user: what, which file, how to fix, never
// SQL; and the file is byte for byte what it was (`before`: its sha256).
void expect_refused_untouched(const ablate::testing::CliResult& r, const std::string& db, const std::string& before,
                              const std::string& what, const std::string& fix) {
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(what)) << r.out;
  EXPECT_THAT(r.out, HasSubstr(fix)) << r.out;
  for (const char* sql : {"SELECT", "INSERT", "PRAGMA", "while running"}) EXPECT_THAT(r.out, Not(HasSubstr(sql))) << r.out;
  EXPECT_EQ(ablate::base::sha256_file(db), before) << db << ": the store was modified";
}

}  // namespace

// ---- issue 15 item 5: a killed run keeps its rows up to the last write ---------------------------

// Slow steps (a larger batch: well over 2 s / 64 steps each here) and SIGKILL, which no handler sees:
// rows reach the store by time before 64 steps have run, the kill keeps them, the run reads as
// abandoned once its heartbeat is stale, and it is not evidence.
TEST_F(CliReceiptsTest, ASigkilledRunKeepsItsStepRowsAndIsNotEvidence) {
  const std::string db = dir_.file("kill.db");
  const std::string cache = "data.cache_dir=\"" + dir_.file("cache") + "\"";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl(kExe.c_str(), kExe.c_str(), "run", kTiny.c_str(), "--db", db.c_str(), "-q", "--no-profile", "--set",
          "train.steps=100000", "--set", "data.max_bytes=300000", "--set", cache.c_str(), "--set", "train.device=\"cpu\"",
          "--set", "model.batch_size=32", "--set", "train.log_every=0", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the first rows in the store (at most 64 steps or 2 s after the first step).
  int64_t seen = 0;
  for (int i = 0; i < 1800 && seen == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!fs::exists(db)) continue;
    try {
      auto store = ablate::receipts::Store::open(db);
      seen = store.query("SELECT count(*) AS n FROM steps")[0]["n"].get<int64_t>();
    } catch (const std::exception&) {
    }
  }
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_GT(seen, 0) << "no step row reached the store in 180 s";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_LT(seen, 64) << "the first rows came by count, not by time: the steps were too fast to tell";

  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the heartbeat goes stale
  ablate::receipts::StoreOptions opts;
  opts.heartbeat_stale_s = 1.0;
  auto store = ablate::receipts::Store::open(db, opts);
  const auto runs = store.list_runs({});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, ablate::receipts::RunStatus::abandoned);
  EXPECT_FALSE(ablate::receipts::is_evidence(runs[0]));
  const auto steps = store.run_json(runs[0].id)["steps"];
  ASSERT_GE(static_cast<int64_t>(steps.size()), seen);  // nothing written is lost
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["step"], static_cast<int64_t>(i));
    EXPECT_TRUE(std::isfinite(steps[i]["loss"].get<double>()));
  }
}

// ---- item 6: an empty spec file is an error, never a run of the defaults -------------------------

TEST_F(CliReceiptsTest, AnEmptySpecFileIsRefusedWithExitTwoAndNothingIsWritten) {
  const std::string empty = dir_.file("empty.toml"), comments = dir_.file("comments.toml"), db = dir_.file("e.db");
  std::ofstream(empty).flush();
  std::ofstream(comments) << "# an experiment to come\n\n   \n# [train]\n";
  auto r = run_cli("run " + empty + " --db " + db + " -q");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(empty + ": error: the experiment file is empty (0 bytes)")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("experiments/tiny.toml")) << r.out;  // how to fix: what a file declares
  EXPECT_FALSE(fs::exists(db)) << "no run, no store";

  r = run_cli("run " + comments + " --db " + db + " -q");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr(comments + ": error: the experiment file declares nothing (only comments and whitespace)"))
      << r.out;
  EXPECT_FALSE(fs::exists(db));

  r = run_cli("validate " + empty);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the experiment file is empty (0 bytes)")) << r.out;
}

// ---- item 8: an unknown --set section is blamed on the --set ----------------------------------------

TEST_F(CliReceiptsTest, AnUnknownSetSectionIsBlamedOnTheSetArgumentAndItsPosition) {
  auto r = run_cli("validate " + kTiny + " --set train.steps=5 --set nosuch.key=1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--set nosuch.key=1: error: unknown section [nosuch]")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("it comes from --set argument 2 of 2, 'nosuch.key=1', not from " + kTiny)) << r.out;
  EXPECT_THAT(r.out, Not(ContainsRegex(kTiny + ":[0-9]+:[0-9]+: error"))) << r.out;  // no line of the file blamed
  // A sub-section the model does not have: the same, one level down.
  r = run_cli("validate " + kTiny + " --set model.nosuch.key=1");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--set model.nosuch.key=1: error: unknown key 'nosuch' in [model]")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--set argument 1 of 1")) << r.out;
  EXPECT_THAT(r.out, Not(ContainsRegex(kTiny + ":[0-9]+:[0-9]+: error"))) << r.out;
}

// ---- item 7: a damaged store, a store that cannot be written --------------------------------------

// Truncated (cut after its first page) and overwritten (garbage past the first page): `ablate run` and
// the reader `ablate runs` exit 2 saying the store is damaged and how to recover it; the file is as it was.
TEST_F(CliReceiptsTest, ADamagedStoreIsBadInputAndStaysUntouched) {
  const std::string truncated = make_store("truncated.db"), overwritten = make_store("overwritten.db");
  fs::resize_file(truncated, 4096 + 100);
  {
    std::fstream f(overwritten, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8192);
    const auto size = fs::file_size(overwritten);
    f << std::string(size - 8192, 'Z');
  }
  for (const auto& db : {truncated, overwritten}) {
    const std::string before = ablate::base::sha256_file(db);
    for (const std::string& command : {short_run(db), "runs --db " + db}) {
      SCOPED_TRACE(command);
      expect_refused_untouched(run_cli(command), db, before, "the receipt store '" + db + "' is damaged",
                               ".recover | sqlite3 recovered.db` and pass --db recovered.db; or pass another --db");
    }
  }
}

// A read-only store file, and a store in a read-only folder: `ablate run` exits 2 before writing and
// says how to fix it; the file is as it was. Readers still read both. As root (which
// ignores permission bits) the commands run without CAP_DAC_OVERRIDE through setpriv.
TEST_F(CliReceiptsTest, AStoreThatCannotBeWrittenIsBadInputAndStaysUntouched) {
  const auto user = as_ordinary_user();
  if (!user) GTEST_SKIP() << "running as root and setpriv cannot drop CAP_DAC_OVERRIDE here: read-only files are writable";
  const std::string& as_user = *user;
  const std::string ro_file = make_store("ro-file.db");
  fs::create_directories(dir_.path() / "ro-folder");
  const std::string in_ro_folder = make_store("ro-folder/store.db");
  fs::permissions(ro_file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  const auto folder_perms = fs::perms::owner_read | fs::perms::owner_exec;
  fs::permissions(dir_.path() / "ro-folder", folder_perms);

  for (const auto& db : {ro_file, in_ro_folder}) {
    const std::string before = ablate::base::sha256_file(db);
    SCOPED_TRACE(db);
    expect_refused_untouched(run_shell(as_user + kExe + " " + short_run(db)), db, before,
                             "cannot write the receipt store '" + db + "': the file or its folder is read-only",
                             "make the file and its folder writable, or pass --db with a writable path");
  }
  // Readers read both: the read-only file, and the store in a read-only folder (where WAL could not
  // create its files: an immutable snapshot, since no writer can write there either).
  for (const auto& db : {ro_file, in_ro_folder}) {
    SCOPED_TRACE(db);
    const std::string before = ablate::base::sha256_file(db);
    for (const std::string command : {" runs --db ", " show 1 --db ", " export --format json --db "}) {
      const auto r = run_shell(as_user + kExe + command + db);
      EXPECT_EQ(r.rc, 0) << command << r.out;
      EXPECT_THAT(r.out, HasSubstr("kept")) << command << r.out;
    }
    EXPECT_EQ(ablate::base::sha256_file(db), before);
  }
  fs::permissions(dir_.path() / "ro-folder", fs::perms::owner_all);  // so the TempDir can remove it
}

// train.eval_every: the validation loss on held-out documents after every N steps and after the last,
// each a row of `evaluations`; the last in the facts; the time charged to goodput's eval; the split in
// the data facts. On a generated corpus: /usr/include may hold too few documents to split.
TEST_F(CliReceiptsTest, EvaluationsOnHeldOutDocumentsAreRecorded) {
  const std::string db = dir_.file("eval.db"), corpus = dir_.file("corpus");
  ablate::testing::write_corpus(corpus);
  const auto r = run_shell(kExe + " " + short_run(db) + " --set train.steps=5 --set train.eval_every=2 --set train.eval_tokens=512" +
                           " --set 'data.corpus_dir=\"" + corpus + "\"'");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto store = ablate::receipts::Store::open(db);
  const auto doc = store.run_json(1);
  const auto& evals = doc["evaluations"];
  ASSERT_EQ(evals.size(), 3u) << doc.dump();  // after steps 2, 4 and the last, 5
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(evals[i]["step"], std::vector<int>({2, 4, 5})[i]);
    EXPECT_EQ(evals[i]["tokens"], 512);  // 4 rows of T = 128: the held-out documents have more
    EXPECT_TRUE(evals[i]["loss"].is_number()) << evals[i];
  }
  const auto& facts = doc["run"]["summary"]["facts"];
  EXPECT_EQ(facts["final_validation_loss"], evals[2]["loss"]);
  EXPECT_EQ(facts["final_validation_step"], 5);
  EXPECT_EQ(facts["data"]["validation_fraction"], 0.05);
  EXPECT_GT(facts["data"]["validation_documents"].get<int>(), 0);
  EXPECT_GT(doc["goodput"]["eval"].get<double>(), 0.0);
}

// A full disk is bad input with its remedy, not a raw "disk I/O error" (exit 1): opening a store whose
// disk cannot take the WAL's -shm file, and a run that cannot begin. A 4 MB tmpfs is the disk, so the
// test needs root and a kernel that lets it mount one (else skipped, saying so).
TEST_F(CliReceiptsTest, AFullDiskIsBadInputWithItsRemedy) {
  const std::string disk = dir_.file("small-disk");
  const ablate::testing::SmallDisk small(disk, 4096);
  if (!small.ready()) GTEST_SKIP() << small.why_not();
  const std::string db = disk + "/store.db";
  ASSERT_EQ(run_shell(kExe + " " + short_run(db)).rc, 0);
  small.fill();
  for (const std::string& command : {"runs --db " + db, short_run(db)}) {
    SCOPED_TRACE(command);
    const auto r = run_shell(kExe + " " + command);
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_THAT(r.out, HasSubstr("cannot write the receipt store '" + db + "': the disk holding it is full")) << r.out;
  }
  small.empty();
  const auto after = run_shell(kExe + " runs --db " + db);
  EXPECT_EQ(after.rc, 0) << after.out;  // space again: the store reads as before
}

// A disk that fills while a run trains: the run ends `failed` with the disk's reason and exit 2 (a full
// disk is the environment's fault, as before the run), never `running` or "ended without a result";
// the steps written before stay. Root only (the small tmpfs), else skipped.
TEST_F(CliReceiptsTest, ADiskThatFillsMidRunEndsTheRunFailedWithTheReason) {
  const std::string disk = dir_.file("small-disk");
  const ablate::testing::SmallDisk small(disk, 4096);
  if (!small.ready()) GTEST_SKIP() << small.why_not();
  const std::string db = disk + "/store.db", log = dir_.file("run.log");
  const auto r = run_shell("bash -c '" + kExe + " run " + kTiny + " --db " + db +
                           " --no-profile --set train.steps=1000000 --set train.log_every=1 --set train.device=\"cpu\""
                           " --set data.source=\"synthetic\" > " + log + " 2>&1 & pid=$!; for i in $(seq 600); do"
                           " grep -q \"step \" " + log + " && break; sleep 0.1; done; dd if=/dev/zero of=" + disk +
                           "/fill bs=4k 2>/dev/null; wait $pid; echo rc=$?'");
  small.empty();
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(r.out, HasSubstr("rc=2")) << out;
  auto store = ablate::receipts::Store::open(db);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  const auto run = store.get_run(runs[0].id);
  EXPECT_EQ(run.status, ablate::receipts::RunStatus::failed);
  EXPECT_THAT(run.error.value_or(""), HasSubstr("the disk holding it is full")) << out;
  EXPECT_FALSE(store.run_json(runs[0].id)["steps"].empty());
}

// An unreadable folder of the corpus is an error naming it, as an unreadable file is (never skipped,
// which would train on part of the named corpus); an unreadable corpus folder says so, not "no files".
TEST_F(CliReceiptsTest, AnUnreadableCorpusFolderIsNamed) {
  const auto user = as_ordinary_user();
  if (!user) GTEST_SKIP() << "running as root and setpriv cannot drop CAP_DAC_OVERRIDE here";
  const std::string corpus = dir_.file("corpus");
  fs::create_directories(corpus + "/readable");
  fs::create_directories(corpus + "/locked");
  std::ofstream(corpus + "/readable/a.h") << std::string(4000, 'a');
  std::ofstream(corpus + "/locked/b.h") << std::string(4000, 'b');
  const std::string db = dir_.file("corpus.db");
  const auto run_on = [&](const std::string& folder) {
    return run_shell(*user + kExe + " run " + kTiny + " --db " + db + " -q --set 'data.corpus_dir=\"" + folder +
                     "\"' --set 'data.cache_dir=\"" + dir_.file("cache") + "\"' --set train.steps=2 --set " +
                     "train.warmup_steps=1 --set model.seq_len=64");
  };
  fs::permissions(corpus + "/locked", fs::perms::none);
  const auto sub = run_on(corpus);
  EXPECT_EQ(sub.rc, 2) << sub.out;
  EXPECT_THAT(sub.out, HasSubstr("cannot read " + corpus + "/locked under data.corpus_dir " + corpus)) << sub.out;
  fs::permissions(corpus + "/locked", fs::perms::owner_all);
  fs::permissions(corpus, fs::perms::none);
  const auto root = run_on(corpus);
  EXPECT_EQ(root.rc, 2) << root.out;
  EXPECT_THAT(root.out, HasSubstr("cannot read data.corpus_dir " + corpus)) << root.out;
  fs::permissions(corpus, fs::perms::owner_all);  // so the TempDir can remove it
  EXPECT_FALSE(fs::exists(db)) << "bad data is refused before a run row exists";
}

// Checkpoints: resume verifies the newest one against its manifest (sizes and SHA-256 of its files, a
// sane state.json) and falls back to the newest intact one, saying which it skipped and why (stderr
// and the receipt); a run that writes checkpoints holds its folder's lock, so another run writing there
// is refused up front (exit 2); after each save the newest train.keep_checkpoints stay.
class CheckpointCliTest : public CliReceiptsTest {
 protected:
  std::string ckpt_ = dir_.file("ckpt");
  std::string db_ = dir_.file("ckpt.db");
  ablate::testing::CliResult run(const std::string& sets) {
    return run_shell(kExe + " run " + kTiny + " --db " + db_ + " -q --no-profile --set train.warmup_steps=1" +
                     " --set data.max_bytes=300000 --set 'data.cache_dir=\"" + dir_.file("cache") + "\"'" +
                     " --set 'train.checkpoint_dir=\"" + ckpt_ + "\"' --set train.log_every=0" + sets);
  }
  nlohmann::json newest_facts() {
    auto store = ablate::receipts::Store::open(db_);
    return store.run_json(store.list_runs().front().id)["run"]["summary"]["facts"];
  }
  std::vector<std::string> step_folders() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(ckpt_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(CheckpointCliTest, ResumeSkipsDamagedCheckpointsForTheNewestIntactOne) {
  ASSERT_EQ(run(" --set train.steps=10 --set train.checkpoint_every=3 --set train.keep_checkpoints=0").rc, 0);
  // step-3, step-6, step-9: damage the two newest, each its own way.
  fs::resize_file(ckpt_ + "/step-00000009/model.pt", 100);
  std::ofstream(ckpt_ + "/step-00000006/state.json") << "{\"next_step\": -5";
  const auto r = run(" --set train.steps=12 --set train.resume=true --set train.checkpoint_every=0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("skipped the checkpoint " + ckpt_ + "/step-00000009: model.pt is 100 bytes")) << r.out;
  const auto facts = newest_facts();
  EXPECT_EQ(facts["resumed_from"], ckpt_ + "/step-00000003") << facts.dump();
  EXPECT_EQ(facts["start_step"], 3);
  ASSERT_EQ(facts["checkpoints_skipped"].size(), 2u) << facts.dump();
  EXPECT_THAT(facts["checkpoints_skipped"][1].get<std::string>(), HasSubstr("step-00000006: state.json is malformed"));
  // A state.json that parses but holds nonsense is refused the same way.
  std::ofstream(ckpt_ + "/step-00000006/state.json") << "{\"next_step\": -5, \"data\": {}, \"model_hash\": \"x\", \"data_fingerprint\": \"y\"}";
  const auto again = run(" --set train.steps=12 --set train.resume=true --set train.checkpoint_every=0");
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("step-00000006: state.json says next_step -5")) << again.out;
}

TEST_F(CheckpointCliTest, OneWriterAFolderAndTheNewestKeptAfterEachSave) {
  fs::create_directories(ckpt_ + "/.step-00000099.tmp");  // a crashed save's leftovers
  ASSERT_EQ(run(" --set train.steps=12 --set train.checkpoint_every=2").rc, 0);
  // Saved after steps 2, 4, ..., 10; the newest 3 stay (train.keep_checkpoints defaults to 3).
  EXPECT_EQ(step_folders(), (std::vector<std::string>{".lock", "step-00000006", "step-00000008", "step-00000010"}));
  // Another writer holds the folder: refused before a run row exists.
  const int fd = ::open((ckpt_ + "/.lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const auto busy = run(" --set train.steps=12 --set train.checkpoint_every=2");
  ::close(fd);
  EXPECT_EQ(busy.rc, 2) << busy.out;
  EXPECT_THAT(busy.out, HasSubstr("the checkpoint folder " + ckpt_ + " is in use by another run")) << busy.out;
  EXPECT_EQ(ablate::receipts::Store::open(db_).list_runs().size(), 1u);
}
