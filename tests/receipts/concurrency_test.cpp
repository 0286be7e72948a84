// tests/receipts/concurrency_test.cpp: many processes writing one store at once, as a matrix on several
// GPUs does: 8 forked processes x 50 complete runs, all starting on a fresh file at the same moment.
// Run: build-receipts/tests/receipts_tests --gtest_filter='Concurrency*'
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>

#include "receipts/schema.h"
#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using testing::Pipe;

constexpr int kProcesses = 8;
constexpr int kRunsEach = 50;
constexpr int kStepsEach = 20;

// Children wait on `go` so that they all open the fresh file (and migrate it) at the same moment.
std::vector<pid_t> start_writers(const std::string& path, Pipe& go) {
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcesses; ++p) {
    pids.push_back(testing::fork_child([&, p] {
      go.close_write();
      if (go.receive()) throw std::runtime_error("unexpected byte on the start pipe");  // EOF means go
      auto store = Store::open(path);
      for (int r = 0; r < kRunsEach; ++r) {
        const auto id = store.begin_run(testing::sample_start(fmt::format("writer{}-run{}", p, r), {"concurrency"}));
        store.append_steps(id, testing::make_steps(kStepsEach));
        store.record_goodput(id, {{"productive", 1.0}, {"startup", 0.5}});
        store.finish_run(id, RunStatus::ok, "", testing::sample_summary(kStepsEach));
      }
    }));
  }
  return pids;
}

std::int64_t count(Store& store, const std::string& sql) { return store.query(sql)[0]["n"].get<std::int64_t>(); }

// The race that matters most on a fresh file: switching it to WAL and migrating it, from many processes
// released at the same instant. Repeated on several files because the window is narrow.
TEST(Concurrency, ManyProcessesOpenAFreshFileAtOnce) {
  for (int round = 0; round < 5; ++round) {
    base::TempDir dir;
    const std::string path = dir.file("receipts.db");
    Pipe go;
    std::vector<pid_t> pids;
    for (int p = 0; p < 12; ++p) {
      pids.push_back(testing::fork_child([&] {
        go.close_write();
        go.receive();
        Store::open(path).begin_run(testing::sample_start("opener"));
      }));
    }
    go.close_both();
    for (pid_t pid : pids) {
      const int status = testing::wait_status(pid);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": opener failed";
    }
    auto store = Store::open(path);
    EXPECT_EQ(store.schema_version(), schema::latest_version());
    EXPECT_EQ(count(store, "SELECT count(*) AS n FROM runs"), 12);
  }
}

TEST(Concurrency, EightProcessesWriteFiftyRunsEachIntoAFreshFile) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  Pipe go;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<pid_t> pids = start_writers(path, go);
  go.close_both();  // EOF on every child's read end: go
  for (pid_t pid : pids) {
    const int status = testing::wait_status(pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer " << pid << " failed (stderr above)";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  RecordProperty("seconds", std::to_string(seconds));

  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  constexpr int kRuns = kProcesses * kRunsEach;
  EXPECT_EQ(count(store, "SELECT count(*) AS n FROM runs"), kRuns);
  EXPECT_EQ(count(store, "SELECT count(*) AS n FROM runs WHERE status = 'ok'"), kRuns);
  EXPECT_EQ(count(store, "SELECT count(DISTINCT name) AS n FROM runs"), kRuns);
  EXPECT_EQ(count(store, "SELECT count(DISTINCT pid) AS n FROM runs"), kProcesses);
  EXPECT_EQ(count(store, "SELECT count(*) AS n FROM steps"), kRuns * kStepsEach);
  EXPECT_EQ(count(store, "SELECT count(*) AS n FROM (SELECT run_id FROM steps GROUP BY run_id HAVING count(*) = 20)"),
            kRuns);
  EXPECT_EQ(count(store, "SELECT count(*) AS n FROM goodput"), kRuns * 2);
  EXPECT_EQ(store.query("SELECT integrity_check FROM pragma_integrity_check")[0]["integrity_check"], "ok");
  EXPECT_EQ(store.query("SELECT count(*) AS n FROM pragma_foreign_key_check")[0]["n"], 0);
  EXPECT_LT(seconds, 20.0) << "400 runs took far too long: lock contention?";
}

}  // namespace
}  // namespace ablate::receipts
