// tests/harness/distributed_test.cpp: data parallel on the CPU with Gloo, through the `ablate` binary
// as users start it (`ablate launch`, torchrun): 2 ranks train as 1 rank on the same global batch;
// a rank killed mid-run or hung fails the job within the timeout, naming the rank, with no process
// left; nproc against the launched world fails closed; sharded and expert-parallel checkpoints resume
// at the same layout bit for bit and at another one within the training tolerance. On a machine with 2
// GPUs (self-skipping elsewhere): the whole step captured with its NCCL collectives in every sharding stage trains as the
// eager step does, expert parallelism refuses capture with its reason, and a rank that hangs during
// the replays fails the job within the timeout. GPU (NCCL) figures come from the GPU machine.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "base/remove_tree.h"
#include "harness/train/checkpoint.h"
#include "receipts/store.h"
#include "tests/cli_runner.h"

namespace fs = std::filesystem;
using ablate::testing::run_cli;
using ablate::testing::run_shell;

namespace {

class DistributedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ablate-dist-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ablate::base::remove_tree(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "receipts.db").string();
    // tiny without its MoE block (pattern AMDR): its routing and capacity are per-token decisions that
    // summation order can flip, so the dense pattern is the plain data-parallel baseline; the MoE tests
    // below set the pattern back (their load-balancing counts are the job's). Synthetic data: no corpus.
    spec_ = dir_ / "dp.toml";
    std::ofstream(spec_) << "[experiment]\nname = \"dp-test\"\nseed = 7\n"
                            "[model]\nconfig = \"tiny\"\npattern = \"AMDR\"\nbatch_size = 2\n"
                            "[data]\nsource = \"synthetic\"\n"
                            "[train]\nsteps = 6\nwarmup_steps = 2\nlr = 3e-3\nlr_warmup_steps = 2\n"
                            "device = \"cpu\"\ndtype = \"fp32\"\nlog_every = 0\n"
                            "[distributed]\nnproc = 2\nbackend = \"gloo\"\ntimeout_s = 20\n";
  }
  void TearDown() override { ablate::base::remove_tree(dir_); }

  std::string ablate(const std::string& args) { return "--db " + db_ + " " + args; }

  // rank 0's losses and the rows of each rank, from the newest run.
  struct Recorded {
    int64_t id = 0;
    std::string status, error;
    std::vector<double> loss, grad_norm;
    std::map<int64_t, int64_t> rows_per_rank;
    nlohmann::json summary;
  };
  Recorded newest() {
    auto store = ablate::receipts::Store::open(db_);
    const auto runs = store.list_runs();
    EXPECT_FALSE(runs.empty());
    Recorded r;
    if (runs.empty()) return r;
    r.id = runs.front().id;
    const auto j = store.run_json(r.id);
    r.status = j["run"]["status"].get<std::string>();
    r.error = j["run"]["error"].is_null() ? "" : j["run"]["error"].get<std::string>();
    for (const auto& st : j["steps"]) {
      ++r.rows_per_rank[st["rank"].get<int64_t>()];
      if (st["rank"].get<int64_t>() == 0) {
        r.loss.push_back(st["loss"].get<double>());
        r.grad_norm.push_back(st["grad_norm"].get<double>());
      }
    }
    r.summary = j["run"]["summary"];
    return r;
  }

  // `ablate launch` of the spec with `sets`: it exits 0 and its run is ok with `steps` rows of rank 0
  // (call through ASSERT_NO_FATAL_FAILURE).
  void launch_ok(const std::string& sets, size_t steps, Recorded* out) {
    const auto job = run_cli(ablate("launch " + spec_.string() + sets));
    ASSERT_EQ(job.rc, 0) << job.out;
    *out = newest();
    ASSERT_EQ(out->status, "ok") << out->error;
    ASSERT_EQ(out->loss.size(), steps);
  }

  // `ablate launch` of 50 steps with ABLATE_TEST_FAULT set (harness/train/stages.cpp), timed.
  struct Job {
    int rc;
    std::string out;
    double seconds;
  };
  Job launch_with_fault(const std::string& fault, const std::string& extra_sets) {
    const auto t0 = std::chrono::steady_clock::now();
    // timeout(1) turns fault handling that hangs into a failed expectation below (rc 124, the time),
    // not ctest's 900 s timeout; the ranks die with the launcher (PR_SET_PDEATHSIG).
    const auto r = run_shell("ABLATE_TEST_FAULT=" + fault + " timeout -k 5 150 " + std::string(ABLATE_BINARY_DIR) +
                             "/ablate " + ablate("launch --grace 2 " + spec_.string() + " --set train.steps=50" + extra_sets));
    return {r.rc, r.out, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }

  fs::path dir_, spec_;
  std::string db_;
};

// Each step's value within `relative` of the baseline's (the series of equal length, checked by the caller).
void expect_steps_near(const std::vector<double>& got, const std::vector<double>& baseline, double relative) {
  for (size_t i = 0; i < baseline.size() && i < got.size(); ++i)
    EXPECT_NEAR(got[i], baseline[i], relative * std::abs(baseline[i])) << "step " << i;
}

// Every pid the launcher reported is gone.
void expect_no_rank_left(const std::string& launcher_output) {
  const std::regex pids_line(R"(\(pids ([0-9 ]+)\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(launcher_output, m, pids_line)) << launcher_output;
  std::istringstream in(m[1].str());
  for (pid_t pid; in >> pid;) EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "rank pid " << pid << " still exists";
}

}  // namespace

TEST_F(DistributedTest, TwoRanksTrainLikeOneRankOnTheSameGlobalBatch) {
  const auto one = run_cli(ablate("run " + spec_.string() + " --set distributed.nproc=1 --set model.batch_size=4"));
  ASSERT_EQ(one.rc, 0) << one.out;
  const auto single = newest();
  const auto two = run_cli(ablate("launch " + spec_.string()));
  ASSERT_EQ(two.rc, 0) << two.out;
  const auto dp = newest();
  ASSERT_EQ(dp.status, "ok") << dp.error;
  ASSERT_EQ(single.loss.size(), 6u);
  ASSERT_EQ(dp.loss.size(), 6u);
  // fp32 on the CPU: the two differ only in summation order (a mean of two 2-row means against one
  // 4-row mean, gradients summed by Gloo), a few ulps per step that AdamW carries along: 1e-5 relative
  // is ~100x that after 6 steps, and far below what one wrong row or a missed gradient bucket moves
  // (the first step's loss already differs by ~1e-2 with another data slice).
  expect_steps_near(dp.loss, single.loss, 1e-5);
  EXPECT_EQ(dp.rows_per_rank.at(0), 6);
  EXPECT_EQ(dp.rows_per_rank.at(1), 6);
  const auto& d = dp.summary["facts"]["distributed"];
  EXPECT_EQ(d["world_size"], 2);
  EXPECT_EQ(d["backend"], "gloo");
  EXPECT_EQ(d["launcher"], "ablate launch");
  EXPECT_EQ(d["per_rank"].size(), 2u);
  EXPECT_GE(d["straggler_ratio"].get<double>(), 1.0);
  // Gloo cannot time its collectives (comm_share is NCCL's); its exposed wait is the host's.
  EXPECT_TRUE(d["comm_share"].is_null()) << d.dump();
  EXPECT_GE(d["comm_wait_share"].get<double>(), 0.0);
  // No GPU traced: exposed communication is unknown on every rank, not 0.
  EXPECT_TRUE(d["exposed_comm_share"].is_null()) << d.dump();
  for (const auto& r : d["per_rank"]) EXPECT_TRUE(r["exposed_comm_share"].is_null()) << d.dump();
  EXPECT_GE(d["per_rank"][1]["median_comm_wait_ms"].get<double>(), 0.0);
  // Stragglers by collective wait: every rank's wait beyond the quickest is >= 0, and the rank named
  // as the straggler (the one the other waited for) waited least.
  ASSERT_TRUE(d["straggler_rank"].is_number_integer()) << d.dump();
  const auto straggler = d["straggler_rank"].get<size_t>();
  for (const auto& r : d["per_rank"]) {
    EXPECT_GE(r["collective_wait_ms"].get<double>(), 0.0) << d.dump();
    EXPECT_LE(d["per_rank"][straggler]["collective_wait_ms"].get<double>(), r["collective_wait_ms"].get<double>());
  }
  EXPECT_GE(d["straggler_wait_share"].get<double>(), 0.0);
  EXPECT_EQ(dp.summary["facts"]["tokens_per_step"], 2 * 2 * 128);  // the job's: 2 ranks x 2 rows x T 128
  // Each rank's CPU thread pool is its share of the cores (OMP_NUM_THREADS, unless the user set it).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    EXPECT_EQ(ablate::receipts::Store::open(db_).run_json(dp.id)["env"]["intra_op_threads"],
              std::to_string(std::max(1u, cores / 2)));
  }
  expect_no_rank_left(two.out);
}

