// tests/harness/runner_test.cpp: the runner end to end on the CPU with the `tiny` model, through the
// real receipt store: loss falls, same seed same losses, checkpoint+resume is bitwise, failures are
// receipts, bad input writes nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "data/errors.h"
#include "base/remove_tree.h"
#include "spec/spec.h"
#include "harness/train/runner.h"
#include "kernels/catalog.h"
#include "receipts/store.h"
#include "tests/cli_runner.h"

namespace fs = std::filesystem;
using namespace ablate;

namespace {

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ablate-runner-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    base::remove_tree(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "receipts.db").string();
  }
  void TearDown() override { base::remove_tree(dir_); }

  // tiny on the first ~300 kB of /usr/include, cache in the test folder.
  harness::ExperimentSpec spec(std::vector<std::string> sets) {
    std::vector<std::string> all = {"data.max_bytes=300000", "data.cache_dir=\"" + (dir_ / "cache").string() + "\"",
                                    "train.log_every=0", "train.device=\"cpu\""};
    all.insert(all.end(), sets.begin(), sets.end());
    return harness::parse_spec_file(std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml", all);
  }
  harness::RunResult run(const harness::ExperimentSpec& s, bool no_profile = false) {
    harness::RunOptions o;
    o.no_profile = no_profile;
    o.db_path = db_;
    o.quiet = true;
    return harness::run_experiment(s, o);
  }
  std::vector<double> losses(int64_t run_id) {
    auto store = receipts::Store::open(db_);
    std::vector<double> out;
    const auto j = store.run_json(run_id);  // keep the document alive while iterating it
    for (const auto& st : j["steps"]) out.push_back(st["loss"].get<double>());
    return out;
  }

  fs::path dir_;
  std::string db_;
};

}  // namespace

TEST_F(RunnerTest, TinyTrainsOnTheCorpusAndStoresAnOkReceipt) {
  const auto r = run(spec({"train.steps=100"}));
  ASSERT_EQ(r.status, "ok") << r.error;
  auto store = receipts::Store::open(db_);
  const auto run_row = store.get_run(r.run_id);
  EXPECT_TRUE(receipts::is_evidence(run_row));
  const auto l = losses(r.run_id);
  ASSERT_EQ(l.size(), 100u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) first += l[i] / 10, last += l[90 + i] / 10;
  EXPECT_LT(last, first - 1.0) << "mean loss of steps 0-9 " << first << " vs 90-99 " << last;
  EXPECT_NEAR(l[0], std::log(512.0), 0.5);  // an untrained model predicts about uniformly over V = 512

  const auto j = store.run_json(r.run_id);
  EXPECT_EQ(j["backends"].size(), ablate::kernels::seams().size());  // one row per seam, optimizer included
  double goodput_sum = 0;
  for (const auto& [category, seconds] : j["goodput"].items()) goodput_sum += seconds.get<double>();
  EXPECT_EQ(j["goodput"].size(), 9u);
  EXPECT_GT(j["goodput"]["productive"].get<double>(), 0);
  // The categories sum to the run's wall time (ended - started, whole seconds in the store: +-1 s).
  EXPECT_NEAR(goodput_sum, *run_row.ended_at - run_row.started_at, 1.5);
  EXPECT_GT(run_row.summary.median_step_ms.value_or(0), 0);
  EXPECT_FALSE(run_row.summary.mfu.has_value());  // CPU: MFU is null, never guessed
  EXPECT_EQ(run_row.summary.flops_version, "flops-v2");
}

