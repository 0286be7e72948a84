// tests/receipts/store_test.cpp: the write API: begin/finish, append-only enforcement (API and SQL
// triggers), batching, validation messages, upserts, artifacts, matrices and decisions.
// Run: build-receipts/tests/receipts_tests --gtest_filter='Store*'
#include "receipts/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "base/clock.h"
#include "base/host.h"
#include "base/sha256.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using testing::make_steps;
using testing::RawDb;
using testing::sample_start;
using testing::sample_summary;

class StoreTest : public ::testing::Test {
 protected:
  base::TempDir dir_;
  std::string path_ = dir_.file("receipts.db");
  Store store_ = Store::open(path_);

  std::int64_t finished_run() {
    const auto id = store_.begin_run(sample_start("done"));
    store_.append_steps(id, make_steps(3));
    store_.finish_run(id, RunStatus::ok, "", sample_summary(3));
    return id;
  }
  std::int64_t step_count(std::int64_t run_id) {
    return store_.query("SELECT count(*) AS n FROM steps WHERE run_id = ?", {run_id})[0]["n"].get<std::int64_t>();
  }
};

// Runs `fn`, expecting bad-input error (a StoreError, or the base::InputError of a bad environment
// variable) whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an InputError containing '" << parts.front() << "'";
  } catch (const base::InputError& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_F(StoreTest, BeginRunRecordsIdentityAndStartsRunning) {
  const double before = base::unix_now();
  const auto id = store_.begin_run(sample_start("baseline", {"nightly", "h100"}));
  const RunRow run = store_.get_run(id);
  EXPECT_EQ(run.name, "baseline");
  EXPECT_EQ(run.status, RunStatus::running);
  EXPECT_EQ(run.tags, (std::vector<std::string>{"nightly", "h100"}));
  EXPECT_EQ(run.lane, "tiny-AMEM/1gpu/reference");
  EXPECT_EQ(run.spec_hash, base::sha256_hex(sample_start("x").spec_json));  // default: hash of the canonical JSON
  EXPECT_EQ(run.pid, getpid());
  EXPECT_FALSE(run.host.empty());
  EXPECT_GE(run.started_at, before - 1e-3);
  EXPECT_EQ(run.heartbeat_at, run.started_at);
  EXPECT_FALSE(run.ended_at.has_value());
  const auto doc = store_.run_json(id);
  EXPECT_EQ(doc["env"]["cuda_runtime"], "12.4");
  EXPECT_EQ(doc["spec"]["source_path"], "experiments/tiny.toml");
}

TEST_F(StoreTest, FinishOkStoresTheSummary) {
  const auto id = store_.begin_run(sample_start("ok-run"));
  store_.append_steps(id, make_steps(20));
  store_.finish_run(id, RunStatus::ok, "", sample_summary(20));
  const RunRow run = store_.get_run(id);
  EXPECT_EQ(run.status, RunStatus::ok);
  ASSERT_TRUE(run.ended_at.has_value());
  EXPECT_GE(*run.ended_at, run.started_at);
  EXPECT_FALSE(run.error.has_value());
  EXPECT_EQ(run.summary.steps, 20);
  EXPECT_EQ(run.summary.median_step_ms, 104.5);
  EXPECT_EQ(run.summary.tokens_per_s, 78392.3);
  EXPECT_FALSE(run.summary.mfu.has_value());
  EXPECT_EQ(run.summary.peak_memory_bytes, std::int64_t{1} << 31);
  EXPECT_EQ(run.summary.facts.warmup_steps, 2);
  EXPECT_TRUE(is_evidence(run));
}

TEST_F(StoreTest, FinishFailedNeedsAndKeepsTheReason) {
  const auto id = store_.begin_run(sample_start("oom"));
  expect_error([&] { store_.finish_run(id, RunStatus::failed, "", {}); }, {"needs an error message"});
  expect_error([&] { store_.finish_run(id, RunStatus::running, "", {}); }, {"only as ok, failed or killed"});
  expect_error([&] { store_.finish_run(id, RunStatus::abandoned, "x", {}); }, {"only as ok, failed or killed"});
  store_.finish_run(id, RunStatus::failed, "CUDA out of memory at step 3", {});
  const RunRow run = store_.get_run(id);
  EXPECT_EQ(run.status, RunStatus::failed);
  EXPECT_EQ(run.error, "CUDA out of memory at step 3");
  EXPECT_FALSE(is_evidence(run));
}

TEST_F(StoreTest, OkWithoutRequiredFieldsIsNotEvidence) {
  const auto id = store_.begin_run(sample_start("partial"));
  RunSummary summary = sample_summary();
  summary.tokens_per_s.reset();
  store_.finish_run(id, RunStatus::ok, "", summary);
  EXPECT_FALSE(is_evidence(store_.get_run(id)));
  EXPECT_FALSE(store_.run_json(id)["run"]["evidence"].get<bool>());
}

TEST_F(StoreTest, FinishedRunRefusesEveryWriteButAnnotate) {
  const auto id = finished_run();
  expect_error([&] { store_.append_steps(id, make_steps(1, 100)); },
               {"record steps for run", "append-only", "annotate"});
  expect_error([&] { store_.heartbeat(id); }, {"append-only"});
  expect_error([&] { store_.finish_run(id, RunStatus::failed, "again", {}); }, {"finished (ok)"});
  expect_error([&] { store_.record_goodput(id, {{"productive", 1.0}}); }, {"append-only"});
  expect_error([&] { store_.record_backends(id, {{"rope", "fused", "fused", {}, "", {}}}); }, {"append-only"});
  expect_error([&] { store_.record_catalog(id, {{"rope", "fused", "keep", {}, {}}}); }, {"append-only"});
  expect_error([&] { store_.record_memory(id, {{1, 0, "forward", 1, 2, 3, 0, 0, 0.1}}); }, {"append-only"});
  expect_error([&] { store_.record_kernels(id, {{"k", "gemm", "swiglu", 0, 1, 10}}); }, {"append-only"});
  expect_error([&] { store_.record_env(id, {{"late", "fact"}}); }, {"append-only"});
  expect_error([&] { store_.flag_outliers(id, 0, {1}); }, {"append-only"});
  const std::string file = dir_.file("trace.json");
  testing::write_file(file, "{}");
  expect_error([&] { store_.add_artifact(id, "trace", file); }, {"append-only"});
  EXPECT_EQ(step_count(id), 3);

  store_.annotate(id, "rerun with cudnn 9.1");
  store_.annotate(id, "second note");
  const auto notes = store_.run_json(id)["annotations"];
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0]["text"], "rerun with cudnn 9.1");
  expect_error([&] { store_.annotate(id, "  \n"); }, {"needs some text"});
  expect_error([&] { store_.annotate(4242, "note"); }, {"no run 4242 in " + path_});
}