// Validation loss is the job's: every rank evaluates its share of the same held-out rows (padded so
// each runs as many forwards), and the token-weighted mean over the ranks equals one process's over
// all of them. Trained alike (1e-5 above), the evaluated losses agree to the same 1e-5; under "full"
// every unit is gathered for the evaluation as for a checkpoint.
TEST_F(DistributedTest, ValidationLossIsTheJobsOverTheSameHeldOutRows) {
  const std::string eval = " --set train.eval_every=3 --set train.eval_tokens=700";
  const auto one = run_cli(ablate("run " + spec_.string() + " --set distributed.nproc=1 --set model.batch_size=4" + eval));
  ASSERT_EQ(one.rc, 0) << one.out;
  auto store = ablate::receipts::Store::open(db_);
  const auto single = store.run_json(newest().id)["evaluations"];
  ASSERT_EQ(single.size(), 2u);  // after steps 3 and 6
  EXPECT_EQ(single[1]["step"], 6);
  EXPECT_EQ(single[0]["tokens"], 6 * 128);  // ceil(700 / 128) = 6 rows of 128 targets
  for (const char* stage : {"none", "full"}) {
    SCOPED_TRACE(stage);
    const auto two = run_cli(ablate("launch " + spec_.string() + eval + " --set distributed.sharding=\"" + stage + "\""));
    ASSERT_EQ(two.rc, 0) << two.out;
    const auto dp = newest();
    ASSERT_EQ(dp.status, "ok") << dp.error;
    const auto evals = store.run_json(dp.id)["evaluations"];
    ASSERT_EQ(evals.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(evals[i]["tokens"], single[i]["tokens"]);
      EXPECT_NEAR(evals[i]["loss"].get<double>(), single[i]["loss"].get<double>(), 1e-5 * single[i]["loss"].get<double>());
    }
    EXPECT_EQ(dp.summary["facts"]["final_validation_loss"], evals[1]["loss"]);
  }
}

// ZeRO-1 trains as the unsharded job does: the same sums of the same gradients (two ranks: one addition
// each, in either collective), the same elementwise AdamW on each rank's slices. The losses agree to
// 1e-6 relative (a few fp32 ulps: which elements of a slice take ATen's vector or scalar tail path;
// 10x below the 1-vs-2-rank tolerance above, far below what a wrong shard or a stale gather moves).
// The gradient norm is ~1.2 M squares summed in another order (per bucket shard, then over ranks):
// 1e-5 relative, where the two orders measured 1.2e-6 apart; with clipping on, that is the clip
// scale's difference too, and the losses still agree to 1e-6. ZeRO-2 reduces the same buckets (staged
// instead of kept, the padding zeroed) into the same shards: equal to ZeRO-1 bit for bit.
TEST_F(DistributedTest, ShardedStagesTrainLikeTheUnshardedJob) {
  for (const char* clip : {"0", "1.0"}) {
    SCOPED_TRACE(std::string("train.grad_clip = ") + clip);
    // d_model 256 (about 5 MB of parameters) in 1 MB buckets: several buckets, shard edges inside parameters.
    const std::string sets =
        std::string(" --set model.d_model=256 --set distributed.bucket_mb=1 --set train.grad_clip=") + clip;
    const auto plain = run_cli(ablate("launch " + spec_.string() + sets));
    ASSERT_EQ(plain.rc, 0) << plain.out;
    const auto none = newest();
    ASSERT_EQ(none.loss.size(), 6u);
    const auto& plain_layout = none.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(plain_layout["stage"], "none") << plain_layout.dump();
    std::vector<double> zero1_losses;
    for (const char* stage : {"optimizer", "gradients", "full"}) {
      SCOPED_TRACE(std::string("distributed.sharding = ") + stage);
      Recorded sharded;
      ASSERT_NO_FATAL_FAILURE(launch_ok(sets + " --set distributed.sharding=" + stage, 6, &sharded));
      expect_steps_near(sharded.loss, none.loss, 1e-6);
      expect_steps_near(sharded.grad_norm, none.grad_norm, 1e-5);
      if (zero1_losses.empty()) {
        zero1_losses = sharded.loss;
      } else if (std::string(stage) == "gradients") {
        EXPECT_EQ(sharded.loss, zero1_losses) << "ZeRO-2 reduces what ZeRO-1 does";
      }
      EXPECT_EQ(sharded.rows_per_rank.at(1), 6);
      const auto& layout = sharded.summary["facts"]["distributed"]["sharding"];
      EXPECT_EQ(layout["stage"], stage) << layout.dump();
      EXPECT_GT(layout["buckets"].get<int64_t>(), 1) << layout.dump();
      // Each rank keeps the moments of half the parameters (plus its share of the padding at most).
      const auto padding_bytes = 4 * layout["padding_elements"].get<int64_t>();
      const auto whole = plain_layout["optimizer_state_bytes"].get<int64_t>();
      const auto half = layout["optimizer_state_bytes"].get<int64_t>();
      EXPECT_GE(half, whole / 2) << layout.dump();
      EXPECT_LE(half, whole / 2 + 2 * padding_bytes) << layout.dump();
      // ZeRO-1 keeps every (padded) gradient bucket, ZeRO-2 its half of them.
      const auto all_gradients = plain_layout["gradient_bytes"].get<int64_t>();
      const auto kept = layout["gradient_bytes"].get<int64_t>();
      if (std::string(stage) == "optimizer") {
        EXPECT_EQ(kept, all_gradients + padding_bytes) << layout.dump();
      } else {
        EXPECT_EQ(kept, (all_gradients + padding_bytes) / 2) << layout.dump();
      }
      // ZeRO-3 keeps half the parameters too (one bucket a unit: embedding, 4 layers, final norm + head).
      const auto parameters = layout["parameter_bytes"].get<int64_t>();
      if (std::string(stage) == "full") {
        EXPECT_EQ(parameters, (all_gradients + padding_bytes) / 2) << layout.dump();
        EXPECT_EQ(layout["buckets"], 6) << layout.dump();
      } else {
        EXPECT_EQ(parameters, all_gradients + padding_bytes) << layout.dump();
      }
      // The buckets go through a reduce-scatter and an all-gather a step instead of an all-reduce.
      EXPECT_EQ(plain_layout["all_reduce_bytes"], all_gradients) << plain_layout.dump();
      EXPECT_EQ(plain_layout["reduce_scatter_bytes"], 0) << plain_layout.dump();
      EXPECT_EQ(layout["all_reduce_bytes"], 0) << layout.dump();
      EXPECT_EQ(layout["reduce_scatter_bytes"], all_gradients + padding_bytes) << layout.dump();
      if (std::string(stage) == "full") {  // the layers gathered again for backward
        EXPECT_GT(layout["all_gather_bytes"].get<int64_t>(), all_gradients + padding_bytes) << layout.dump();
        EXPECT_LT(layout["all_gather_bytes"].get<int64_t>(), 2 * (all_gradients + padding_bytes)) << layout.dump();
      } else {
        EXPECT_EQ(layout["all_gather_bytes"], all_gradients + padding_bytes) << layout.dump();
      }
    }
  }
}

// Gradients summed in bf16 (distributed.reduce_dtype): each rank's g / 2 and their sum are rounded to
// bf16, a relative error of at most 2^-9 each (round to nearest, 8 significant bits), so at most about
// 2 x 2^-9 = 3.9e-3 on every element of the reduced gradient and on its norm (of the widened bf16
// shards): within 4e-3 of the fp32 job's, and not equal to it (the bytes really were bf16). The losses of
// 6 steps stay within 5e-4 (AdamW's steps, m / sqrt(v), barely move under such an error; 5e-5 was
// seen at d_model 256 on the CPU, against 1e-6 for fp32 sharding above). The receipt says bf16 and
// half the reduce-scatter bytes.
TEST_F(DistributedTest, ShardedStagesReducingInBf16TrainNearTheFp32Job) {
  const std::string sets = " --set model.d_model=256 --set distributed.bucket_mb=1 --set train.grad_clip=1.0";
  Recorded fp32;
  ASSERT_NO_FATAL_FAILURE(launch_ok(sets + " --set distributed.sharding=optimizer", 6, &fp32));
  const auto& fp32_layout = fp32.summary["facts"]["distributed"]["sharding"];
  EXPECT_EQ(fp32_layout["reduce_dtype"], "fp32") << fp32_layout.dump();
  for (const char* stage : {"optimizer", "gradients", "full"}) {
    SCOPED_TRACE(std::string("distributed.sharding = ") + stage);
    Recorded bf16;
    ASSERT_NO_FATAL_FAILURE(
        launch_ok(sets + " --set distributed.sharding=" + stage + " --set distributed.reduce_dtype=bf16", 6, &bf16));
    expect_steps_near(bf16.loss, fp32.loss, 5e-4);
    expect_steps_near(bf16.grad_norm, fp32.grad_norm, 4e-3);
    EXPECT_NE(bf16.grad_norm, fp32.grad_norm) << "the norm of bf16 sums equals the fp32 one: was it reduced in bf16?";
    const auto& layout = bf16.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(layout["reduce_dtype"], "bf16") << layout.dump();
    EXPECT_EQ(2 * layout["reduce_scatter_bytes"].get<int64_t>(), fp32_layout["reduce_scatter_bytes"].get<int64_t>())
        << layout.dump();
    if (std::string(stage) == "optimizer") {  // the bf16 buckets (half the bytes) and the fp32 half a rank widens into
      const auto fp32_buckets = fp32_layout["gradient_bytes"].get<int64_t>();
      EXPECT_EQ(layout["gradient_bytes"].get<int64_t>(), fp32_buckets / 2 + fp32_buckets / 2) << layout.dump();
    }
  }
}

