// tests/receipts/lifecycle_test.cpp: RunLifecycle: heartbeats, finish, the exception path, and real
// signals delivered to forked child processes (SIGTERM/SIGINT/SIGHUP/SIGQUIT -> killed, SIGKILL ->
// abandoned once stale).
// Run: build-receipts/tests/receipts_tests --gtest_filter='Lifecycle*'
#include "receipts/lifecycle.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

#include "receipts/store.h"
#include "tests/receipts/test_util.h"
#include "tests/small_disk.h"

namespace ablate::receipts {
namespace {

using namespace std::chrono_literals;
using testing::Pipe;
using testing::ScopedEnv;

LifecycleOptions fast_heartbeat(double interval_s = 0.05) {
  LifecycleOptions options;
  options.heartbeat_interval_s = interval_s;
  return options;
}

bool termination_blocked() {
  sigset_t current;
  pthread_sigmask(SIG_BLOCK, nullptr, &current);
  return sigismember(&current, SIGTERM) == 1 && sigismember(&current, SIGINT) == 1;
}

class Lifecycle : public ::testing::Test {
 protected:
  base::TempDir dir_;
  std::string path_ = dir_.file("receipts.db");
  ScopedEnv no_interval_override_{"ABLATE_HEARTBEAT_S", std::nullopt};
  ScopedEnv no_stale_override_{"ABLATE_HEARTBEAT_STALE_S", std::nullopt};
};

TEST_F(Lifecycle, HeartbeatsThenFinishesOk) {
  auto store = Store::open(path_);
  const auto id = store.begin_run(testing::sample_start("lifecycle-ok"));
  const double first_beat = store.get_run(id).heartbeat_at;
  {
    RunLifecycle life(path_, id, fast_heartbeat());
    EXPECT_TRUE(termination_blocked());
    EXPECT_TRUE(testing::eventually([&] { return store.get_run(id).heartbeat_at > first_beat + 0.1; }, 3000ms));
    life.finish(RunStatus::ok, "", testing::sample_summary());
    EXPECT_TRUE(life.finished());
    EXPECT_FALSE(termination_blocked());  // the mask of this thread is restored
    EXPECT_THROW(life.finish(RunStatus::ok), StoreError);
  }
  const RunRow run = store.get_run(id);
  EXPECT_EQ(run.status, RunStatus::ok);
  EXPECT_EQ(run.summary.steps, 20);
}

TEST_F(Lifecycle, FinishFailedKeepsTheReason) {
  auto store = Store::open(path_);
  const auto id = store.begin_run(testing::sample_start("lifecycle-failed"));
  RunLifecycle life(path_, id, fast_heartbeat());
  EXPECT_THROW(life.finish(RunStatus::failed, ""), StoreError);
  EXPECT_THROW(life.finish(RunStatus::killed, "by hand"), StoreError);
  EXPECT_FALSE(life.finished());
  life.finish(RunStatus::failed, "loss diverged at step 12");
  EXPECT_EQ(store.get_run(id).status, RunStatus::failed);
  EXPECT_EQ(store.get_run(id).error, "loss diverged at step 12");
}

TEST_F(Lifecycle, UnwindingWithoutAResultMarksFailed) {
  auto store = Store::open(path_);
  const auto id = store.begin_run(testing::sample_start("lifecycle-throws"));
  try {
    RunLifecycle life(path_, id, fast_heartbeat());
    throw std::runtime_error("model build failed");
  } catch (const std::runtime_error&) {
  }
  const RunRow run = store.get_run(id);
  EXPECT_EQ(run.status, RunStatus::failed);
  EXPECT_EQ(run.error, "ended without a result");
  EXPECT_FALSE(termination_blocked());
}

// A disk that fills during a run: its end with the summary no longer fits, the smallest end does (the
// WAL's space is reused once checkpointed), so the run ends failed with its reason and the disk's,
// never `running` or "ended without a result". Needs root for the small tmpfs, else skipped.
TEST_F(Lifecycle, AFullDiskStillEndsTheRunWithItsReason) {
  const std::string disk = dir_.file("small-disk");
  const ::ablate::testing::SmallDisk small(disk, 512);
  if (!small.ready()) GTEST_SKIP() << small.why_not();
  const std::string path = disk + "/receipts.db";
  auto store = Store::open(path);
  const auto id = store.begin_run(testing::sample_start("fills-the-disk"));
  RunLifecycle life(path, id, fast_heartbeat());
  store.append_steps(id, testing::make_steps(200));
  testing::RawDb(path).exec_ok("PRAGMA wal_checkpoint(RESTART)");
  small.fill();
  RunSummary summary;
  summary.facts.resumed_from = std::string(1 << 20, 'x');  // 1 MiB of facts: more than the disk has left
  life.finish(RunStatus::failed, "loss diverged at step 12", summary);
  EXPECT_TRUE(life.finished());
  const RunRow run = store.get_run(id);
  EXPECT_EQ(run.status, RunStatus::failed);
  const std::string error = run.error.value_or("");
  EXPECT_EQ(error.rfind("loss diverged at step 12 (its summary could not be written: cannot write the receipt store", 0), 0u)
      << error;
  EXPECT_NE(error.find("the disk holding it is full"), std::string::npos) << error;
}

TEST_F(Lifecycle, RefusesUnknownOrFinishedRuns) {
  auto store = Store::open(path_);
  EXPECT_THROW(RunLifecycle(path_, 404, fast_heartbeat()), StoreError);
  const auto id = store.begin_run(testing::sample_start("done"));
  store.finish_run(id, RunStatus::ok, "", {});
  EXPECT_THROW(RunLifecycle(path_, id, fast_heartbeat()), StoreError);
  EXPECT_FALSE(termination_blocked());
}

TEST_F(Lifecycle, IntervalFromOptionOrEnvironment) {
  auto store = Store::open(path_);
  const auto id = store.begin_run(testing::sample_start("interval"));
  {
    RunLifecycle life(path_, id);
    EXPECT_EQ(life.heartbeat_interval_s(), 5.0);
    life.finish(RunStatus::ok);
  }
  const auto id2 = store.begin_run(testing::sample_start("interval-env"));
  {
    ScopedEnv env("ABLATE_HEARTBEAT_S", "0.25");
    RunLifecycle life(path_, id2, fast_heartbeat(3.0));
    EXPECT_EQ(life.heartbeat_interval_s(), 0.25);
    life.finish(RunStatus::ok);
  }
  ScopedEnv bad("ABLATE_HEARTBEAT_S", "-1");
  EXPECT_THROW(RunLifecycle(path_, store.begin_run(testing::sample_start("bad"))), base::InputError);
}

// A child process opens its own store, begins a run, holds a RunLifecycle and waits to be killed.
// It reports the run id, then "ready" once the lifecycle is armed.
struct Child {
  pid_t pid;
  std::int64_t run_id;
};

Child start_child(const std::string& path, const char* heartbeat_s) {
  Pipe pipe;
  const pid_t pid = testing::fork_child([&] {
    pipe.close_read();
    const rlimit no_core{0, 0};  // SIGQUIT's default action dumps core: not in the test's folder
    setrlimit(RLIMIT_CORE, &no_core);
    setenv("ABLATE_HEARTBEAT_S", heartbeat_s, 1);
    auto store = Store::open(path);
    const auto id = store.begin_run(testing::sample_start("child"));
    pipe.send_int64(id);
    RunLifecycle life(path, id);
    store.append_steps(id, testing::make_steps(5));
    pipe.send();
    while (true) std::this_thread::sleep_for(1s);
  });
  pipe.close_write();
  const std::int64_t run_id = pipe.receive_int64();
  if (!pipe.receive()) throw std::runtime_error("child died before arming its lifecycle");
  return {pid, run_id};
}

std::string signal_label(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "signal " + std::to_string(sig);
  }
}

class LifecycleSignal : public Lifecycle, public ::testing::WithParamInterface<int> {};

TEST_P(LifecycleSignal, ChildKilledBySignalReadsKilled) {
  const int sig = GetParam();
  const Child child = start_child(path_, "0.1");
  EXPECT_EQ(Store::open(path_).get_run(child.run_id).status, RunStatus::running);
  ASSERT_EQ(kill(child.pid, sig), 0);
  const int status = testing::wait_status(child.pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited normally with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), sig);  // re-raised: the conventional exit status survives