// The triggers hold even for code that bypasses the Store API.
TEST_F(StoreTest, SqlTriggersKeepFinishedRunsAppendOnly) {
  const auto done = finished_run();
  const auto live = store_.begin_run(sample_start("live"));
  store_.annotate(done, "note");
  RawDb raw(path_);
  auto expect_refused = [&](const std::string& sql) {
    EXPECT_NE(raw.exec(sql).find("append-only"), std::string::npos) << sql;
  };
  expect_refused(fmt::format("UPDATE runs SET status = 'failed', error = 'x' WHERE id = {}", done));
  expect_refused(fmt::format("UPDATE runs SET median_step_ms = 1 WHERE id = {}", done));
  expect_refused(fmt::format("DELETE FROM runs WHERE id = {}", done));
  expect_refused(fmt::format("DELETE FROM runs WHERE id = {}", live));
  expect_refused(fmt::format("UPDATE runs SET name = 'renamed' WHERE id = {}", live));
  expect_refused(fmt::format("INSERT INTO steps (run_id, step, wall_ms) VALUES ({}, 50, 1.0)", done));
  expect_refused(fmt::format("UPDATE steps SET wall_ms = 1 WHERE run_id = {}", done));
  expect_refused(fmt::format("DELETE FROM steps WHERE run_id = {}", done));
  expect_refused(fmt::format("INSERT INTO goodput VALUES ({}, 'eval', 1.0)", done));
  expect_refused(fmt::format("DELETE FROM run_env WHERE run_id = {}", done));
  expect_refused(fmt::format("UPDATE run_spec SET spec_hash = 'x' WHERE run_id = {}", done));
  expect_refused("UPDATE annotations SET text = 'rewritten'");
  expect_refused("DELETE FROM annotations");
  // While running, evidence may still be written (that is how the runner works).
  EXPECT_EQ(raw.exec(fmt::format("INSERT INTO steps (run_id, step, wall_ms) VALUES ({}, 0, 1.0)", live)), "");
  expect_refused(fmt::format("UPDATE steps SET run_id = {} WHERE run_id = {}", done, live));  // moving into it
  EXPECT_EQ(step_count(done), 3);
  EXPECT_EQ(store_.get_run(done).status, RunStatus::ok);
}