// Schema v4: every step row of a model with E blocks carries the router's load-balancing loss and its
// dropped slots, and the summary adds them up against the routed slots; a model without E has neither.
TEST_F(RunnerTest, MoeRouterEvidenceInEveryStepRowAndTheSummary) {
  auto store_of = [&] { return receipts::Store::open(db_); };
  // tiny: AEMR, 4 x 128 tokens, top-2 of its experts; capacity 0.5 must drop slots every step.
  const auto capped = run(spec({"train.steps=3", "train.warmup_steps=1", "model.moe.capacity_factor=0.5"}));
  ASSERT_EQ(capped.status, "ok") << capped.error;
  auto store = store_of();
  const auto j = store.run_json(capped.run_id);
  int64_t dropped = 0;
  for (const auto& st : j["steps"]) {
    ASSERT_TRUE(st["moe_dropped_slots"].is_number_integer()) << st.dump();
    EXPECT_GT(st["moe_dropped_slots"].get<int64_t>(), 0);
    EXPECT_GT(st["moe_aux_loss"].get<double>(), 0.5);  // E * sum f_e P_e is 1 for a uniform router
    dropped += st["moe_dropped_slots"].get<int64_t>();
  }
  const auto moe = store.get_run(capped.run_id).summary.facts.moe;
  ASSERT_TRUE(moe);
  EXPECT_EQ(moe->e_layers, 1);
  EXPECT_EQ(moe->dropped_slots, dropped);
  EXPECT_EQ(moe->routed_slots, 3 * 4 * 128 * 2);
  EXPECT_DOUBLE_EQ(*moe->drop_rate, dropped / double(3 * 4 * 128 * 2));
  EXPECT_EQ(moe->final_aux_loss, j["steps"][2]["moe_aux_loss"].get<double>());

  const auto dropless = run(spec({"train.steps=2", "train.warmup_steps=1"}));
  ASSERT_EQ(dropless.status, "ok") << dropless.error;
  for (const auto& st : store.run_json(dropless.run_id)["steps"]) EXPECT_EQ(st["moe_dropped_slots"], 0);
  EXPECT_EQ(store.get_run(dropless.run_id).summary.facts.moe->drop_rate, 0.0);

  const auto no_moe = run(spec({"train.steps=2", "train.warmup_steps=1", "model.pattern=\"AMR\""}));
  ASSERT_EQ(no_moe.status, "ok") << no_moe.error;
  for (const auto& st : store.run_json(no_moe.run_id)["steps"]) {
    EXPECT_TRUE(st["moe_aux_loss"].is_null());
    EXPECT_TRUE(st["moe_dropped_slots"].is_null());
  }
  EXPECT_FALSE(store.get_run(no_moe.run_id).summary.facts.moe.has_value());
}

TEST_F(RunnerTest, SameSeedSameLosses) {
  const auto a = run(spec({"train.steps=8", "train.warmup_steps=2"}));
  const auto b = run(spec({"train.steps=8", "train.warmup_steps=2"}));
  ASSERT_EQ(a.status, "ok");
  ASSERT_EQ(b.status, "ok");
  EXPECT_EQ(losses(a.run_id), losses(b.run_id));
  const auto c = run(spec({"train.steps=8", "train.warmup_steps=2", "experiment.seed=99"}));
  EXPECT_NE(losses(a.run_id), losses(c.run_id));
}