// GEMM weights kept in bf16 (distributed.param_dtype): under bf16 autocast the GEMMs read each weight
// rounded to bf16 either way (autocast rounds the fp32 master once a forward; here the optimizer's update
// is rounded so), and on the CPU the weight gradients are bf16 either way (autocast's cast widens them
// exactly), so every stage takes the same steps as with fp32 parameters: the losses bit for bit (no
// clipping, whose scale would carry the norm's last bits), the gradient norms to 1e-6 (the bf16 weights
// have buckets of their own, so the norm sums the shards in another order). A parameter wrongly declared
// a GEMM weight (a norm or bias read in fp32) would be rounded and change the losses. The gathers carry
// the GEMM weights in half the bytes and a rank keeps less.
TEST_F(DistributedTest, GemmWeightsKeptInBf16TrainAsFp32ParametersUnderAutocast) {
  const std::string sets = " --set train.dtype=bf16 --set model.d_model=256 --set distributed.bucket_mb=1"
                           " --set train.grad_clip=0 --set model.pattern=AEMDR --set backends.moe_dispatch=grouped_mm";
  // Then: reduced in bf16 (the bf16 slots handed back as .grad), and expert parallelism over both ranks,
  // whose experts' sync keeps its bf16 experts unsharded.
  for (const std::string stage : {"optimizer", "gradients", "full", "full --set distributed.reduce_dtype=bf16",
                                  "optimizer --set distributed.expert_parallel=2"}) {
    SCOPED_TRACE("distributed.sharding = " + stage);
    Recorded fp32, bf16;
    ASSERT_NO_FATAL_FAILURE(launch_ok(sets + " --set distributed.sharding=" + stage, 6, &fp32));
    ASSERT_NO_FATAL_FAILURE(
        launch_ok(sets + " --set distributed.sharding=" + stage + " --set distributed.param_dtype=bf16", 6, &bf16));
    EXPECT_EQ(bf16.loss, fp32.loss);
    expect_steps_near(bf16.grad_norm, fp32.grad_norm, 1e-6);
    const auto& a = fp32.summary["facts"]["distributed"]["sharding"];
    const auto& b = bf16.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(a["param_dtype"], "fp32") << a.dump();
    EXPECT_EQ(b["param_dtype"], "bf16") << b.dump();
    // Most of the model is GEMM weights: the gathers carry a little over half the bytes.
    const auto gathered = a["all_gather_bytes"].get<int64_t>(), gathered_bf16 = b["all_gather_bytes"].get<int64_t>();
    EXPECT_GT(2 * gathered_bf16, gathered) << b.dump();
    EXPECT_LT(gathered_bf16, gathered * 6 / 10) << b.dump();
    // Parameters kept a rank: ZeRO-1/2 keep every parameter whole, a GEMM weight element as 2 bytes of bf16
    // and, over 2 ranks, half of its 4-byte master: as many bytes as fp32 (at 4 ranks 3 bytes, at 8 2.5);
    // ZeRO-3 keeps its shards, a GEMM weight's as its master and the bf16 copy the gathers send.
    const auto kept = a["parameter_bytes"].get<int64_t>(), kept_bf16 = b["parameter_bytes"].get<int64_t>();
    const auto padding = [](const nlohmann::json& layout) { return layout["padding_elements"].get<int64_t>(); };
    if (stage.find("expert_parallel") != std::string::npos) {
      EXPECT_GT(kept_bf16, kept) << "a rank's experts whole in bf16 and fp32: " << b.dump();
    } else if (stage.rfind("full", 0) == 0) {
      EXPECT_GT(kept_bf16, kept) << b.dump();
      EXPECT_LT(kept_bf16, kept * 3 / 2) << b.dump();
    } else {
      EXPECT_EQ(kept_bf16 - 4 * padding(b), kept - 4 * padding(a)) << b.dump();
    }
  }
}

// bf16 GEMM weights need bf16 autocast, and a sharded stage to keep their fp32 masters: refused otherwise,
// before anything runs (the spec when it says so, the run when train.dtype = "auto" means fp32).
TEST_F(DistributedTest, GemmWeightsInBf16AreRefusedWithoutAutocastOrSharding) {
  for (const std::string& sets : {std::string(" --set distributed.sharding=optimizer --set train.dtype=auto"),
                                  std::string(" --set distributed.sharding=optimizer --set train.dtype=fp32"),
                                  std::string(" --set train.dtype=bf16")}) {
    SCOPED_TRACE(sets);
    const auto job = run_cli(ablate("launch " + spec_.string() + sets + " --set distributed.param_dtype=bf16"));
    EXPECT_EQ(job.rc, 2) << job.out;
    EXPECT_NE(job.out.find("distributed.param_dtype = \"bf16\""), std::string::npos) << job.out;
  }
}

// Expert parallelism reduced in bf16: 4 ranks in two expert groups, so the experts' sync sums over its
// expert-data group of 2 (divided by the job's 4 in the hook) and the shared weights' over 4 ranks: per
// element the hook's rounding and up to 3 roundings of NCCL's (or Gloo's) running sum, at most 4 x 2^-9 =
// 7.8e-3 relative on the norm; the losses as above. Both syncs' reduce-scatters carry bf16.
TEST_F(DistributedTest, ExpertParallelReducingInBf16TrainsNearTheFp32Job) {
  const std::string job = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm"
                          " --set distributed.expert_parallel=2 --set train.grad_clip=0.05"
                          " --set distributed.nproc=4 --set model.batch_size=1";
  for (const std::string stage : {"optimizer", "gradients"}) {
    SCOPED_TRACE("distributed.sharding = " + stage);
    Recorded fp32, bf16;
    ASSERT_NO_FATAL_FAILURE(launch_ok(job + " --set distributed.sharding=" + stage, 6, &fp32));
    ASSERT_NO_FATAL_FAILURE(
        launch_ok(job + " --set distributed.sharding=" + stage + " --set distributed.reduce_dtype=bf16", 6, &bf16));
    expect_steps_near(bf16.loss, fp32.loss, 5e-4);
    expect_steps_near(bf16.grad_norm, fp32.grad_norm, 7.8e-3);
    EXPECT_NE(bf16.grad_norm, fp32.grad_norm);
    const auto& a = fp32.summary["facts"]["distributed"]["sharding"];
    const auto& b = bf16.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(b["reduce_dtype"], "bf16") << b.dump();
    EXPECT_EQ(2 * b["reduce_scatter_bytes"].get<int64_t>(), a["reduce_scatter_bytes"].get<int64_t>()) << b.dump();
  }
}

// A sharded job's checkpoint holds AdamW's state per parameter (gathered from the ranks): resuming it
// sharded continues bit for bit (fp32 on the CPU; the same shards come back), and resuming it unsharded
// continues as the unsharded job would (1e-6, as above): the file does not depend on the stage.
TEST_F(DistributedTest, ShardedCheckpointsResumeShardedOrNot) {
  const std::string sets = " --set model.d_model=256 --set distributed.bucket_mb=1 --set distributed.sharding=optimizer";
  const auto whole = run_cli(ablate("launch " + spec_.string() + sets));
  ASSERT_EQ(whole.rc, 0) << whole.out;
  const auto straight = newest();
  ASSERT_EQ(straight.loss.size(), 6u);
  const auto saved = run_cli(ablate("launch " + spec_.string() + sets + " --set train.checkpoint_every=3"));
  ASSERT_EQ(saved.rc, 0) << saved.out;
  ASSERT_EQ(newest().loss, straight.loss) << "saving a checkpoint changed the run";
  const auto resumed = run_cli(ablate("launch " + spec_.string() + sets + " --set train.resume=true"));
  ASSERT_EQ(resumed.rc, 0) << resumed.out;
  const auto sharded = newest();
  ASSERT_EQ(sharded.status, "ok") << sharded.error;
  ASSERT_EQ(sharded.loss.size(), 3u) << "steps 3..5 after the step-3 checkpoint";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sharded.loss[i], straight.loss[3 + i]) << "step " << 3 + i;
  // The step-3 checkpoint resumed under another stage: steps 3..5 of the resumed run.
  auto resumed_as = [&](const std::string& stage) {
    const auto job = run_cli(ablate("launch " + spec_.string() + " --set model.d_model=256 --set distributed.bucket_mb=1" +
                                    " --set distributed.sharding=" + stage + " --set train.resume=true"));
    EXPECT_EQ(job.rc, 0) << job.out;
    return newest().loss;
  };
  auto expect_close_to_straight = [&](const std::vector<double>& loss) {
    ASSERT_EQ(loss.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(loss[i], straight.loss[3 + i], 1e-6 * std::abs(straight.loss[3 + i])) << "step " << 3 + i;
  };
  // ZeRO-2 takes the same slices back and reduces what ZeRO-1 does: bit for bit too.
  EXPECT_EQ(resumed_as("gradients"), sharded.loss);
  // ZeRO-3 buckets by layer, so its norm sums in another order: to 1e-6, as against none.
  expect_close_to_straight(resumed_as("full"));
  expect_close_to_straight(resumed_as("none"));
}