// Schema v3: profiling evidence is written while the run is running, read back under run_json's
// "profile", validated on the way in, and frozen like every other child table once the run ends.
TEST_F(StoreTest, ProfilingEvidenceRoundTripAndIsAppendOnly) {
  const auto id = store_.begin_run(sample_start("profiled"));
  ProfileWindowRow window;
  window.status = "ok";
  window.start_step = 20;
  window.steps = 5;
  window.dropped_records = 0;
  window.window_ns = 1000;
  window.compute_ns = 700;
  window.non_compute_ns = 100;
  window.idle_ns = 200;
  window.communication_ns = 300;
  window.exposed_communication_ns = 50;
  store_.record_profile_window(id, window);
  store_.record_profile_time(id, {{0, 20, "family", "gemm", 4, 600}, {0, 20, "seam", "attention", 2, 300}});
  store_.record_kernel_attribution(
      id, {{0, "flash_fwd_kernel", "forward", 3, "A", "attention", "sdpa_flash", "attention", 2, 300}});
  store_.record_backend_evidence(id, {{"attention", "flash_fwd_kernel", "sdpa_flash", 2, 300}});

  expect_error([&] { store_.record_profile_window(id, window); }, {"already has a profile window"});
  ProfileWindowRow silent;
  silent.status = "unavailable";
  expect_error([&] { store_.record_profile_window(id, silent); }, {"needs a reason"});
  silent.status = "maybe";
  expect_error([&] { store_.record_profile_window(id, silent); }, {"unknown profile window status 'maybe'"});
  expect_error([&] { store_.record_profile_time(id, {{0, 20, "layer", "3", 1, 1}}); }, {"profile time dimension"});

  store_.finish_run(id, RunStatus::ok, "", sample_summary(3));
  const auto profile = store_.run_json(id)["profile"];
  EXPECT_EQ(profile["windows"][0]["compute_ns"], 700);
  EXPECT_EQ(profile["windows"][0]["communication_ns"], 300);
  EXPECT_EQ(profile["windows"][0]["exposed_communication_ns"], 50);
  ASSERT_EQ(profile["time"].size(), 2u);
  EXPECT_EQ(profile["time"][0]["key"], "gemm");  // ordered by dimension: family before seam
  EXPECT_EQ(profile["time"][1]["dimension"], "seam");
  EXPECT_EQ(profile["attribution"][0]["block"], "A");
  EXPECT_EQ(profile["backend_evidence"][0]["matches"], "sdpa_flash");

  expect_error([&] { store_.record_backend_evidence(id, {{"rope", "k", "", 1, 1}}); }, {"append-only"});
  expect_error([&] { store_.record_profile_time(id, {{0, 21, "family", "gemm", 1, 1}}); }, {"append-only"});
  RawDb raw(path_);
  EXPECT_NE(raw.exec(fmt::format("DELETE FROM kernel_attribution WHERE run_id = {}", id)).find("append-only"),
            std::string::npos);
}

TEST_F(StoreTest, StepBatchIsOneTransaction) {
  const auto id = store_.begin_run(sample_start("steps"));
  store_.append_steps(id, make_steps(10));
  auto batch = make_steps(10, 10);
  batch.push_back(make_steps(1, 5)[0]);  // duplicate of an existing step: the whole batch must roll back
  expect_error([&] { store_.append_steps(id, batch); }, {"already has step 5 of rank 0"});
  EXPECT_EQ(step_count(id), 10);
  store_.append_steps(id, make_steps(10, 10));
  store_.append_steps(id, make_steps(20, 0, /*rank=*/1));  // other ranks have their own step numbers
  EXPECT_EQ(step_count(id), 40);
  store_.append_steps(id, {});
  EXPECT_EQ(step_count(id), 40);
}

