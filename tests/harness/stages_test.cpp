// tests/harness/stages_test.cpp: the stages of a run (harness/train/stages.h) called on their own, on
// the CPU with the `tiny` model on synthetic data: the posture refuses what the machine cannot do and
// writes nothing; data prep is charged to its goodput category; resume starts at the checkpoint and
// refuses one with nothing left to train; the train loop leaves every step row in the store before
// the receipt is closed and returns a training failure instead of throwing it; rank 0 reads every
// rank's exposed communication from the run's profile windows.
// Run: build/tests/harness_tests --gtest_filter='Stages*'
#include "harness/train/stages.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "harness/train/checkpoint.h"
#include "harness/train/run_profiler.h"
#include "kernels/catalog.h"
#include "base/temp_dir.h"
#include "tests/receipts/test_util.h"

namespace fs = std::filesystem;
using namespace ablate;
using namespace ablate::harness;

namespace {

class StagesTest : public ::testing::Test {
 protected:
  ExperimentSpec spec(std::vector<std::string> sets) const {
    std::vector<std::string> all = {"data.source=\"synthetic\"", "train.device=\"cpu\"", "train.log_every=0",
                                    "train.steps=6", "train.warmup_steps=2",
                                    "train.checkpoint_dir=\"" + dir_.file("ckpt") + "\""};
    all.insert(all.end(), sets.begin(), sets.end());
    return parse_spec_file(std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml", all);
  }
  RunOptions options() const {
    RunOptions o;
    o.db_path = dir_.file("receipts.db");
    o.quiet = true;
    o.no_profile = true;
    return o;
  }
  base::TempDir dir_{"ablate-stages"};
};

// A ledger as run_experiment opens it: startup charged from now until the first step.
GoodputLedger started_ledger() {
  GoodputLedger ledger;
  ledger.begin(Goodput::startup);
  return ledger;
}

// Stages 1-4 and the profiler, set up as run_experiment sets them up before its train loop.
struct UpToTraining {
  UpToTraining(ExperimentSpec s, RunOptions o)
      : spec(std::move(s)),
        opt(std::move(o)),
        posture(choose_posture(spec, opt)),
        source(open_run_data(spec, ledger)),
        state(build_model(spec, opt, posture, *source, ledger)),
        recorder(open_recorder(spec, opt, posture, state)),
        profiler(spec, opt.no_profile, posture.device, *posture.dispatcher) {}
  TrainOutcome train() { return train_loop(spec, opt, posture, state, *source, *recorder, profiler, ledger); }
  int64_t stored_steps() {
    return store().query("SELECT count(*) AS n FROM steps WHERE run_id = ?", {recorder->run_id()})[0]["n"].get<int64_t>();
  }
  receipts::Store& store() { return recorder->store(); }
  receipts::RunRow row() { return store().get_run(recorder->run_id()); }

  ExperimentSpec spec;
  RunOptions opt;
  GoodputLedger ledger = started_ledger();
  RunPosture posture;
  std::unique_ptr<data::DataSource> source;
  ModelState state;
  std::unique_ptr<receipts::RunRecorder> recorder;
  RunProfiler profiler;
};

}  // namespace

TEST_F(StagesTest, PostureResolvesEverySeamForTheCpuAndRefusesWhatTheMachineCannotDo) {
  const auto p = choose_posture(spec({}), options());
  EXPECT_EQ(p.device_kind, "cpu");
  EXPECT_TRUE(p.device.is_cpu());
  EXPECT_FALSE(p.bf16);  // dtype auto: fp32 on the CPU
  EXPECT_EQ(p.dispatcher->resolutions().size(), kernels::seams().size());
  EXPECT_FALSE(p.graphs.eligible);
  EXPECT_TRUE(choose_posture(spec({"train.dtype=\"bf16\""}), options()).bf16);
  EXPECT_THROW(choose_posture(spec({"distributed.nproc=2"}), options()), std::invalid_argument);
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(choose_posture(spec({"train.device=\"cuda\""}), options()), std::invalid_argument);
  }
  EXPECT_FALSE(fs::exists(options().db_path)) << "the posture stage writes nothing";
}