// A checkpoint of bf16 GEMM weights holds their fp32 masters (each rank's shard gathered): the job
// resumed in bf16 continues bit for bit, and resumed with fp32 parameters it continues as the fp32 job
// from the same checkpoint would (the same masters; bf16 autocast rounds them as the bf16 job did: equal).
TEST_F(DistributedTest, CheckpointsOfBf16GemmWeightsHoldTheFp32Masters) {
  const std::string sets = " --set train.dtype=bf16 --set model.d_model=256 --set distributed.bucket_mb=1"
                           " --set train.grad_clip=0 --set distributed.sharding=full";
  const std::string bf16 = " --set distributed.param_dtype=bf16";
  const auto whole = run_cli(ablate("launch " + spec_.string() + sets + bf16));
  ASSERT_EQ(whole.rc, 0) << whole.out;
  const auto straight = newest();
  ASSERT_EQ(straight.loss.size(), 6u);
  const auto saved = run_cli(ablate("launch " + spec_.string() + sets + bf16 + " --set train.checkpoint_every=3"));
  ASSERT_EQ(saved.rc, 0) << saved.out;
  ASSERT_EQ(newest().loss, straight.loss) << "saving a checkpoint changed the run";
  for (const std::string& resume_as : {bf16, std::string()}) {
    SCOPED_TRACE(resume_as.empty() ? "resumed with fp32 parameters" : "resumed in bf16");
    const auto resumed = run_cli(ablate("launch " + spec_.string() + sets + resume_as + " --set train.resume=true"));
    ASSERT_EQ(resumed.rc, 0) << resumed.out;
    const auto r = newest();
    ASSERT_EQ(r.status, "ok") << r.error;
    ASSERT_EQ(r.loss.size(), 3u) << "steps 3..5 after the step-3 checkpoint";
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(r.loss[i], straight.loss[3 + i]) << "step " << 3 + i;
  }
}

// The declared 2 B and 8 B experiments as users start them, shrunk by --set to tiny widths (their 24
// layers and every other key as declared), on the CPU: nam56r-medium alone, nam56r-large over two Gloo
// ranks in its sharding stage. Their fast backends are not built for the CPU: without strict, each
// falls back to its reference and the receipt says so.
TEST_F(DistributedTest, NamedLargeConfigurationsTrainAtTinyWidth) {
  const std::string tiny_width =
      " --set model.d_model=64 --set model.seq_len=32 --set model.batch_size=2 --set model.vocab=512"
      " --set model.attention.heads=2 --set model.attention.nope_dim=16 --set model.attention.rope_dim=8"
      " --set model.attention.v_dim=16 --set model.attention.q_lora=32 --set model.attention.kv_lora=32"
      " --set model.moe.experts=4 --set model.moe.ffn=64 --set model.mamba.head_dim=16 --set model.mamba.state=16"
      " --set model.mamba.chunk=16 --set model.recurrent.width=64 --set train.steps=3 --set train.warmup_steps=1"
      " --set train.device=cpu --set train.dtype=fp32 --set data.source=synthetic --set backends.strict=false"
      " --set train.log_every=0";
  const fs::path experiments = fs::path(ABLATE_SOURCE_DIR) / "experiments";
  for (const std::string config : {"nam56r-medium", "nam56r-large"}) {
    SCOPED_TRACE(config);
    const bool large = config == "nam56r-large";
    const std::string spec = (experiments / (config + ".toml")).string();
    const auto job = run_cli(ablate((large ? "launch " : "run ") + spec + tiny_width +
                                    (large ? " --set distributed.nproc=2 --set distributed.backend=gloo" : "")));
    ASSERT_EQ(job.rc, 0) << job.out;
    const auto rec = newest();
    ASSERT_EQ(rec.status, "ok") << rec.error;
    EXPECT_EQ(rec.loss.size(), 3u);
    for (double loss : rec.loss) EXPECT_TRUE(std::isfinite(loss)) << loss;
    const auto& model = rec.summary["facts"]["model"];
    EXPECT_EQ(model["config"], config) << model.dump();
    EXPECT_EQ(model["pattern"], "AEMEAEMEAEMRAEMEAEMEAEMR") << model.dump();
    EXPECT_EQ(model["config_overridden"], true) << model.dump();
    if (large) {
      EXPECT_EQ(rec.rows_per_rank.at(1), 3);
      EXPECT_EQ(rec.summary["facts"]["distributed"]["sharding"]["stage"], "gradients");
    }
  }
}

// The MoE pattern with expert parallelism over 2 ranks (tiny: 4 experts, 2 a rank).
const std::string kExpertParallel2 =
    " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm --set distributed.expert_parallel=2";

// Expert parallelism trains as replicated experts do on the same global batch: each token meets the same
// expert weights either way; only the sums of the expert gradients change order (over rows of both
// ranks in one GEMM, against each rank's rows then an all-reduce), a few fp32 ulps a step: 1e-5
// relative, the data-parallel tolerance above, far below what one misrouted row moves (the first
// step's loss differs by ~1e-3 when a rank's rows go to the wrong expert). And since the load-balancing
// counts are the job's, the replicated MoE trains as one process on the whole batch does (dropless).
TEST_F(DistributedTest, ExpertParallelTrainsLikeReplicatedExperts) {
  const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm";
  const auto one = run_cli(ablate("run " + spec_.string() + moe + " --set distributed.nproc=1 --set model.batch_size=4"));
  ASSERT_EQ(one.rc, 0) << one.out;
  const auto single = newest();
  for (const int64_t world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string job_sets = moe + " --set distributed.nproc=" + std::to_string(world) +
                                 " --set model.batch_size=" + std::to_string(4 / world);
    Recorded replicated;
    ASSERT_NO_FATAL_FAILURE(launch_ok(job_sets, 6, &replicated));
    expect_steps_near(replicated.loss, single.loss, 1e-5);
    const auto& plain_facts = replicated.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(plain_facts["expert_parallel"], 1) << plain_facts.dump();
    EXPECT_EQ(plain_facts["all_to_all_bytes"], 0) << plain_facts.dump();
    for (int64_t ep = 2; ep <= world; ep *= 2) {
      SCOPED_TRACE("distributed.expert_parallel = " + std::to_string(ep));
      Recorded spread;
      ASSERT_NO_FATAL_FAILURE(launch_ok(job_sets + " --set distributed.expert_parallel=" + std::to_string(ep), 6, &spread));
      expect_steps_near(spread.loss, replicated.loss, 1e-5);
      expect_steps_near(spread.grad_norm, replicated.grad_norm, 1e-5);
      EXPECT_EQ(spread.rows_per_rank.size(), static_cast<size_t>(world));
      const auto& facts = spread.summary["facts"]["distributed"];
      EXPECT_EQ(facts["sharding"]["expert_parallel"], ep) << facts.dump();
      // Rows out and back, forward and backward, plus the loads: more than one layer's rows one way.
      EXPECT_GT(facts["sharding"]["all_to_all_bytes"].get<int64_t>(), 4 * 128 * 64 * 2 / world) << facts.dump();
      // The expert weights' gradients stay with the ranks holding them: fewer all-reduced bytes.
      EXPECT_LT(facts["sharding"]["all_reduce_bytes"].get<int64_t>(), plain_facts["all_reduce_bytes"].get<int64_t>());
      EXPECT_TRUE(facts["per_rank"][0]["median_all_to_all_ms"].is_null()) << "Gloo does not time its collectives";
    }
  }
}

// Under a capacity factor every rank sends every expert a fixed capacity of rows (its kept slots, then
// zero rows of weight 0), and the experts run the kept rows alone (their counts go ahead): the same
// training as replicated experts within ExpertParallelTrainsLikeReplicatedExperts' 1e-5 (the same slots
// dropped, decided on each token's rank), and a step's all-to-all bytes are fixed by the shapes alone:
// tiny's 4 experts, 2 x 128 tokens a rank, top-2 -> 512 slots, capacity ceil(0.5 x 512 / 4) = 64 rows an
// expert, so 256 rows of d 64 fp32 out and back and their routing weights, forward and backward (the
// backward sends each one's gradient back): 2 x (2 x 256 x 64 + 256) x 4 bytes for the one E layer, and
// its 4 kept counts (int64) forward, at 2 experts a rank (2 ranks) as at 1 (4 ranks).
TEST_F(DistributedTest, ExpertParallelUnderACapacityTrainsLikeReplicatedExperts) {
  for (const int64_t world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world) + ", distributed.expert_parallel = " + std::to_string(world));
    const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm"
                            " --set model.moe.capacity_factor=0.5 --set distributed.nproc=" + std::to_string(world);
    Recorded replicated, spread;
    ASSERT_NO_FATAL_FAILURE(launch_ok(moe, 6, &replicated));
    ASSERT_NO_FATAL_FAILURE(launch_ok(moe + " --set distributed.expert_parallel=" + std::to_string(world), 6, &spread));
    expect_steps_near(spread.loss, replicated.loss, 1e-5);
    expect_steps_near(spread.grad_norm, replicated.grad_norm, 1e-5);
    const auto& dropped = replicated.summary["facts"]["moe"]["dropped_slots"];
    ASSERT_TRUE(dropped.is_number_integer()) << replicated.summary["facts"].dump();
    EXPECT_GT(dropped.get<int64_t>(), 0) << "capacity 0.5 drops slots";
    EXPECT_EQ(spread.summary["facts"]["moe"]["dropped_slots"], dropped);
    const int64_t rows = 4 * 64, width = 64, fp32 = 4, experts = 4, int64 = 8;
    EXPECT_EQ(spread.summary["facts"]["distributed"]["sharding"]["all_to_all_bytes"],
              2 * (2 * rows * width + rows) * fp32 + experts * int64)
        << spread.summary["facts"]["distributed"].dump();
    EXPECT_EQ(spread.summary["facts"]["distributed"]["sharding"]["expert_exchange_chunks"], 1);
  }
}