TEST_F(StoreTest, BadInputGetsClearMessages) {
  const auto id = store_.begin_run(sample_start("bad-input"));
  auto steps = make_steps(1);
  steps[0].wall_ms = std::nan("");
  expect_error([&] { store_.append_steps(id, steps); }, {"wall_ms", "finite"});
  steps[0].wall_ms = 1;
  steps[0].step = -1;
  expect_error([&] { store_.append_steps(id, steps); }, {">= 0"});
  expect_error([&] { store_.append_steps(77, make_steps(1)); }, {"no run 77 in " + path_});
  expect_error(
      [&] {
        store_.record_goodput(id, {{"coffee", 1.0}});
      },
      {"unknown goodput category 'coffee'", "productive"});
  expect_error([&] { store_.record_goodput(id, {{"eval", -1.0}}); }, {"eval", ">= 0"});
  expect_error(
      [&] {
        store_.record_catalog(id, {{"rope", "fused", "maybe", {}, {}}});
      },
      {"catalog role", "borderline"});
  expect_error([&] { store_.begin_run(RunStart{}); }, {"needs a name"});
  RunStart bad_spec = sample_start("bad-spec");
  bad_spec.spec_json = "{not json";
  expect_error([&] { store_.begin_run(bad_spec); }, {"not valid JSON"});
  RunStart half_matrix = sample_start("half");
  half_matrix.cell = "rope=fused";
  expect_error([&] { store_.begin_run(half_matrix); }, {"go together"});
  expect_error([&] { store_.get_run(42); }, {"no run 42 in " + path_});
  expect_error([&] { store_.run_json(42); }, {"no run 42 in " + path_});
}

TEST_F(StoreTest, UpsertsAndAccumulation) {
  const auto id = store_.begin_run(sample_start("upserts"));
  store_.record_backends(id, {{"attention", "flash", "math", {}, "no GPU, fell back to reference", {}}});
  store_.record_backends(id, {{"attention", "flash", "math", "math", "no GPU, fell back to reference", false}});
  store_.record_goodput(id, {{"productive", 1.0}, {"startup", 2.0}});
  store_.record_goodput(id, {{"productive", 5.0}});
  store_.record_kernels(id, {{"sgemm", "gemm", "swiglu", 0, 10, 1000}});
  store_.record_kernels(id, {{"sgemm", "gemm", "swiglu", 0, 30, 5000}});
  store_.record_env(id, {{"cuda_runtime", "12.6"}, {"graphs", "captured"}});
  store_.append_steps(id, make_steps(5));
  store_.flag_outliers(id, 0, {0, 3});
  expect_error([&] { store_.flag_outliers(id, 0, {9}); }, {"no step 9 of rank 0"});
  store_.record_memory(id, {{1, 0, "forward", 100, 200, 90, 0, 0, 0.1}});
  expect_error([&] { store_.record_memory(id, {{1, 0, "forward", 1, 2, 3, 0, 0, 0.1}}); }, {"already has memory"});

  const auto doc = store_.run_json(id);
  ASSERT_EQ(doc["backends"].size(), 1u);
  EXPECT_EQ(doc["backends"][0]["observed"], "math");
  EXPECT_EQ(doc["backends"][0]["mismatch"], false);
  EXPECT_EQ(doc["goodput"], (nlohmann::json{{"productive", 5.0}, {"startup", 2.0}}));
  EXPECT_EQ(doc["kernels"][0]["calls"], 40);
  EXPECT_EQ(doc["kernels"][0]["total_ns"], 6000);
  EXPECT_EQ(doc["kernels"][0]["mean_ns"], 150.0);
  EXPECT_EQ(doc["env"]["cuda_runtime"], "12.6");
  EXPECT_EQ(doc["env"]["gpu_model"], "NVIDIA H100");
  EXPECT_EQ(doc["env"]["graphs"], "captured");
  std::vector<bool> outliers;
  for (const auto& s : doc["steps"]) outliers.push_back(s["outlier"].get<bool>());
  EXPECT_EQ(outliers, (std::vector<bool>{true, false, false, true, false}));
}

// Schema v4: the MoE router's per-step evidence round-trips, stays NULL where the model has no E block,
// and a negative drop count is refused before anything is written.
TEST_F(StoreTest, MoeRouterColumnsRoundTripAndRefuseNegativeDrops) {
  const auto id = store_.begin_run(sample_start("moe"));
  auto rows = make_steps(3);
  rows[1].moe_aux_loss = 1.0625;
  rows[1].moe_dropped_slots = 0;
  rows[2].moe_aux_loss = 1.25;
  rows[2].moe_dropped_slots = 37;
  store_.append_steps(id, rows);
  auto bad = make_steps(1, 3);
  bad[0].moe_dropped_slots = -1;
  expect_error([&] { store_.append_steps(id, bad); }, {"moe_dropped_slots must be >= 0", "not -1"});

  const auto steps = store_.run_json(id)["steps"];
  ASSERT_EQ(steps.size(), 3u);  // the refused batch wrote nothing
  EXPECT_TRUE(steps[0]["moe_aux_loss"].is_null());
  EXPECT_TRUE(steps[0]["moe_dropped_slots"].is_null());
  EXPECT_EQ(steps[1]["moe_dropped_slots"], 0);
  EXPECT_EQ(steps[2]["moe_aux_loss"], 1.25);
  EXPECT_EQ(steps[2]["moe_dropped_slots"], 37);
}