// The shapes the backends' availability checks see: nam56r-small's, and nothing for block kinds the
// pattern lacks (a limit of a seam the model never calls must refuse nothing).
// Which steps may start before the previous step's read (the rule train_loop applies while replaying):
// none into the last step, none across a checkpoint or an evaluation, none into or out of a traced
// window (an untraced one, as under --no-profile, has no edges), and none with compile.launch_ahead off.
TEST(StagesLaunchAhead, StopsAtCheckpointsEvaluationsTheWindowAndTheLastStep) {
  const auto spec_with = [](std::vector<std::string> sets) {
    sets.push_back("train.steps=20");
    return parse_spec_file(std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml", sets);
  };
  const auto ahead_of = [](const ExperimentSpec& s, bool tracing = true) {
    const auto traced = [&](int64_t step) {
      return tracing && s.profile.enabled && step >= s.profile.start_step && step < s.profile.start_step + s.profile.steps;
    };
    std::vector<int64_t> steps;
    for (int64_t step = 0; step < s.train.steps; ++step)
      if (may_launch_ahead(s, step, traced)) steps.push_back(step + 1);
    return steps;
  };
  using Steps = std::vector<int64_t>;
  Steps all;
  for (int64_t s = 1; s < 20; ++s) all.push_back(s);
  EXPECT_EQ(ahead_of(spec_with({})), all);
  EXPECT_EQ(ahead_of(spec_with({"compile.launch_ahead=false"})), Steps{});
  // A checkpoint after steps 5, 11 and 17 (every 6, not after the last): steps 6, 12 and 18 wait.
  const auto checkpoints = spec_with({"train.checkpoint_every=6"});
  EXPECT_TRUE(checkpoint_after(checkpoints, 5));
  EXPECT_FALSE(checkpoint_after(checkpoints, 19));
  Steps expected;
  for (int64_t s = 1; s < 20; ++s)
    if (s % 6 != 0) expected.push_back(s);
  EXPECT_EQ(ahead_of(checkpoints), expected);
  // An evaluation after steps 9 and 19.
  expected.clear();
  for (int64_t s = 1; s < 20; ++s)
    if (s != 10) expected.push_back(s);
  EXPECT_EQ(ahead_of(spec_with({"train.eval_every=10"})), expected);
  // The window is steps 8 and 9: 8 (into it) and 10 (out of it) wait; 9 (inside it) does not.
  expected.clear();
  for (int64_t s = 1; s < 20; ++s)
    if (s != 8 && s != 10) expected.push_back(s);
  const auto window = spec_with({"profile.enabled=true", "profile.start_step=8", "profile.steps=2"});
  EXPECT_EQ(ahead_of(window), expected);
  EXPECT_EQ(ahead_of(window, /*tracing=*/false), all);
}

// A data-parallel receipt's memory facts are the rank that needed the most of its GPU, whole: not the
// largest reserved peak of one rank beside the largest outside-allocator memory of another.
TEST(StagesMemory, TheRankThatNeededMostStandsForTheJob) {
  constexpr int64_t GiB = int64_t{1} << 30;
  receipts::RunFacts facts;
  facts.memory = receipts::MemoryFacts{141 * GiB, 77 * GiB, 60 * GiB, GiB, 61 * GiB, true};  // rank 0's own
  receipts::DistributedFacts d;
  d.per_rank.resize(3);
  d.per_rank[0].peak_reserved_bytes = 60 * GiB, d.per_rank[0].outside_allocator_bytes = GiB;
  d.per_rank[1].peak_reserved_bytes = 70 * GiB, d.per_rank[1].outside_allocator_bytes = GiB / 2;
  d.per_rank[2].peak_reserved_bytes = 65 * GiB, d.per_rank[2].outside_allocator_bytes = 2 * GiB;
  facts.distributed = d;
  take_largest_rank_memory(facts);
  EXPECT_EQ(facts.memory->peak_reserved_bytes, 70 * GiB);
  EXPECT_EQ(facts.memory->outside_allocator_bytes, GiB / 2);  // rank 1's, not rank 2's larger one
  EXPECT_EQ(facts.memory->needed_bytes, 70 * GiB + GiB / 2);
  EXPECT_EQ(facts.memory->limit_bytes, 77 * GiB);
  // Ranks that recorded nothing (a CPU job, older ranks) leave rank 0's facts.
  receipts::RunFacts cpu = facts;
  cpu.memory->needed_bytes = 61 * GiB;
  cpu.distributed->per_rank = {receipts::RankFacts{}, receipts::RankFacts{}};
  take_largest_rank_memory(cpu);
  EXPECT_EQ(cpu.memory->needed_bytes, 61 * GiB);
}

TEST(StagesModelDims, ComeFromThePatternsBlockKindsOnly) {
  const auto full = model_dims(*model::named_config("nam56r-small"));  // AEMEAEMEAEMR
  EXPECT_EQ(full.experts, 16);
  EXPECT_EQ(full.ssm_heads, 32);  // expand 2 x d 1024 / head dim 64
  EXPECT_EQ(full.ssm_head_dim, 64);
  EXPECT_EQ(full.ssm_state, 128);
  EXPECT_EQ(full.ssm_chunk, 64);
  EXPECT_EQ(full.conv_width, 4);
  auto attention_only = *model::named_config("nam56r-small");
  attention_only.pattern = "AAD";
  const auto none = model_dims(attention_only);
  EXPECT_EQ(none.experts, 0);
  EXPECT_EQ(none.ssm_heads, 0);
  EXPECT_EQ(none.ssm_state, 0);
  EXPECT_EQ(none.conv_width, 0);
}

TEST_F(StagesTest, DataPrepIsChargedToItsGoodputCategory) {
  GoodputLedger ledger;
  const auto source = open_run_data(spec({}), ledger);
  EXPECT_EQ(source->description().source, "synthetic");
  EXPECT_GT(ledger.totals().at("data_prep"), 0.0);
}

TEST_F(StagesTest, BuildModelResumesFromTheLatestCheckpointAndRefusesOneWithNothingLeft) {
  const auto s = spec({"train.resume=true"});
  const auto opt = options();
  const auto posture = choose_posture(s, opt);
  GoodputLedger ledger;
  const auto source = open_run_data(s, ledger);
  auto fresh = build_model(s, opt, posture, *source, ledger);
  EXPECT_EQ(fresh.start_step, 0);  // nothing to resume from yet
  EXPECT_TRUE(fresh.resumed_from.empty());
  EXPECT_FALSE(fresh.params.empty());
  EXPECT_EQ(fresh.checkpoint_dir, dir_.file("ckpt"));
  const data::DataState at{0, 16};
  const std::string folder = save_checkpoint(fresh.checkpoint_dir, *fresh.model, *fresh.optimizer,
                                             {4, at, fresh.model_hash, source->description().fingerprint});

  const auto resumed = build_model(s, opt, posture, *source, ledger);
  EXPECT_EQ(resumed.start_step, 4);
  EXPECT_EQ(resumed.data_state, at);
  EXPECT_EQ(resumed.resumed_from, folder);
  for (size_t i = 0; i < fresh.params.size(); ++i) EXPECT_TRUE(torch::equal(resumed.params[i], fresh.params[i])) << i;

  try {
    build_model(spec({"train.resume=true", "train.steps=4", "train.warmup_steps=1"}), opt, posture, *source, ledger);
    ADD_FAILURE() << "resumed with nothing left to train";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("already at step 4 of train.steps = 4"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(opt.db_path)) << "stages before open_recorder write nothing";
}

// The train loop on its own: every step row is in the store when it returns, while the run is still
// `running`; closing the receipt is the next stage's work.
TEST_F(StagesTest, TrainLoopStoresEveryStepBeforeTheReceiptIsClosed) {
  UpToTraining run(spec({}), options());
  const auto outcome = run.train();
  ASSERT_FALSE(outcome.failure.has_value()) << *outcome.failure;
  EXPECT_EQ(outcome.steady_ms.size(), 4u);  // 6 steps, 2 warm-up
  EXPECT_EQ(outcome.steady_steps, (std::vector<int64_t>{2, 3, 4, 5}));
  ASSERT_TRUE(outcome.last_loss.has_value());
  EXPECT_TRUE(std::isfinite(*outcome.last_loss));
  EXPECT_GT(outcome.peak_memory, 0);  // process RSS on the CPU
  EXPECT_EQ(run.stored_steps(), 6);
  EXPECT_EQ(run.row().status, receipts::RunStatus::running);

  const auto result = finalise_receipt(run.spec, run.opt, run.posture, run.state, *run.source, *run.recorder,
                                       run.profiler, run.ledger, outcome);
  EXPECT_EQ(result.status, "ok");
  const auto row = run.row();
  EXPECT_EQ(row.status, receipts::RunStatus::ok);
  EXPECT_EQ(row.summary.steps, 6);
  // The typed facts the report and the gate read.
  const auto& facts = row.summary.facts;
  EXPECT_EQ(facts.warmup_steps, 2);
  EXPECT_EQ(facts.steady_steps, 4);
  ASSERT_TRUE(facts.cuda_graphs);
  EXPECT_EQ(facts.cuda_graphs->outcome, receipts::CaptureOutcome::not_requested);
  ASSERT_TRUE(facts.model);
  EXPECT_EQ(facts.model->config, "tiny");
  EXPECT_FALSE(facts.model->config_overridden);
  ASSERT_TRUE(facts.precision);
  EXPECT_EQ(facts.precision->dtype, "fp32");
  EXPECT_FALSE(facts.precision->mfu_peak_flops);  // a CPU run has no peak: MFU null, and the receipt says why
  EXPECT_NE(facts.precision->mfu_peak_source.find("CPU"), std::string::npos) << facts.precision->mfu_peak_source;
}

// A --set that changes the model is recorded: the overrides, and the named configuration marked as
// no longer describing the shape (the shape itself is in the facts).
TEST_F(StagesTest, ModelOverridesAreRecordedWithTheShape) {
  UpToTraining run(spec({"model.d_model=96"}), options());
  const auto outcome = run.train();
  ASSERT_FALSE(outcome.failure.has_value()) << *outcome.failure;
  finalise_receipt(run.spec, run.opt, run.posture, run.state, *run.source, *run.recorder, run.profiler, run.ledger,
                   outcome);
  const auto facts = run.row().summary.facts;
  ASSERT_TRUE(facts.model);
  EXPECT_TRUE(facts.model->config_overridden);
  EXPECT_EQ(facts.model->d_model, 96);
  EXPECT_EQ(facts.model->overrides.back(), "model.d_model=96");
  const auto env = run.store().run_json(run.recorder->run_id())["env"];
  EXPECT_NE(env.value("spec.overrides", "").find("model.d_model=96"), std::string::npos) << env.dump();
}

// Steps inside a traced profile window carry the tracer's overhead: they stay out of the median while
// steady steps outside the window remain. Untraced (CUPTI unavailable on the CPU), nothing is left out.
TEST_F(StagesTest, UntracedWindowStepsStayInTheMedian) {
  UpToTraining run(spec({"profile.enabled=true", "profile.start_step=3", "profile.steps=2"}),
                   [&] {
                     auto o = options();
                     o.no_profile = false;
                     return o;
                   }());
  const auto outcome = run.train();
  ASSERT_FALSE(outcome.failure.has_value()) << *outcome.failure;
  if (torch::cuda::is_available()) GTEST_SKIP() << "the CPU case: a CUDA machine traces the window";
  EXPECT_EQ(outcome.window_steps_excluded, 0);
  EXPECT_EQ(outcome.steady_steps, (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST_F(StagesTest, ATrainingFailureIsReturnedWithItsStepsStoredAndClosesTheReceiptAsFailed) {
  UpToTraining run(spec({"train.steps=30", "train.warmup_steps=1", "train.lr=1e30", "train.lr_warmup_steps=0",
                         "train.grad_clip=0"}),
                   options());
  const auto outcome = run.train();
  ASSERT_TRUE(outcome.failure.has_value());
  const std::string prefix = "non-finite loss at step ";
  ASSERT_EQ(outcome.failure->rfind(prefix, 0), 0u) << *outcome.failure;
  // Every step up to the failing one is in the store, the failing step included (its loss NULL).
  const int64_t failed_at = std::stoll(outcome.failure->substr(prefix.size()));
  EXPECT_EQ(run.stored_steps(), failed_at + 1);
  const auto last = run.store().query("SELECT step, loss FROM steps WHERE run_id = ? ORDER BY step DESC LIMIT 1",
                                      {run.recorder->run_id()});
  EXPECT_EQ(last[0]["step"], failed_at);
  EXPECT_TRUE(last[0]["loss"].is_null());

  const auto result = fail_receipt(run.spec, run.opt, run.posture, run.state, *run.source, *run.recorder, run.ledger,
                                   outcome, *outcome.failure);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(run.row().status, receipts::RunStatus::failed);
  EXPECT_EQ(run.row().error, outcome.failure);
  // The failed run keeps the facts known when it failed.
  EXPECT_TRUE(run.row().summary.facts.model.has_value());
}

// Rank 0 reads every rank's exposed communication from the run's profile windows: each traced window's
// exposed_communication_ns over its window_ns, and the median of the ranks that have one; a rank whose
// window did not trace, and a window recorded before communication was measured, give none, never 0.
TEST(StagesExposedCommunication, ComesFromEachRanksTracedWindow) {
  base::TempDir dir{"ablate-exposed"};
  auto store = receipts::Store::open(dir.file("receipts.db"));
  const auto run = store.begin_run(receipts::testing::sample_start("dp"));
  auto traced = [&](int64_t rank, std::optional<int64_t> exposed_ns) {
    receipts::ProfileWindowRow w;
    w.rank = rank;
    w.status = "ok";
    w.window_ns = 80'000'000;
    w.communication_ns = 20'000'000;
    w.exposed_communication_ns = exposed_ns;
    if (exposed_ns) {  // by kind: the all-to-alls a quarter of what was exposed, the all-gathers the rest
      w.collective_ns.all_to_all = 10'000'000;
      w.exposed_collective_ns.all_to_all = *exposed_ns / 4;
      w.collective_ns.all_gather = 10'000'000;
      w.exposed_collective_ns.all_gather = *exposed_ns - *exposed_ns / 4;
      w.collective_ns.all_reduce = w.exposed_collective_ns.all_reduce = 0;
    }
    store.record_profile_window(run, w);
  };
  traced(0, 4'000'000);
  traced(1, 12'000'000);
  traced(3, std::nullopt);
  receipts::ProfileWindowRow untraced;
  untraced.rank = 2;
  untraced.status = "unavailable";
  untraced.reason = "CUPTI held by another profiler";
  store.record_profile_window(run, untraced);

  receipts::DistributedFacts d;
  for (int64_t r = 0; r < 4; ++r) d.per_rank.emplace_back().rank = r;
  add_exposed_communication(store, run, d);
  EXPECT_DOUBLE_EQ(*d.per_rank[0].exposed_comm_share, 0.05);
  EXPECT_DOUBLE_EQ(*d.per_rank[1].exposed_comm_share, 0.15);
  EXPECT_FALSE(d.per_rank[2].exposed_comm_share.has_value());
  EXPECT_FALSE(d.per_rank[3].exposed_comm_share.has_value());
  EXPECT_DOUBLE_EQ(*d.exposed_comm_share, 0.10);
  EXPECT_DOUBLE_EQ(*d.per_rank[1].exposed_by_collective.all_to_all, 0.0375);
  EXPECT_DOUBLE_EQ(*d.exposed_by_collective.all_to_all, 0.025);  // the median of 0.0125 and 0.0375
  EXPECT_DOUBLE_EQ(*d.exposed_by_collective.all_gather, 0.075);
  EXPECT_DOUBLE_EQ(*d.exposed_by_collective.all_reduce, 0.0);  // measured: none exposed, which is not unknown
  EXPECT_FALSE(d.exposed_by_collective.reduce_scatter.has_value());  // never written: unknown
  EXPECT_FALSE(d.per_rank[3].exposed_by_collective.all_to_all.has_value());

  const auto unprofiled = store.begin_run(receipts::testing::sample_start("dp-unprofiled"));
  receipts::DistributedFacts none;
  none.per_rank.resize(2);
  none.per_rank[1].rank = 1;
  add_exposed_communication(store, unprofiled, none);
  EXPECT_FALSE(none.exposed_comm_share.has_value());
  EXPECT_FALSE(none.per_rank[0].exposed_comm_share.has_value());
}