// Both exchanges pipelined (distributed.expert_exchange_chunks = 2: each rank's 2 experts of tiny's 4 one
// a chunk, each chunk's rows travelling while the other's GEMMs run) are the same computation: each
// expert's rows still meet in one GEMM, and every row travels once each way, so the losses and norms
// equal the one-chunk job's exactly (fp32 on the CPU) and the bytes are the same (dropless: the same
// rows, at a capacity the same padded ones). A chunk's rows put at another chunk's place (a slot home to
// the wrong row) or an expert split over chunks would show at once. The receipt says how many chunks ran.
TEST_F(DistributedTest, ExpertParallelExchangePipelinedInChunksTrainsExactlyAsInOne) {
  for (const char* capacity : {"0", "0.5"}) {
    SCOPED_TRACE(std::string("model.moe.capacity_factor = ") + capacity);
    const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm --set distributed.nproc=2"
                            " --set distributed.expert_parallel=2 --set model.moe.capacity_factor=" + std::string(capacity);
    Recorded whole, piped;
    ASSERT_NO_FATAL_FAILURE(launch_ok(moe, 6, &whole));
    ASSERT_NO_FATAL_FAILURE(launch_ok(moe + " --set distributed.expert_exchange_chunks=2", 6, &piped));
    EXPECT_EQ(piped.loss, whole.loss);
    EXPECT_EQ(piped.grad_norm, whole.grad_norm);
    const auto& facts = piped.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(facts["expert_exchange_chunks"], 2) << facts.dump();
    EXPECT_EQ(facts["all_to_all_bytes"], whole.summary["facts"]["distributed"]["sharding"]["all_to_all_bytes"]);
    EXPECT_EQ(piped.summary["facts"]["moe"]["dropped_slots"], whole.summary["facts"]["moe"]["dropped_slots"]);
  }
}

// nam56r-large's 4-GPU layouts at tiny width (ablations/large_layouts.toml): ZeRO-3 with replicated
// experts against EP 4 over the 4 ranks, both at a capacity. They train alike (the 1e-5 above: the
// sharded stages add at most the 1e-6 of ExpertParallelShardedStagesTrainLikeTheUnshardedJob), and with
// EP over the whole job the experts' sync carries nothing: of the replicated job's reduce-scattered
// bytes, the experts' (4 of 3 x 64 x 64 fp32) are gone.
TEST_F(DistributedTest, FourRankZero3LayoutsTrainAlikeAndExpertParallelExchangesNoExpertWeights) {
  const std::string job = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm --set model.moe.capacity_factor=1.25"
                          " --set distributed.nproc=4 --set model.batch_size=1 --set distributed.sharding=full";
  Recorded replicated, spread;
  ASSERT_NO_FATAL_FAILURE(launch_ok(job, 6, &replicated));
  ASSERT_NO_FATAL_FAILURE(launch_ok(job + " --set distributed.expert_parallel=4", 6, &spread));
  expect_steps_near(spread.loss, replicated.loss, 1e-5);
  expect_steps_near(spread.grad_norm, replicated.grad_norm, 1e-5);
  EXPECT_EQ(spread.summary["facts"]["moe"]["dropped_slots"], replicated.summary["facts"]["moe"]["dropped_slots"]);
  const auto& whole = replicated.summary["facts"]["distributed"]["sharding"];
  const auto& ep = spread.summary["facts"]["distributed"]["sharding"];
  EXPECT_EQ(ep["stage"], "full") << ep.dump();
  // The experts' bytes gone, give or take the units' padding (each unit's bucket pads to a multiple of
  // 4 ranks x 16 elements: under 4 KiB over tiny's 6 units); a sync that still reduce-scattered each
  // rank's own experts over its one rank would keep a quarter of them (48 KiB).
  const int64_t experts_bytes = 4 * 3 * 64 * 64 * 4, padding_slack = 4096;
  EXPECT_NEAR(static_cast<double>(ep["reduce_scatter_bytes"].get<int64_t>()),
              static_cast<double>(whole["reduce_scatter_bytes"].get<int64_t>() - experts_bytes), padding_slack)
      << ep.dump() << " against " << whole.dump();
  EXPECT_GT(ep["all_to_all_bytes"].get<int64_t>(), 0) << ep.dump();
}

// Fails closed: expert parallelism needs the dispatch that exchanges rows.
TEST_F(DistributedTest, ExpertParallelRefusesADispatchThatCannotExchange) {
  const auto job = run_cli(ablate("launch " + spec_.string() + kExpertParallel2 + " --set backends.moe_dispatch=reference"));
  EXPECT_NE(job.rc, 0) << job.out;
  EXPECT_NE(job.out.find("needs backends.moe_dispatch = \"grouped_mm\""), std::string::npos) << job.out;
}

// An expert-parallel checkpoint holds every expert whole (gathered from the ranks holding them), keyed as
// a run without expert parallelism writes it: resumed at the same expert_parallel it continues bit for
// bit (each rank takes back its own rows of the same values), and it resumes at expert_parallel = 1, as
// a replicated-experts checkpoint resumes at 2, within the 1e-5 of ExpertParallelTrainsLikeReplicatedExperts
// (the expert gradients sum in another order). A layout that kept a rank's rows only fails the
// cross-resume (AdamW refuses a moment of another shape; the model would run on half its experts).
TEST_F(DistributedTest, ExpertParallelCheckpointsResumeAtAnyExpertParallelSize) {
  const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm";
  const std::string ep2 = moe + " --set distributed.expert_parallel=2";
  Recorded straight, saved;
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2, 6, &straight));
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + " --set train.checkpoint_every=3", 6, &saved));
  ASSERT_EQ(saved.loss, straight.loss) << "saving a checkpoint changed the run";
  const fs::path written = dir_ / "checkpoints" / "dp-test" / "step-00000003";
  ASSERT_EQ(ablate::harness::checkpoint_problem(written.string()), "") << written;
  auto expect_resumed = [&](const Recorded& run, const fs::path& from) {
    EXPECT_EQ(run.summary["facts"]["start_step"], 3) << run.summary["facts"].dump();
    EXPECT_EQ(run.summary["facts"]["resumed_from"], from.string());
  };
  Recorded same;
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + " --set train.resume=true", 3, &same));
  expect_resumed(same, written);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(same.loss[i], straight.loss[3 + i]) << "step " << 3 + i;
  Recorded replicated;
  ASSERT_NO_FATAL_FAILURE(launch_ok(moe + " --set train.resume=true", 3, &replicated));
  expect_resumed(replicated, written);
  expect_steps_near(replicated.loss, {straight.loss.begin() + 3, straight.loss.end()}, 1e-5);
  expect_steps_near(replicated.grad_norm, {straight.grad_norm.begin() + 3, straight.grad_norm.end()}, 1e-5);

  // The other way: replicated experts' checkpoint (its own folder), resumed with the experts spread.
  const std::string own_folder = " --set train.checkpoint_dir=" + (dir_ / "replicated").string();
  Recorded replicated_straight, spread;
  ASSERT_NO_FATAL_FAILURE(launch_ok(moe + own_folder + " --set train.checkpoint_every=3", 6, &replicated_straight));
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + own_folder + " --set train.resume=true", 3, &spread));
  expect_resumed(spread, dir_ / "replicated" / "step-00000003");
  expect_steps_near(spread.loss, {replicated_straight.loss.begin() + 3, replicated_straight.loss.end()}, 1e-5);
  expect_steps_near(spread.grad_norm, {replicated_straight.grad_norm.begin() + 3, replicated_straight.grad_norm.end()}, 1e-5);
}

// Four ranks, two expert groups of two: each group gathers its own copy of the experts (rank 0 writes
// its group's), and every rank takes its rows back, at 2 expert ranks bit for bit and at 4 within 1e-5.
TEST_F(DistributedTest, FourRankExpertParallelCheckpointsResumeAcrossExpertGroups) {
  const std::string four = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm --set distributed.nproc=4 "
                           "--set model.batch_size=1";
  const std::string ep2 = four + " --set distributed.expert_parallel=2";
  Recorded saved, same, spread;
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + " --set train.checkpoint_every=3", 6, &saved));
  ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + " --set train.resume=true", 3, &same));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(same.loss[i], saved.loss[3 + i]) << "step " << 3 + i;
  ASSERT_NO_FATAL_FAILURE(launch_ok(four + " --set distributed.expert_parallel=4 --set train.resume=true", 3, &spread));
  expect_steps_near(spread.loss, {saved.loss.begin() + 3, saved.loss.end()}, 1e-5);
}