TEST_F(StoreTest, ArtifactsAreHashed) {
  const auto id = store_.begin_run(sample_start("artifacts"));
  const std::string file = dir_.file("trace.rank0.json");
  testing::write_file(file, "abc");
  const ArtifactRow row = store_.add_artifact(id, "trace", file);
  EXPECT_EQ(row.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(row.bytes, 3);
  EXPECT_TRUE(std::filesystem::path(row.path).is_absolute());
  EXPECT_EQ(std::filesystem::path(row.path), std::filesystem::path(file));
  expect_error([&] { store_.add_artifact(id, "trace", file); }, {"already has artifact"});
  expect_error([&] { store_.add_artifact(id, "trace", dir_.file("missing.json")); }, {"missing.json", "no such"});
  const auto doc = store_.run_json(id);
  ASSERT_EQ(doc["artifacts"].size(), 1u);
  EXPECT_EQ(doc["artifacts"][0]["sha256"], row.sha256);
  EXPECT_EQ(doc["artifacts"][0]["kind"], "trace");
}

TEST_F(StoreTest, MatricesAndDecisions) {
  const auto matrix = store_.create_matrix("rope-ablation", R"({"factors":{"rope":["reference","fused"]}})");
  std::vector<std::int64_t> runs;
  for (int repeat = 0; repeat < 2; ++repeat) {
    RunStart start = sample_start("rope-cell");
    start.matrix_id = matrix;
    start.cell = "rope=fused";
    start.repeat = repeat;
    runs.push_back(store_.begin_run(start));
  }
  const auto cells = store_.matrix_cells(matrix);
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[1].cell, "rope=fused");
  EXPECT_EQ(cells[1].repeat, 1);
  EXPECT_EQ(cells[1].run_id, runs[1]);
  EXPECT_EQ(store_.get_run(runs[0]).cell, "rope=fused");
  expect_error([&] { store_.matrix_cells(999); }, {"no matrix 999"});
  RunStart orphan = sample_start("orphan");
  orphan.matrix_id = 999;
  orphan.cell = "c";
  orphan.repeat = 0;
  expect_error([&] { store_.begin_run(orphan); }, {"no matrix 999"});

  Decision d;
  d.seam = "rope";
  d.backend = "fused";
  d.verdict = Verdict::keep;
  d.evidence_run_ids = runs;
  d.matrix_id = matrix;
  d.details = "ratio 0.91 [0.88, 0.94]";
  const auto decision_id = store_.record_decision(d);
  d.backend = "other";
  d.verdict = Verdict::inconclusive;
  d.evidence_run_ids = {};
  store_.record_decision(d);
  const auto fused = store_.list_decisions("rope", "fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(fused[0].id, decision_id);
  EXPECT_EQ(fused[0].verdict, Verdict::keep);
  EXPECT_EQ(fused[0].evidence_run_ids, runs);
  EXPECT_EQ(fused[0].details, "ratio 0.91 [0.88, 0.94]");
  EXPECT_EQ(store_.list_decisions("rope").size(), 2u);
  EXPECT_EQ(store_.list_decisions().size(), 2u);
  d.evidence_run_ids = {12345};
  expect_error([&] { store_.record_decision(d); }, {"no run 12345"});
  EXPECT_NE(RawDb(path_).exec("UPDATE decisions SET verdict = 'DROP'").find("append-only"), std::string::npos);
}

// Concurrent `matrix run`s: a pair is taken by one live runner; an ok run makes it done; a live run
// recording it takes it too; a runner that ended or went stale frees its pairs; a failed pair stays with
// the runner that ran it while that runner lives.
TEST_F(StoreTest, MatrixClaimsSharePairsBetweenLiveRunners) {
  const auto matrix = store_.find_or_create_matrix("loss", R"({"cells":["baseline","chunked"]})");
  EXPECT_EQ(store_.find_or_create_matrix("loss", R"({"cells":["baseline","chunked"]})"), matrix);
  EXPECT_NE(store_.find_or_create_matrix("loss", R"({"cells":["baseline"]})"), matrix);
  expect_error([&] { store_.begin_matrix_runner(999); }, {"no matrix 999"});

  Store other = Store::open(path_);  // a second process's connection
  const auto a = store_.begin_matrix_runner(matrix);
  const auto b = other.begin_matrix_runner(matrix);
  using Outcome = MatrixClaim::Outcome;
  EXPECT_EQ(store_.claim_matrix_slot(a, "baseline", 0).outcome, Outcome::claimed);
  const auto taken = other.claim_matrix_slot(b, "baseline", 0);
  EXPECT_EQ(taken.outcome, Outcome::taken);
  EXPECT_EQ(taken.holder, fmt::format("runner {} (pid {} on {})", a, getpid(), base::host_name()));
  EXPECT_EQ(other.claim_matrix_slot(b, "baseline", 1).outcome, Outcome::claimed);
  EXPECT_EQ(store_.claim_matrix_slot(a, "baseline", 1).outcome, Outcome::taken);

  // a's run of baseline r0 fails: the pair stays a's, so b does not run it a second time.
  RunStart start = sample_start("cell");
  start.matrix_id = matrix;
  start.cell = "baseline";
  start.repeat = 0;
  const auto failed = store_.begin_run(start);
  EXPECT_EQ(other.claim_matrix_slot(b, "baseline", 0).outcome, Outcome::taken);
  store_.finish_run(failed, RunStatus::failed, "boom", {});
  EXPECT_EQ(other.claim_matrix_slot(b, "baseline", 0).outcome, Outcome::taken);

  // a ends: its pairs are free; an ok run makes a pair done for everyone.
  store_.end_matrix_runner(a);
  expect_error([&] { store_.claim_matrix_slot(a, "chunked", 0); }, {"no running matrix runner"});
  EXPECT_EQ(other.claim_matrix_slot(b, "baseline", 0).outcome, Outcome::claimed);
  const auto ok = other.begin_run(start);
  other.finish_run(ok, RunStatus::ok, "", sample_summary(3));
  const auto c = store_.begin_matrix_runner(matrix);
  const auto done = store_.claim_matrix_slot(c, "baseline", 0);
  EXPECT_EQ(done.outcome, Outcome::done);
  EXPECT_EQ(done.holder, fmt::format("run {}", ok));

  // A live run recording a pair takes it (its runner may have died); stale, it does not.
  start.cell = "chunked";
  const auto live = store_.begin_run(start);
  EXPECT_EQ(store_.claim_matrix_slot(c, "chunked", 0).holder, fmt::format("run {} (running)", live));
  RawDb raw(path_);
  raw.exec_ok(fmt::format("UPDATE runs SET heartbeat_at = heartbeat_at - 3600 WHERE id = {}", live));
  EXPECT_EQ(store_.claim_matrix_slot(c, "chunked", 0).outcome, Outcome::claimed);

  // b's heartbeat goes stale (the process vanished): c may take its pair; a fresh beat would have kept it.
  other.matrix_runner_heartbeat(b);
  EXPECT_EQ(store_.claim_matrix_slot(c, "baseline", 1).outcome, Outcome::taken);
  raw.exec_ok(fmt::format("UPDATE matrix_runners SET heartbeat_at = heartbeat_at - 3600 WHERE id = {}", b));
  EXPECT_EQ(store_.claim_matrix_slot(c, "baseline", 1).outcome, Outcome::claimed);
}

TEST(StoreOptions, StaleLimitFromOptionOrEnvironment) {
  base::TempDir dir;
  {
    testing::ScopedEnv unset("ABLATE_HEARTBEAT_STALE_S", std::nullopt);
    EXPECT_EQ(Store::open(dir.file("a.db")).heartbeat_stale_s(), 60.0);
    StoreOptions options;
    options.heartbeat_stale_s = 5;
    EXPECT_EQ(Store::open(dir.file("a.db"), options).heartbeat_stale_s(), 5.0);
  }
  {
    testing::ScopedEnv env("ABLATE_HEARTBEAT_STALE_S", "2.5");
    EXPECT_EQ(Store::open(dir.file("a.db")).heartbeat_stale_s(), 2.5);
  }
  {
    testing::ScopedEnv env("ABLATE_HEARTBEAT_STALE_S", "soon");
    expect_error([&] { Store::open(dir.file("a.db")); }, {"ABLATE_HEARTBEAT_STALE_S='soon'", "positive number"});
  }
}

}  // namespace
}  // namespace ablate::receipts