  auto store = Store::open(path_);
  const RunRow run = store.get_run(child.run_id);
  EXPECT_EQ(run.status, RunStatus::killed);
  EXPECT_EQ(run.error, "killed by " + signal_label(sig));
  EXPECT_TRUE(run.ended_at.has_value());
  EXPECT_EQ(store.run_json(child.run_id)["steps"].size(), 5u);  // evidence written before the kill stays
}

// A closed terminal or remote login (SIGHUP) and the quit key (SIGQUIT) end a run as ordinarily as ^C.
INSTANTIATE_TEST_SUITE_P(TerminationSignals, LifecycleSignal, ::testing::Values(SIGTERM, SIGINT, SIGHUP, SIGQUIT),
                         [](const auto& info) { return signal_label(info.param); });

TEST_F(Lifecycle, ChildKilledBySigkillReadsAbandonedOnceStale) {
  ScopedEnv stale("ABLATE_HEARTBEAT_STALE_S", "1");
  const Child child = start_child(path_, "0.1");
  auto store = Store::open(path_);
  ASSERT_EQ(store.heartbeat_stale_s(), 1.0);

  // Alive: heartbeats keep it `running` well past the stale limit.
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(store.get_run(child.run_id).status, RunStatus::running);

  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  const int status = testing::wait_status(child.pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(store.get_run(child.run_id).status, RunStatus::running);  // heartbeat still fresh

  EXPECT_TRUE(testing::eventually([&] { return store.get_run(child.run_id).status == RunStatus::abandoned; }, 5000ms));
  const RunRow run = store.get_run(child.run_id);
  EXPECT_EQ(run.stored_status, RunStatus::running);  // derived at read time, never written
  RunFilter abandoned;
  abandoned.status = "abandoned";
  ASSERT_EQ(store.list_runs(abandoned).size(), 1u);
  RunFilter running;
  running.status = "running";
  EXPECT_TRUE(store.list_runs(running).empty());
}

}  // namespace
}  // namespace ablate::receipts