// Expert parallelism sharded: the shared weights shard over the job and each place's experts over the
// ranks holding them (its expert-data group), at the stage asked. Against the same job unsharded the
// same gradients are summed (one addition at most in either collective) and AdamW runs elementwise on
// slices, so the losses agree to 1e-6 relative, as in ShardedStagesTrainLikeTheUnshardedJob, and the
// norm, whose squares sum in another order (bucket shards then the job, against parameters then the
// experts over the expert group), to 1e-5. train.grad_clip = 0.05 is below every step's norm, so every
// update goes through the clipping scale. A norm that counts the expert shards twice fails the norm's
// 1e-5 at every step (by ~3e-3 relative); the losses hardly move, since AdamW divides a steady scale out.
// Two ranks are one expert group (a place's expert-data group is the rank alone: only the shared weights
// are split); four ranks are two (each place's experts split over 2).
TEST_F(DistributedTest, ExpertParallelShardedStagesTrainLikeTheUnshardedJob) {
  const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm"
                          " --set distributed.expert_parallel=2 --set train.grad_clip=0.05";
  // tiny's experts on one place: 2 of 4, each 3 d x f = 3 x 64 x 64 elements.
  const double place_experts = 2 * 3 * 64 * 64;
  for (const int64_t world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string job =
        moe + " --set distributed.nproc=" + std::to_string(world) + " --set model.batch_size=" + std::to_string(4 / world);
    Recorded none;
    ASSERT_NO_FATAL_FAILURE(launch_ok(job, 6, &none));
    for (double norm : none.grad_norm) EXPECT_GT(norm, 0.05) << "clipping is not active";
    const auto& plain = none.summary["facts"]["distributed"]["sharding"];
    const double shared = plain["gradient_bytes"].get<int64_t>() / 4.0 - place_experts;  // every bucket unsharded
    // On two ranks a place's experts are the rank's alone: their sync communicates nothing, so only the
    // shared weights are all-reduced (on four, each place's experts too, over the 2 ranks holding them).
    const int64_t alone = world == 2 ? static_cast<int64_t>(4 * place_experts) : 0;
    EXPECT_EQ(plain["all_reduce_bytes"], plain["gradient_bytes"].get<int64_t>() - alone) << plain.dump();
    for (const std::string stage : {"optimizer", "gradients", "full"}) {
      SCOPED_TRACE("distributed.sharding = " + stage);
      Recorded sharded;
      ASSERT_NO_FATAL_FAILURE(launch_ok(job + " --set distributed.sharding=" + stage, 6, &sharded));
      expect_steps_near(sharded.loss, none.loss, 1e-6);
      expect_steps_near(sharded.grad_norm, none.grad_norm, 1e-5);
      EXPECT_EQ(sharded.rows_per_rank.size(), static_cast<size_t>(world));
      const auto& layout = sharded.summary["facts"]["distributed"]["sharding"];
      EXPECT_EQ(layout["stage"], stage) << layout.dump();
      EXPECT_EQ(layout["expert_parallel"], 2) << layout.dump();
      // A rank's shard: 1/world of the shared weights and 1/(world / 2) of its place's experts, plus
      // its part of the padding.
      const auto padding = layout["padding_elements"].get<int64_t>();
      const auto shard = layout["shard_elements"].get<int64_t>();
      const double least = shared / static_cast<double>(world) + place_experts / static_cast<double>(world / 2);
      EXPECT_GE(static_cast<double>(shard), least) << layout.dump();
      EXPECT_LE(static_cast<double>(shard), least + static_cast<double>(padding)) << layout.dump();
      EXPECT_EQ(layout["optimizer_state_bytes"], 2 * 4 * shard) << layout.dump();
      // The buckets a rank shares are reduce-scattered, padded, and none is all-reduced; the experts'
      // of a rank alone stay whole and unpadded (every expert tensor is a multiple of the alignment).
      const auto exchanged = plain["all_reduce_bytes"].get<int64_t>() + 4 * padding, buckets = exchanged + alone;
      EXPECT_EQ(layout["all_reduce_bytes"], 0) << layout.dump();
      EXPECT_EQ(layout["reduce_scatter_bytes"], exchanged) << layout.dump();
      EXPECT_EQ(layout["gradient_bytes"], stage == "optimizer" ? buckets : 4 * shard) << layout.dump();
      EXPECT_EQ(layout["parameter_bytes"], stage == "full" ? 4 * shard : buckets) << layout.dump();
      if (stage == "full") {
        EXPECT_GT(layout["all_gather_bytes"].get<int64_t>(), exchanged) << layout.dump();  // gathered again for backward
      } else {
        EXPECT_EQ(layout["all_gather_bytes"], exchanged) << layout.dump();
      }
      if (stage != "optimizer") {  // both syncs' transient buckets, counted together (the job's alone on 2 ranks)
        EXPECT_GT(layout["staging_peak_bytes"].get<int64_t>(), 0) << layout.dump();
        EXPECT_LE(layout["staging_peak_bytes"].get<int64_t>(), exchanged) << layout.dump();
      }
    }
  }
}

// A sharded expert-parallel checkpoint holds what every other checkpoint does: AdamW's state per
// parameter, the experts' weights and moments whole (a bucket's moments gathered over the expert-data
// group, then each expert tensor's rows over the expert group). Resumed at the same layout it continues
// bit for bit (each rank takes back its own slices of the same values; ZeRO-2 reduces what ZeRO-1 does,
// so it counts as the same); resumed unsharded within the 1e-6 above; resumed with replicated experts,
// sharded over the job, within ExpertParallelTrainsLikeReplicatedExperts' 1e-5.
TEST_F(DistributedTest, ExpertParallelShardedCheckpointsResumeShardedOrNot) {
  const std::string moe = " --set model.pattern=AEMR --set backends.moe_dispatch=grouped_mm";
  const std::string ep2 = moe + " --set distributed.expert_parallel=2";
  for (const int64_t world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    const std::string job = " --set distributed.nproc=" + std::to_string(world) + " --set model.batch_size=" +
                            std::to_string(4 / world) + " --set train.checkpoint_dir=" +
                            (dir_ / ("world" + std::to_string(world))).string();
    const std::string saved_as = ep2 + job + " --set distributed.sharding=optimizer";
    Recorded straight, saved, same, unsharded, replicated;
    ASSERT_NO_FATAL_FAILURE(launch_ok(saved_as, 6, &straight));
    ASSERT_NO_FATAL_FAILURE(launch_ok(saved_as + " --set train.checkpoint_every=3", 6, &saved));
    ASSERT_EQ(saved.loss, straight.loss) << "saving a checkpoint changed the run";
    const std::vector<double> after(straight.loss.begin() + 3, straight.loss.end());
    ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + job + " --set distributed.sharding=gradients --set train.resume=true", 3, &same));
    EXPECT_EQ(same.summary["facts"]["start_step"], 3) << same.summary["facts"].dump();
    EXPECT_EQ(same.loss, after);
    ASSERT_NO_FATAL_FAILURE(launch_ok(ep2 + job + " --set train.resume=true", 3, &unsharded));
    expect_steps_near(unsharded.loss, after, 1e-6);
    ASSERT_NO_FATAL_FAILURE(launch_ok(moe + job + " --set distributed.sharding=optimizer --set train.resume=true", 3, &replicated));
    expect_steps_near(replicated.loss, after, 1e-5);
  }
}

// A rank killed as the step-6 save begins (the other rank already waiting in the save's gathers) fails
// the job naming it, and the step-3 checkpoint stays intact and resumable: rank 0 writes nothing before
// every gather is done, and a folder is renamed into place only complete.
TEST_F(DistributedTest, AKilledRankDuringAnExpertParallelSaveKeepsThePreviousCheckpoint) {
  const auto job = launch_with_fault("save:1:5", kExpertParallel2 + " --set train.checkpoint_every=3");
  EXPECT_EQ(job.rc, 1) << job.out;
  EXPECT_LT(job.seconds, 90) << job.out;  // the bound of KilledRankFailsTheJobNamingItAndLeavesNoProcess
  const auto rec = newest();
  EXPECT_EQ(rec.status, "failed");
  EXPECT_NE(rec.error.find("rank 1"), std::string::npos) << rec.error;
  EXPECT_NE(job.out.find("killed by signal 9"), std::string::npos) << job.out;
  expect_no_rank_left(job.out);
  const fs::path folder = dir_ / "checkpoints" / "dp-test";
  EXPECT_EQ(ablate::harness::checkpoint_problem((folder / "step-00000003").string()), "");
  EXPECT_FALSE(fs::exists(folder / "step-00000006"));
  const auto latest = ablate::harness::latest_checkpoint(folder.string());
  ASSERT_TRUE(latest.folder.has_value());
  EXPECT_EQ(*latest.folder, (folder / "step-00000003").string());
  Recorded resumed;
  ASSERT_NO_FATAL_FAILURE(launch_ok(kExpertParallel2 + " --set train.resume=true", 3, &resumed));
  EXPECT_EQ(resumed.summary["facts"]["start_step"], 3) << resumed.summary["facts"].dump();
}

// The collective rank 0 is left waiting in when rank 1 stops before step 3, by mode: sharding none, the
// first E layer's load-balancing all-reduce; optimizer, the same (step 2's gathers were complete);
// full, the embedding's all-gather at the start of the forward; expert parallel, the first E layer's
// all-to-all of its loads; pipelined at a capacity, its first chunk's rows.
const std::pair<const char*, std::string> kModesByFirstCollective[] = {
    {"sharding none", " --set distributed.sharding=none"},
    {"sharding optimizer", " --set distributed.sharding=optimizer"},
    {"sharding full", " --set distributed.sharding=full"},
    {"expert parallel 2", kExpertParallel2},
    // Every chunk's rows started before any is waited for: a peer that is gone leaves several in flight.
    {"expert parallel 2, pipelined capacity exchange",
     kExpertParallel2 + " --set model.moe.capacity_factor=1.25 --set distributed.expert_exchange_chunks=2"}};