TEST_F(RunnerTest, TwentyStepsEqualTenPlusCheckpointPlusResumedTen) {
  const std::string ckpt = "train.checkpoint_dir=\"" + (dir_ / "ckpt").string() + "\"";
  const auto straight = run(spec({"train.steps=20", "train.warmup_steps=2", "train.checkpoint_every=10", ckpt}));
  ASSERT_EQ(straight.status, "ok") << straight.error;
  ASSERT_TRUE(fs::exists(dir_ / "ckpt/step-00000010/COMPLETE"));
  const auto resumed = run(spec({"train.steps=20", "train.warmup_steps=2", "train.resume=true", ckpt}));
  ASSERT_EQ(resumed.status, "ok") << resumed.error;
  const auto all = losses(straight.run_id), tail = losses(resumed.run_id);
  ASSERT_EQ(tail.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(tail[i], all[10 + i]) << "step " << 10 + i;  // bitwise on CPU
}

TEST_F(RunnerTest, NonFiniteLossFailsTheRunWithTheStep) {
  const auto r = run(spec({"train.steps=30", "train.warmup_steps=1", "train.lr=1e30", "train.lr_warmup_steps=0",
                           "train.grad_clip=0"}));
  EXPECT_EQ(r.status, "failed");
  EXPECT_EQ(r.exit_code, 1);
  auto store = receipts::Store::open(db_);
  const auto row = store.get_run(r.run_id);
  EXPECT_EQ(row.status, receipts::RunStatus::failed);
  ASSERT_TRUE(row.error.has_value());
  EXPECT_NE(row.error->find("non-finite loss at step "), std::string::npos) << *row.error;
  EXPECT_FALSE(receipts::is_evidence(row));
}

TEST_F(RunnerTest, BadInputWritesNothing) {
  EXPECT_THROW(run(spec({"data.corpus_dir=\"/nonexistent/ablate\""})), data::DataError);
  EXPECT_THROW(run(spec({"backends.attention=\"sdpa_flash\"", "backends.strict=true"})), std::invalid_argument);
  EXPECT_FALSE(fs::exists(db_)) << "a rejected run must not create or touch the database";
}

// train.memory_limit_gib on a machine that cannot honour it: refused before anything is written.
TEST_F(RunnerTest, AMemoryLimitThatCannotHoldIsRefusedWritingNothing) {
  if (!torch::cuda::is_available()) {
    EXPECT_THROW(run(spec({"train.device=\"auto\"", "train.memory_limit_gib=10"})), std::invalid_argument);
  } else {  // a cap above the GPU's memory
    EXPECT_THROW(run(spec({"train.device=\"cuda\"", "train.memory_limit_gib=100000"})), std::invalid_argument);
  }
  EXPECT_FALSE(fs::exists(db_)) << "a rejected run must not create or touch the database";
}

// Under a cap, a run that does not fit fails with its receipt (exit 1), whether the model itself does
// not fit or a step does; one that fits records what it needed of the GPU, within the cap, and the
// expandable segments it asked for. Each run is
// its own process, as users run them (a process that held GPU memory before the cap could serve small
// allocations from the free space of segments it already had, which the cap never sees).
TEST_F(RunnerTest, UnderAMemoryLimitARunThatDoesNotFitFailsWithItsReceipt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto run_capped = [&](const std::string& sets) {
    return ablate::testing::run_cli("run " + std::string(ABLATE_SOURCE_DIR) + "/experiments/tiny.toml -q --db " + db_ +
                            " --set data.max_bytes=300000 --set data.cache_dir='\"" + (dir_ / "cache").string() +
                            "\"' --set train.device='\"cuda\"' --set train.steps=3 --set train.warmup_steps=1 " + sets);
  };
  constexpr int64_t MiB = int64_t{1} << 20;
  const auto facts = [&](int64_t run_id) {
    const auto row = receipts::Store::open(db_).get_run(run_id);
    EXPECT_TRUE(row.summary.facts.memory.has_value());
    return std::pair{row, row.summary.facts.memory.value_or(receipts::MemoryFacts{})};
  };
  // 1 MiB: less than the allocator's first 2 MiB segment, so the model's first weight is refused.
  auto r = run_capped("--set train.memory_limit_gib=0.0009765625");
  EXPECT_EQ(r.rc, 1) << r.out;
  {
    const auto [row, m] = facts(1);
    EXPECT_EQ(row.status, receipts::RunStatus::failed);
    EXPECT_NE(row.error.value_or("").find("CUDA out of memory building the model, before step 0 under "
                                          "train.memory_limit_gib = 0.0009765625"),
              std::string::npos) << row.error.value_or("no error");
    EXPECT_EQ(m.limit_bytes, MiB);
    EXPECT_LE(m.peak_reserved_bytes, MiB);
  }
  // A step's activations (T 2048 x 64 rows of 512 logits: 256 MiB in fp32) over a 64 MiB cap.
  r = run_capped("--set train.memory_limit_gib=0.0625 --set model.batch_size=64 --set model.seq_len=2048");
  EXPECT_EQ(r.rc, 1) << r.out;
  {
    const auto [row, m] = facts(2);
    EXPECT_EQ(row.status, receipts::RunStatus::failed);
    EXPECT_NE(row.error.value_or("").find("CUDA out of memory at step 0 under train.memory_limit_gib = 0.0625"),
              std::string::npos) << row.error.value_or("no error");
    EXPECT_GT(m.peak_reserved_bytes, 0);  // what it held when the step failed: the model, its optimizer
    EXPECT_LE(m.peak_reserved_bytes, 64 * MiB);
    EXPECT_FALSE(m.expandable_segments);
  }
  r = run_capped("--set train.memory_limit_gib=2 --set train.expandable_segments=true");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto [row, m] = facts(3);
  EXPECT_EQ(m.limit_bytes, 2048 * MiB);
  EXPECT_GT(m.peak_reserved_bytes, 0);
  EXPECT_LE(m.peak_reserved_bytes, 2048 * MiB);
  EXPECT_GT(m.outside_allocator_bytes, 0);
  EXPECT_EQ(m.needed_bytes, m.peak_reserved_bytes + m.outside_allocator_bytes);
  EXPECT_GT(m.device_bytes, m.needed_bytes);
  EXPECT_TRUE(m.expandable_segments);
  // The allocator's settings from the environment are recorded beside the spec's posture.
  const char* allocator = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(receipts::Store::open(db_).run_json(3)["env"]["pytorch_cuda_alloc_conf"],
            allocator != nullptr && *allocator ? allocator : "default");
}

// bf16 autocast with every loss backend: backward runs outside autocast, so a backend whose forward
// relied on autocast's casts must cast explicitly in its backward (the chunked loss once did not).
TEST_F(RunnerTest, Bf16AutocastTrainsWithEveryLossBackend) {
  for (const char* backend : {"reference", "chunked"}) {
    const auto r = run(spec({"train.steps=3", "train.warmup_steps=1", "train.dtype=\"bf16\"",
                             std::string("backends.loss=\"") + backend + "\""}));
    EXPECT_EQ(r.status, "ok") << backend << ": " << r.error;
  }
}

// [profile] on a CPU run: CUPTI cannot trace, the run is not harmed, and the receipt says why, what
// was measured anyway (step times inside vs outside the window) and what was not (no kernels, no
// trace, no allocator rows: RSS per step stays in steps.rss_bytes).
TEST_F(RunnerTest, ProfilingOnTheCpuIsRecordedAsUnavailableNotFatal) {
  const auto r = run(spec({"train.steps=8", "train.warmup_steps=1", "profile.enabled=true", "profile.start_step=3",
                           "profile.steps=2", "compile.cuda_graphs=true"}));
  ASSERT_EQ(r.status, "ok") << r.error;
  auto store = receipts::Store::open(db_);
  const auto doc = store.run_json(r.run_id);
  EXPECT_EQ(doc["env"]["profiling"],
            "unavailable (no CUDA device: the run is on the CPU and CUPTI traces GPU work only)");
  ASSERT_EQ(doc["profile"]["windows"].size(), 1u);
  const auto& window = doc["profile"]["windows"][0];
  EXPECT_EQ(window["status"], "unavailable");
  EXPECT_EQ(window["start_step"], 3);
  EXPECT_EQ(window["steps"], 2);
  EXPECT_TRUE(window["records"].is_null());
  EXPECT_TRUE(doc["kernels"].empty());
  EXPECT_TRUE(doc["artifacts"].empty());
  EXPECT_TRUE(doc["memory"].empty());
  for (const auto& b : doc["backends"]) EXPECT_TRUE(b["observed"].is_null()) << b.dump();

  const auto& profile = doc["run"]["summary"]["facts"]["profile"];
  EXPECT_EQ(profile["status"], "unavailable");
  EXPECT_NE(profile["memory_by_phase"].get<std::string>().find("unavailable"), std::string::npos);
  EXPECT_TRUE(profile["median_step_ms_inside_window"].is_number()) << profile.dump();
  EXPECT_TRUE(profile["median_step_ms_outside_window"].is_number()) << profile.dump();
  EXPECT_TRUE(profile["overhead_pct"].is_number());

  EXPECT_EQ(doc["env"]["compile.warmup_steps"], "1");
  EXPECT_GT(std::stod(doc["env"]["compile.first_step_ms"].get<std::string>()), 0.0);
  EXPECT_EQ(doc["env"]["compile.cuda_graphs_requested"], "true");
  EXPECT_EQ(doc["env"]["compile.cuda_graphs_achieved"], "false");
  EXPECT_NE(doc["env"]["compile.cuda_graphs_reason"].get<std::string>().find("need a CUDA device"), std::string::npos);
}

TEST_F(RunnerTest, ProfilingDisabledWritesNoWindow) {
  const auto r = run(spec({"train.steps=3", "train.warmup_steps=1"}));
  ASSERT_EQ(r.status, "ok") << r.error;
  const auto doc = receipts::Store::open(db_).run_json(r.run_id);
  EXPECT_TRUE(doc["profile"]["windows"].empty());
  EXPECT_EQ(doc["env"]["profiling"], "disabled ([profile] enabled = false)");
}