TEST_F(DistributedTest, KilledRankFailsTheJobNamingItAndLeavesNoProcess) {
  for (const auto& [mode, sets] : kModesByFirstCollective) {
    SCOPED_TRACE(mode);
    const auto job = launch_with_fault("kill:1:3", sets);
    EXPECT_EQ(job.rc, 1) << job.out;
    // Bounded, not timed: broken fault handling runs into the launch's 150 s timeout. 90 s covers the
    // collective timeout (20 s), the launcher's grace (2 s) and SIGTERM -> SIGKILL (5 s) plus two
    // LibTorch start-ups on a loaded machine (ctest -j8 on the GPU machine: up to 50 s).
    EXPECT_LT(job.seconds, 90) << "the job outlived its timeout plus the launcher's grace";
    const auto rec = newest();
    EXPECT_EQ(rec.status, "failed");
    EXPECT_NE(rec.error.find("rank 1"), std::string::npos) << rec.error;
    EXPECT_LT(rec.loss.size(), 50u);
    EXPECT_NE(job.out.find("rank 1"), std::string::npos) << job.out;
    EXPECT_NE(job.out.find("killed by signal 9"), std::string::npos) << job.out;
    expect_no_rank_left(job.out);
  }
}

// A rank whose training fails says why on its own stderr: the launcher ends the job when it exits, which
// may be before rank 0 has read the reason from the store.
TEST_F(DistributedTest, AFailedRankSaysWhy) {
  const auto job = launch_with_fault("throw:1:2", "");
  EXPECT_NE(job.rc, 0) << job.out;
  EXPECT_NE(job.out.find("ablate: rank 1 failed: at step 2: injected test fault"), std::string::npos) << job.out;
  expect_no_rank_left(job.out);
  EXPECT_EQ(newest().status, "failed");
}

TEST_F(DistributedTest, HungRankFailsTheJobWithinTheTimeoutNamingIt) {
  for (const auto& [mode, sets] : kModesByFirstCollective) {
    SCOPED_TRACE(mode);
    const auto job = launch_with_fault("hang:1:3", " --set distributed.timeout_s=4" + sets);
    EXPECT_EQ(job.rc, 1) << job.out;
    EXPECT_LT(job.seconds, 90) << job.out;  // the same bound as above, with a 4 s collective timeout
    const auto rec = newest();
    EXPECT_EQ(rec.status, "failed");
    // Rank 0 waited in step 3's first collective; rank 1 stopped before reporting step 3.
    EXPECT_NE(rec.error.find("rank 1 last reported step 2"), std::string::npos) << rec.error;
    expect_no_rank_left(job.out);
  }
}

// A rank stopped mid-step (SIGSTOP after it reported the step, so its progress is where rank 0's is):
// the stored error still names it, by its heartbeat that stopped.
TEST_F(DistributedTest, AStoppedRankIsNamedByItsHeartbeat) {
  const auto job = launch_with_fault("stop:1:3", " --set distributed.timeout_s=6");
  EXPECT_EQ(job.rc, 1) << job.out;
  EXPECT_LT(job.seconds, 90) << job.out;
  const auto rec = newest();
  EXPECT_EQ(rec.status, "failed");
  EXPECT_NE(rec.error.find("rank 1 stopped answering"), std::string::npos) << rec.error;
  EXPECT_NE(rec.error.find("it had reported step 3"), std::string::npos) << rec.error;
  expect_no_rank_left(job.out);
}

// `ablate launch` of a file that leaves distributed.backend out, on the CPU: the ranks use gloo, added
// as a --set the receipt records; a stated nccl stays an error (below).
TEST_F(DistributedTest, LaunchOnTheCpuUsesGlooWhenTheFileLeavesTheBackend) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: the default backend is nccl here";
  const fs::path file = dir_ / "no-backend.toml";
  std::ofstream(file) << "[experiment]\nname = \"dp-test\"\n[model]\nconfig = \"tiny\"\npattern = \"AMDR\"\nbatch_size = 1\n"
                         "[data]\nsource = \"synthetic\"\n[train]\nsteps = 4\nwarmup_steps = 1\nlog_every = 0\n"
                         "[distributed]\nnproc = 2\n";
  const auto job = run_cli(ablate("launch " + file.string()));
  ASSERT_EQ(job.rc, 0) << job.out;
  EXPECT_NE(job.out.find("they use gloo"), std::string::npos) << job.out;
  const auto rec = newest();
  EXPECT_EQ(rec.status, "ok") << rec.error;
  const auto j = ablate::receipts::Store::open(db_).run_json(rec.id);
  EXPECT_EQ(j["env"]["distributed.backend"], "gloo");
  EXPECT_EQ(j["run"]["summary"]["facts"]["model"]["overrides"].back(), "distributed.backend=\"gloo\"");
}

TEST_F(DistributedTest, NprocAgainstTheLaunchedWorldFailsClosed) {
  const auto alone = run_cli(ablate("run " + spec_.string()));
  EXPECT_EQ(alone.rc, 2) << alone.out;
  EXPECT_NE(alone.out.find("distributed.nproc = 2 but this process was started alone"), std::string::npos) << alone.out;
  EXPECT_NE(alone.out.find("ablate launch"), std::string::npos) << alone.out;
  const auto mismatch = run_shell("RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
                                  std::string(ABLATE_BINARY_DIR) + "/ablate " + ablate("run " + spec_.string()));
  EXPECT_EQ(mismatch.rc, 2) << mismatch.out;
  EXPECT_NE(mismatch.out.find("started 3 ranks"), std::string::npos) << mismatch.out;
  EXPECT_FALSE(fs::exists(db_)) << "bad input must write nothing";
  // gloo is for the CPU; nccl on a CPU run is refused before anything is written.
  const auto nccl = run_cli(ablate("launch " + spec_.string() + " --set distributed.backend=\"nccl\""));
  EXPECT_EQ(nccl.rc, 2) << nccl.out;
  EXPECT_NE(nccl.out.find("needs CUDA devices"), std::string::npos) << nccl.out;
}

// The launcher hosts the rendezvous store before any rank starts: a --port another process listens on is
// bad input (exit 2, what and how to fix, nothing written), not a rank's stack trace.
TEST_F(DistributedTest, LaunchOnAPortInUseSaysSoAndWritesNothing) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  const auto job = run_cli(ablate(fmt::format("launch --port {} {}", port, spec_.string())));
  ::close(fd);
  EXPECT_EQ(job.rc, 2) << job.out;
  EXPECT_NE(job.out.find(fmt::format("cannot host the rendezvous store on port {}", port)), std::string::npos) << job.out;
  EXPECT_NE(job.out.find("give another --port"), std::string::npos) << job.out;
  EXPECT_EQ(job.out.find("frame #"), std::string::npos) << "a stack trace: " << job.out;
  EXPECT_FALSE(fs::exists(db_)) << "bad input must write nothing";
}

TEST_F(DistributedTest, TorchrunLaunchesTheSameJob) {
  const std::string torchrun = ABLATE_TORCHRUN;
  if (!fs::exists(torchrun)) GTEST_SKIP() << "no torchrun at " << torchrun << " (the LibTorch venv's)";
  const auto r = run_shell(torchrun + " --standalone --nproc-per-node 2 --no-python " + std::string(ABLATE_BINARY_DIR) +
                           "/ablate " + ablate("run " + spec_.string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto rec = newest();
  EXPECT_EQ(rec.status, "ok") << rec.error;
  EXPECT_EQ(rec.rows_per_rank.at(1), 6);
  EXPECT_EQ(rec.summary["facts"]["distributed"]["launcher"], "torchrun");
}

// ablations/scaling.toml's shape on the CPU: a matrix over distributed.nproc runs its 2-rank cell through
// `ablate launch`, and both cells are ok evidence of their world size.
TEST_F(DistributedTest, MatrixCellsOfSeveralRanksRunThroughLaunch) {
  const fs::path matrix = dir_ / "scaling.toml";
  std::ofstream(matrix) << "[matrix]\nname = \"scaling-cpu\"\nbase = \"" << spec_.string()
                        << "\"\nrepeats = 1\n[axes]\n\"distributed.nproc\" = [1, 2]\n";
  const auto r = run_cli(ablate("matrix run " + matrix.string() + " --logs " + (dir_ / "logs").string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  auto store = ablate::receipts::Store::open(db_);
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 2u);
  std::set<std::string> worlds;
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, ablate::receipts::RunStatus::ok);
    const auto j = store.run_json(run.id);
    worlds.insert(j["env"]["distributed.world_size"].get<std::string>());
  }
  EXPECT_EQ(worlds, (std::set<std::string>{"1", "2"}));
}

// Every rank profiles its own window and records it in rank 0's run under its rank (on the CPU the
// windows say unavailable, with the reason; on GPUs each rank's trace is run<id>_rank<r>).
TEST_F(DistributedTest, EveryRankRecordsItsProfileWindow) {
  const auto r = run_cli(ablate("launch " + spec_.string() +
                                " --set profile.enabled=true --set profile.start_step=2 --set profile.steps=2"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto rec = newest();
  ASSERT_EQ(rec.status, "ok") << rec.error;
  auto store = ablate::receipts::Store::open(db_);
  const auto windows = store.query("SELECT rank, status, reason FROM profile_windows WHERE run_id = ? ORDER BY rank",
                                   {rec.id});
  ASSERT_EQ(windows.size(), 2u) << windows.dump();
  for (int64_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(windows[rank]["rank"], rank);
    EXPECT_EQ(windows[rank]["status"], "unavailable");
    EXPECT_NE(windows[rank]["reason"].get<std::string>().find("no CUDA device"), std::string::npos) << windows.dump();
  }
}

// ---- On 2 GPUs (NCCL), self-skipping elsewhere: the whole step captured with its collectives ------

class DistributedGpuTest : public DistributedTest {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available() || torch::cuda::device_count() < 2)
      GTEST_SKIP() << "needs 2 CUDA devices (NCCL and CUDA graphs)";
    DistributedTest::SetUp();
  }
  // tiny with an E layer (its load-balancing all-reduce is captured too), dropless through grouped_mm
  // (no host sync), bf16 on the GPUs, 12 steps: 3 eager, the capture, 8 replays.
  const std::string gpu_ = " --set train.device=\"cuda\" --set train.dtype=\"bf16\" --set distributed.backend=\"nccl\""
                           " --set model.pattern=\"AEMR\" --set backends.moe_dispatch=\"grouped_mm\""
                           " --set train.steps=12 --set distributed.bucket_mb=1";

  // The job of `sets` eager, then graphed: the graphed run is ok, captured, all 12 steps, and trains as
  // the eager one. Two eager bf16 runs on a GPU differ (kernels with atomics) by up to ~2e-4 relative
  // over a few steps (profiling_gpu_test's graph-vs-eager calibration), so 5e-3 is 25x that, while a
  // replay that skipped a collective or read stale shards differs in the step it happens.
  // Call through ASSERT_NO_FATAL_FAILURE.
  void expect_graphed_like_eager(const std::string& sets, Recorded* graphed) {
    const auto eager_job = run_cli(ablate("launch " + spec_.string() + sets + " --set compile.cuda_graphs=false"));
    ASSERT_EQ(eager_job.rc, 0) << eager_job.out;
    const auto eager = newest();
    const auto graphed_job = run_cli(ablate("launch " + spec_.string() + sets + " --set compile.cuda_graphs=true"));
    ASSERT_EQ(graphed_job.rc, 0) << graphed_job.out;
    *graphed = newest();
    ASSERT_EQ(graphed->status, "ok") << graphed->error;
    const auto& capture = graphed->summary["facts"]["cuda_graphs"];
    EXPECT_EQ(capture["outcome"], "captured") << capture.dump();
    EXPECT_EQ(capture["achieved"], true) << capture.dump();
    ASSERT_EQ(graphed->loss.size(), 12u);
    ASSERT_EQ(eager.loss.size(), 12u);
    expect_steps_near(graphed->loss, eager.loss, 5e-3);
  }
};

// In every sharding stage the graphed job trains as its eager twin: the same kernels and collectives in
// the same order (expect_graphed_like_eager).
TEST_F(DistributedGpuTest, GraphedStepsTrainLikeEagerInEveryShardingStage) {
  for (const char* stage : {"none", "optimizer", "gradients", "full"}) {
    SCOPED_TRACE(std::string("distributed.sharding = ") + stage);
    Recorded graphed;
    ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(gpu_ + " --set distributed.sharding=\"" + stage + "\"", &graphed));
    EXPECT_EQ(graphed.rows_per_rank.at(1), 12);
    // A replayed collective's time is unknown (its events were recorded into the graph only): the
    // warm-up steps' timings are not steady, so the per-rank median is null, never a wrong number.
    EXPECT_TRUE(graphed.summary["facts"]["distributed"]["per_rank"][0]["median_comm_ms"].is_null())
        << graphed.summary["facts"]["distributed"].dump();
  }
}

// Dropless expert parallelism sizes its all-to-all from token counts read on the host: refused up front,
// with the reason in the receipt, and the job trains eager.
TEST_F(DistributedGpuTest, ExpertParallelRefusesCaptureWithItsReason) {
  const auto job = run_cli(ablate("launch " + spec_.string() + gpu_ + " --set distributed.expert_parallel=2" +
                                  " --set compile.cuda_graphs=true"));
  ASSERT_EQ(job.rc, 0) << job.out;
  const auto rec = newest();
  ASSERT_EQ(rec.status, "ok") << rec.error;
  const auto& capture = rec.summary["facts"]["cuda_graphs"];
  EXPECT_EQ(capture["outcome"], "refused") << capture.dump();
  EXPECT_NE(capture["reason"].get<std::string>().find("distributed.expert_parallel = 2"), std::string::npos)
      << capture.dump();
}

// Under a capacity factor the exchange has fixed sizes and no host read: the step is captured with its
// all-to-alls and trains as its eager twin (expect_graphed_like_eager).
TEST_F(DistributedGpuTest, ExpertParallelUnderACapacityCapturesTheStep) {
  Recorded graphed;
  ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(
      gpu_ + " --set distributed.expert_parallel=2 --set model.moe.capacity_factor=1.25", &graphed));
  EXPECT_EQ(graphed.summary["facts"]["distributed"]["sharding"]["expert_parallel"], 2) << graphed.summary.dump();
}

// The pipelined capacity exchange on NCCL: every chunk's all-to-all started on NCCL's stream before the
// compute stream waits for the first, captured with the step (every started exchange waited for inside
// the graph), trains as its eager twin, and as the one-chunk job within the graphed-like-eager bound
// (bf16 GEMMs over fewer experts at a time may tile differently).
TEST_F(DistributedGpuTest, PipelinedExpertExchangeCapturesTheStep) {
  const std::string ep = gpu_ + " --set distributed.expert_parallel=2 --set model.moe.capacity_factor=1.25";
  Recorded whole, piped;
  ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(ep, &whole));
  ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(ep + " --set distributed.expert_exchange_chunks=2", &piped));
  EXPECT_EQ(piped.summary["facts"]["distributed"]["sharding"]["expert_exchange_chunks"], 2) << piped.summary.dump();
  expect_steps_near(piped.loss, whole.loss, 5e-3);
}

// bf16 GEMM weights on NCCL, captured with the step in every sharded stage (the masters' rounding into
// what the gathers send is replayed with them): each trains as its eager twin, and as the fp32-parameter
// job within the graphed-like-eager bound (the forward is the same; on CUDA the fp32 path writes dense
// weight gradients unrounded, here they are bf16), gathering fewer bytes.
TEST_F(DistributedGpuTest, Bf16GemmWeightsCaptureTheStepInEveryShardedStage) {
  for (const char* stage : {"optimizer", "gradients", "full"}) {
    SCOPED_TRACE(std::string("distributed.sharding = ") + stage);
    const std::string sets = gpu_ + " --set distributed.sharding=\"" + stage + "\"";
    Recorded fp32, bf16;
    ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(sets, &fp32));
    ASSERT_NO_FATAL_FAILURE(expect_graphed_like_eager(sets + " --set distributed.param_dtype=\"bf16\"", &bf16));
    expect_steps_near(bf16.loss, fp32.loss, 5e-3);
    const auto& a = fp32.summary["facts"]["distributed"]["sharding"];
    const auto& b = bf16.summary["facts"]["distributed"]["sharding"];
    EXPECT_EQ(b["param_dtype"], "bf16") << b.dump();
    EXPECT_LT(b["all_gather_bytes"].get<int64_t>(), a["all_gather_bytes"].get<int64_t>() * 6 / 10) << b.dump();
  }
}

// NCCL's watchdog does not see collectives a graph replays: a rank that hangs during the replays must
// still fail the job within the collective timeout, naming it (the host's bounded wait for each replay).
TEST_F(DistributedGpuTest, HungRankDuringReplaysFailsTheJobWithinTheTimeout) {
  const auto job = launch_with_fault("hang:1:8", gpu_ + " --set compile.cuda_graphs=true --set distributed.timeout_s=8");
  EXPECT_EQ(job.rc, 1) << job.out;
  EXPECT_LT(job.seconds, 90) << job.out;  // the timeout, the launcher's grace and two start-ups
  const auto rec = newest();
  EXPECT_EQ(rec.status, "failed");
  // The replay that waits is step 8's, or step 9's when rank 1 had queued its step 8 behind step 7 (launch
  // ahead) before its host stopped: which one depends on when the fault fires against that launch.
  const bool names_the_replay = rec.error.find("CUDA graph replay of step 8 ") != std::string::npos ||
                                rec.error.find("CUDA graph replay of step 9 ") != std::string::npos;
  EXPECT_TRUE(names_the_replay) << rec.error;
  EXPECT_NE(rec.error.find("rank 1 last reported step 7"), std::string::npos) << rec.error;
  EXPECT_EQ(rec.summary["facts"]["cuda_graphs"]["outcome"], "captured") << rec.summary.dump();
  expect_no_rank_left(job.out);
}
