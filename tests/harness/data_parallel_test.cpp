// tests/harness/data_parallel_test.cpp: ProcessGroup and GradientSync in one process (world of 1) on
// each transport this machine has: Gloo on the CPU (always), NCCL on a GPU (skipped without one). A
// world of 1 reduces to the identity, so every gradient must come back exactly as plain autograd gives
// it, as a view of its bucket, across several buckets, with a parameter that got no gradient zeroed;
// the multi-rank behaviour is tests/harness/distributed_test.cpp's (Gloo) and the GPU machine's (NCCL).
#include "harness/train/data_parallel.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <memory>

#include "harness/train/optimizer.h"
#include "kernels/dispatch.h"
#include "model/hybrid_model.h"

using namespace ablate::harness;

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One rank on a free local port.
std::unique_ptr<ProcessGroup> world_of_one(const torch::Device& device, const std::string& backend) {
  WorldEnv w;
  w.master_port = free_port();
  w.launcher = "test";
  return std::make_unique<ProcessGroup>(w, backend, device, std::chrono::seconds(30));
}

void check_identity_world(const torch::Device& device, const std::string& backend) {
  auto owned = world_of_one(device, backend);
  ProcessGroup& group = *owned;
  torch::manual_seed(11);
  const auto opt = torch::TensorOptions(device).dtype(torch::kFloat);
  std::vector<torch::Tensor> params{torch::randn({64, 32}, opt).requires_grad_(), torch::randn({32}, opt).requires_grad_(),
                                    torch::randn({32, 16}, opt).requires_grad_(),
                                    torch::randn({7}, opt).requires_grad_()};  // unused: no gradient
  const auto x = torch::randn({8, 64}, opt);
  auto loss_of = [&] { return torch::tanh(x.matmul(params[0]) + params[1]).matmul(params[2]).pow(2).sum(); };
  loss_of().backward();
  std::vector<torch::Tensor> expected;
  for (size_t i = 0; i < 3; ++i) expected.push_back(params[i].grad().clone());
  for (auto& p : params) p.mutable_grad() = torch::Tensor();

  // Reverse order 28 B + 2 KiB, then 128 B + 8 KiB: two buckets of >= 1 KiB.
  GradientSync sync(group, params, /*bucket_bytes=*/1024);
  EXPECT_EQ(sync.buckets(), 2u);
  for (int step = 0; step < 2; ++step) {  // the second step reuses the buckets
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    sync.begin_step();
    loss_of().backward();
    sync.finish();
    for (size_t i = 0; i < 3; ++i) {
      // A world of 1: the mean is the gradient itself, bit for bit (division by 1, sum of one).
      EXPECT_TRUE(torch::equal(params[i].grad(), expected[i])) << backend << " param " << i << " step " << step;
    }
    // The gradients are views of the reduced buckets, not autograd's own tensors: 0 and 1 share one, 2 and 3 the other.
    EXPECT_EQ(params[0].grad().storage().data(), params[1].grad().storage().data());
    EXPECT_EQ(params[2].grad().storage().data(), params[3].grad().storage().data());
    EXPECT_NE(params[0].grad().storage().data(), params[2].grad().storage().data());
    if (device.is_cuda()) torch::cuda::synchronize();
    // NCCL times its collectives with CUDA events on its stream; Gloo has no such timing (NaN).
    const double comm = sync.comm_ms();
    if (backend == "nccl") {
      EXPECT_TRUE(std::isfinite(comm) && comm >= 0) << "nccl comm_ms " << comm;
    }
    ASSERT_TRUE(params[3].grad().defined()) << "an unused parameter gets the (zero) mean too";
    EXPECT_EQ(params[3].grad().abs().sum().item<float>(), 0.f);
  }
  auto t = torch::full({3}, 2.5, opt);
  group.allreduce_mean_(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::full({3}, 2.5)));
  EXPECT_EQ(group.ranks_behind(0), "");  // nobody else to be behind
}

// Sharded in a world of 1: the shard is the whole bucket, so it must hold autograd's gradients bit for bit
// (the padding zero), or reduced in bf16 exactly their rounding to bf16 (a sum of one is the value
// itself), while no parameter keeps a .grad and (ZeRO-2) no staged bucket outlives the step.
void check_sharded_world(const torch::Device& device, const std::string& backend, ShardingStage stage,
                         torch::ScalarType reduce_dtype = torch::kFloat) {
  SCOPED_TRACE(std::string(backend) + (stage == ShardingStage::optimizer ? " optimizer" : " gradients") +
               (reduce_dtype == torch::kFloat ? " fp32" : " bf16"));
  auto group = world_of_one(device, backend);
  torch::manual_seed(12);
  const auto opt = torch::TensorOptions(device).dtype(torch::kFloat);
  std::vector<torch::Tensor> params{torch::randn({64, 30}, opt).requires_grad_(), torch::randn({30}, opt).requires_grad_(),
                                    torch::randn({30, 17}, opt).requires_grad_(), torch::randn({7}, opt).requires_grad_()};
  const auto values = [&] {
    std::vector<torch::Tensor> v;
    for (const auto& p : params) v.push_back(p.detach().clone());
    return v;
  }();
  const auto x = torch::randn({8, 64}, opt);
  auto loss_of = [&] { return torch::tanh(x.matmul(params[0]) + params[1]).matmul(params[2]).pow(2).sum(); };
  loss_of().backward();
  std::vector<torch::Tensor> expected;
  for (size_t i = 0; i < 3; ++i) expected.push_back(params[i].grad().clone());
  expected.push_back(torch::zeros({7}, opt));  // unused: the zero mean
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  if (reduce_dtype != torch::kFloat)
    for (auto& e : expected) e = e.to(reduce_dtype).to(torch::kFloat);
  const int64_t reduce_bytes = reduce_dtype == torch::kFloat ? 4 : 2;

  GradientSync sync(*group, params, /*bucket_bytes=*/1024, stage, {}, reduce_dtype);
  ASSERT_EQ(sync.buckets(), 2u);
  for (size_t i = 0; i < params.size(); ++i)  // moved into the flat parameter buffers, values kept
    EXPECT_TRUE(torch::equal(params[i], values[i])) << backend << " param " << i;
  int64_t whole = 0;
  for (const auto& b : sync.layout().buckets) whole += b.numel;
  // A world of 1's shard is the whole bucket: ZeRO-2 keeps the fp32 shard alone, ZeRO-1 the bucket (in
  // the reduction's dtype) and, reduced in bf16, the fp32 shard it is widened into.
  const int64_t kept = stage == ShardingStage::gradients ? 4 * whole
                                                         : reduce_bytes * whole + (reduce_bytes == 4 ? 0 : 4 * whole);
  EXPECT_EQ(sync.gradient_bytes(), kept);
  EXPECT_EQ(sync.collective_bytes().reduce_scatter, reduce_bytes * whole);
  EXPECT_EQ(sync.collective_bytes().all_gather, 4 * whole);
  for (int step = 0; step < 2; ++step) {
    sync.begin_step();
    loss_of().backward();
    sync.finish();
    EXPECT_EQ(sync.staged_bytes(), 0) << "a staged bucket outlived the step";
    if (stage == ShardingStage::gradients) {
      EXPECT_GT(sync.staging_peak_bytes(), 0);
      EXPECT_LE(sync.staging_peak_bytes(), reduce_bytes * whole);
    } else {
      EXPECT_EQ(sync.staging_peak_bytes(), 0);
    }
    std::vector<torch::Tensor> padding;  // per bucket: true where no parameter lies
    for (const auto& b : sync.layout().buckets) padding.push_back(torch::ones({b.numel}, opt.dtype(torch::kBool)));
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_FALSE(params[i].grad().defined()) << "param " << i << " kept a .grad";
      const size_t b = sync.layout().bucket_of[i];
      const auto got = sync.gradient_shard(b).narrow(0, sync.layout().offset_of[i], params[i].numel()).view(params[i].sizes());
      EXPECT_TRUE(torch::equal(got, expected[i])) << backend << " param " << i << " step " << step;
      padding[b].narrow(0, sync.layout().offset_of[i], params[i].numel()).fill_(false);
    }
    for (size_t b = 0; b < sync.buckets(); ++b) {
      const auto gaps = sync.gradient_shard(b).masked_select(padding[b]);
      EXPECT_GT(gaps.numel(), 0) << "bucket " << b << " has no padding to check";
      EXPECT_EQ(gaps.count_nonzero().item<int64_t>(), 0) << "bucket " << b << ": padding must reduce to zero";
    }
  }
}

// Buckets fill out of order: with one parameter a bucket, a = [pA, pB, pC] lays out pC, pB, pA, and
// backward of (x pC) pB reaches pB first (autograd accumulates a leaf's gradient as soon as it is
// ready), so pB's bucket waits until pC's arrives and both launch from pC's hook, the second launch
// releasing pC's bucket while its hook still hands autograd the slot.
void check_staged_out_of_order(const torch::Device& device, const std::string& backend) {
  auto group = world_of_one(device, backend);
  torch::manual_seed(13);
  const auto opt = torch::TensorOptions(device).dtype(torch::kFloat);
  std::vector<torch::Tensor> params{torch::randn({5}, opt).requires_grad_(), torch::randn({8, 8}, opt).requires_grad_(),
                                    torch::randn({8, 8}, opt).requires_grad_()};
  const auto x = torch::randn({3, 8}, opt);
  auto loss_of = [&] { return (x.matmul(params[2]).matmul(params[1]).tanh().sum() + params[0].pow(2).sum()); };
  loss_of().backward();
  std::vector<torch::Tensor> expected;
  for (auto& p : params) {
    expected.push_back(p.grad().clone());
    p.mutable_grad() = torch::Tensor();
  }
  GradientSync sync(*group, params, /*bucket_bytes=*/1, ShardingStage::gradients);
  ASSERT_EQ(sync.buckets(), 3u);
  for (int step = 0; step < 2; ++step) {
    sync.begin_step();
    loss_of().backward();
    sync.finish();
    EXPECT_EQ(sync.staged_bytes(), 0);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_FALSE(params[i].grad().defined()) << "param " << i;
      const auto got = sync.gradient_shard(sync.layout().bucket_of[i])
                           .narrow(0, sync.layout().offset_of[i], params[i].numel())
                           .view(params[i].sizes());
      EXPECT_TRUE(torch::equal(got, expected[i])) << backend << " param " << i << " step " << step;
    }
  }
}

// Where the sync lists `p` (its params() order is its own: by first use in forward).
size_t sync_index(const GradientSync& sync, const torch::Tensor& p) {
  for (size_t i = 0; i < sync.params().size(); ++i)
    if (sync.params()[i].is_same(p)) return i;
  ADD_FAILURE() << "a parameter the sync does not hold";
  return 0;
}

// GEMM weights kept in bf16 (GemmWeightPrecision) at every sharded stage: the weights become bf16 views
// of bf16 buckets of their own (laid out before the fp32 one, which launches last), their gradients
// reach the fp32 shards widened exactly, the optimizer's part is the fp32 master (the values given,
// unrounded), and after ShardedAdamW's update a gather sends the master rounded to nearest (the update
// writes it so): what bf16 autocast would compute with.
// master_values() gives back the fp32 masters whole (a checkpoint writes them).
void check_bf16_gemm_weights(const torch::Device& device, const std::string& backend) {
  const auto opt = torch::TensorOptions(device).dtype(torch::kFloat);
  for (const auto stage : {ShardingStage::optimizer, ShardingStage::gradients, ShardingStage::full}) {
    SCOPED_TRACE(static_cast<int>(stage));
    auto group = world_of_one(device, backend);
    torch::manual_seed(21);
    auto w1 = torch::randn({16, 8}, opt).requires_grad_(), w2 = torch::randn({4, 16}, opt).requires_grad_(),
         gain = torch::randn({8}, opt).requires_grad_();
    const std::vector<torch::Tensor> fp32_values{w1.detach().clone(), w2.detach().clone(), gain.detach().clone()};
    const std::vector<torch::Tensor> params{gain, w1, w2};
    const std::vector<std::vector<torch::Tensor>> units{{gain, w1, w2}};
    GradientSync sync(*group, params, /*bucket_bytes=*/1 << 20, stage, units, torch::kFloat, true,
                      GemmWeightPrecision{torch::kBFloat16, {w1, w2}});
    ASSERT_EQ(sync.buckets(), 2u) << "the GEMM weights' bf16 bucket and the gain's fp32 one";
    EXPECT_EQ(sync.layout().bucket_of[sync_index(sync, w1)], 0u);
    EXPECT_EQ(sync.layout().bucket_of[sync_index(sync, gain)], 1u);
    sync.wait_parameters(/*whole=*/true);
    EXPECT_EQ(w1.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(gain.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(w1, fp32_values[0].to(torch::kBFloat16)));
    EXPECT_TRUE(torch::equal(gain, fp32_values[2]));
    const size_t low = sync.layout().bucket_of[sync_index(sync, w1)];
    const auto master_of = [&](const torch::Tensor& p) {
      return sync.parameter_shard(low).narrow(0, sync.layout().offset_of[sync_index(sync, p)], p.numel()).view(p.sizes());
    };
    EXPECT_EQ(sync.parameter_shard(low).scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(master_of(w1), fp32_values[0])) << "the master holds the fp32 value, unrounded";
    // A step: the gradients as bf16 autocast makes them (a bf16 GEMM), widened into the fp32 shards;
    // the reference takes the same step on copies of the leaves.
    const auto x = torch::randn({3, 8}, opt);
    const auto loss_of = [&](const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& g) {
      const auto h = torch::matmul(x.to(torch::kBFloat16) * g.to(torch::kBFloat16), a.t());
      return torch::matmul(h.tanh(), b.t()).to(torch::kFloat).pow(2).sum();
    };
    auto ref_w1 = w1.detach().clone().requires_grad_(), ref_w2 = w2.detach().clone().requires_grad_();
    auto ref_gain = gain.detach().clone().requires_grad_();
    loss_of(ref_w1, ref_w2, ref_gain).backward();
    sync.begin_step();
    loss_of(w1, w2, gain).backward();
    sync.finish();
    for (const auto& [p, ref] : {std::pair{w1, ref_w1}, std::pair{w2, ref_w2}, std::pair{gain, ref_gain}}) {
      const size_t i = sync_index(sync, p), b = sync.layout().bucket_of[i];
      const auto got = sync.gradient_shard(b).narrow(0, sync.layout().offset_of[i], p.numel()).view(p.sizes());
      EXPECT_TRUE(torch::equal(got, ref.grad().to(torch::kFloat))) << "widened exactly: param " << i;
    }
    for (const auto& p : params) EXPECT_FALSE(p.grad().defined()) << "a sharded sync keeps only its shards";
    // The sharded optimizer's update moves the masters (by less than a bf16 step for most elements) and
    // writes them rounded into what the gather sends: the weights come back rounded to nearest.
    TrainSection train;
    train.lr = 1e-3;
    const ablate::kernels::Dispatcher reference;
    ShardedAdamW adamw(params, sync, train, reference);
    adamw.step({});
    EXPECT_FALSE(torch::equal(master_of(w1), fp32_values[0])) << "the update moved the master";
    sync.gather_parameters();
    sync.wait_parameters(/*whole=*/true);
    EXPECT_TRUE(torch::equal(w1, master_of(w1).to(torch::kBFloat16)));
    EXPECT_TRUE(torch::equal(w2, master_of(w2).to(torch::kBFloat16)));
    const auto masters = sync.master_values();
    ASSERT_EQ(masters.size(), 2u) << "w1 and w2, not the gain";
    for (const auto& [p, value] : masters) {
      EXPECT_EQ(value.scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::equal(value, master_of(p).cpu()));
    }
    sync.release_units();
  }
}

// The hybrid model (tiny, every block letter, the seams `backends` asks for) trained by a world of one at
// `stage` with its GEMM weights in bf16, beside its twin with fp32 weights, both under bf16 autocast,
// three steps of plain SGD on the masters (written rounded where the gathers read, as ShardedAdamW's
// update writes them): the first forward computes the same loss bit for bit
// (autocast rounds the fp32 weights to what the bf16 ones are), and the reduced gradients agree to
// `tolerance` (relative, over each parameter: 0 where the fp32 path's weight gradients are bf16 widened
// too, as on the CPU, whose later losses are then equal too; on CUDA the fp32 path writes dense weights'
// gradients unrounded, so bf16's 2^-9 rounding with room for its reach into later steps, whose losses
// agree to 1e-4: 1.5e-5 was seen on an H200 after two steps at lr 0.05).
void check_model_with_bf16_gemm_weights(const torch::Device& device, const std::string& backend,
                                        const std::map<std::string, std::string>& backends, double tolerance) {
  namespace model = ablate::model;
  auto config = *model::named_config("tiny");
  config.pattern = "AEMDR";
  const auto dispatcher = std::make_shared<const ablate::kernels::Dispatcher>(
      backends, ablate::kernels::describe_device(device, torch::kBFloat16), /*strict=*/true);
  const int64_t B = 2, T = 32;
  torch::manual_seed(23);
  const auto ids = torch::randint(config.vocab, {B, T + 1}, torch::kLong).to(device);
  const auto mask = torch::ones({B, T}, torch::TensorOptions(device).dtype(torch::kFloat));
  const auto type = device.type();
  for (const auto stage : {ShardingStage::optimizer, ShardingStage::full}) {
    SCOPED_TRACE(static_cast<int>(stage));
    auto group_a = world_of_one(device, backend), group_b = world_of_one(device, backend);
    model::HybridModel a(config, dispatcher, 5), b(config, dispatcher, 5);
    a->to(device);
    b->to(device);
    GradientSync sync_a(*group_a, a->parameters(), 1 << 20, stage, a->parameter_units());
    GradientSync sync_b(*group_b, b->parameters(), 1 << 20, stage, b->parameter_units(), torch::kFloat, true,
                        GemmWeightPrecision{torch::kBFloat16, b->gemm_weights()});
    a->set_unit_hooks(&sync_a);
    b->set_unit_hooks(&sync_b);
    EXPECT_EQ(b->head.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(b->final_norm.scalar_type(), torch::kFloat);
    const auto pa = a->named_parameters(), pb = b->named_parameters();
    for (int step = 0; step < 3; ++step) {
      torch::Tensor losses[2];
      int side = 0;
      for (const auto& [m, sync] : {std::pair{&a, &sync_a}, std::pair{&b, &sync_b}}) {
        sync->begin_step();
        at::autocast::set_autocast_enabled(type, true);
        at::autocast::set_autocast_dtype(type, at::kBFloat16);
        auto loss = (*m)->forward(ids.narrow(1, 0, T), ids.narrow(1, 1, T), mask).loss;
        at::autocast::set_autocast_enabled(type, false);
        at::autocast::clear_cache();
        loss.backward();
        sync->finish();
        losses[side++] = loss.detach();
      }
      // The first forward is the same computation; after a step, the same up to the gradients' difference.
      const double la = losses[0].item<double>(), lb = losses[1].item<double>();
      if (step == 0 || tolerance == 0) EXPECT_EQ(la, lb) << "step " << step;
      else EXPECT_NEAR(la, lb, 1e-4 * std::abs(la)) << "step " << step;
      // Each parameter's reduced gradient, then an SGD step on each master.
      for (const auto& item : pa) {
        const auto& p = item.value();
        const auto& q = pb[item.key()];
        const auto shard_of = [](GradientSync& sync, const torch::Tensor& t, bool grad) {
          const size_t i = sync_index(sync, t), bucket = sync.layout().bucket_of[i];
          const auto& whole = grad ? sync.gradient_shard(bucket) : sync.parameter_shard(bucket);
          return whole.narrow(0, sync.layout().offset_of[i], t.numel());
        };
        const auto ga = shard_of(sync_a, p, true), gb = shard_of(sync_b, q, true);
        const double scale = ga.norm().item<double>();
        EXPECT_LE((ga - gb).norm().item<double>(), tolerance * scale + 1e-12) << item.key() << " step " << step;
        torch::NoGradGuard no_grad;
        shard_of(sync_a, p, false).sub_(0.05 * ga);
        shard_of(sync_b, q, false).sub_(0.05 * gb);
      }
      {
        // The contract of whoever updates a bf16 bucket's master: its rounding goes where the gather reads.
        torch::NoGradGuard no_grad;
        for (size_t bucket = 0; bucket < sync_b.buckets(); ++bucket)
          if (const auto rounded = sync_b.rounded_shard(bucket); rounded.defined())
            rounded.copy_(sync_b.parameter_shard(bucket));
      }
      sync_a.gather_parameters();
      sync_b.gather_parameters();
    }
    a->set_unit_hooks(nullptr);
    b->set_unit_hooks(nullptr);
  }
}

}  // namespace

TEST(DataParallel, GlooTrainsTheModelWithBf16GemmWeightsAsWithFp32) {
  check_model_with_bf16_gemm_weights(torch::kCPU, "gloo", {{"moe_dispatch", "grouped_mm"}}, 0.0);
}

TEST(DataParallel, NcclTrainsTheModelWithBf16GemmWeightsAsWithFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  // The CUDA seams that read GEMM weights (dense_gemm's reference is autocast's linear on CUDA): the
  // grouped expert GEMMs and the fused LM-head loss.
  check_model_with_bf16_gemm_weights(torch::Device(torch::kCUDA, 0), "nccl",
                                     {{"moe_dispatch", "grouped_mm"}, {"loss", "fused_cuda"},
                                      {"residual_norm", "fused_cuda"}},
                                     1e-2);
}

TEST(DataParallel, GlooKeepsGemmWeightsInBf16WithFp32Masters) { check_bf16_gemm_weights(torch::kCPU, "gloo"); }

TEST(DataParallel, NcclKeepsGemmWeightsInBf16WithFp32Masters) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  check_bf16_gemm_weights(torch::Device(torch::kCUDA, 0), "nccl");
}

TEST(DataParallel, GlooStagedBucketsMayFillOutOfOrder) { check_staged_out_of_order(torch::kCPU, "gloo"); }

TEST(DataParallel, NcclStagedBucketsMayFillOutOfOrder) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  check_staged_out_of_order(torch::Device(torch::kCUDA, 0), "nccl");
}

TEST(DataParallel, GlooWorldOfOneHandsBackAutogradsGradients) { check_identity_world(torch::kCPU, "gloo"); }

TEST(DataParallel, GlooWorldOfOneStagesGradientsIntoItsShard) {
  check_sharded_world(torch::kCPU, "gloo", ShardingStage::gradients);
}

TEST(DataParallel, NcclWorldOfOneStagesGradientsIntoItsShard) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  check_sharded_world(torch::Device(torch::kCUDA, 0), "nccl", ShardingStage::gradients);
}

TEST(DataParallel, GlooWorldOfOneReducesInBf16IntoFp32Shards) {
  for (const auto stage : {ShardingStage::optimizer, ShardingStage::gradients})
    check_sharded_world(torch::kCPU, "gloo", stage, torch::kBFloat16);
}

TEST(DataParallel, NcclWorldOfOneReducesInBf16IntoFp32Shards) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  for (const auto stage : {ShardingStage::optimizer, ShardingStage::gradients})
    check_sharded_world(torch::Device(torch::kCUDA, 0), "nccl", stage, torch::kBFloat16);
}

TEST(DataParallel, Bf16ReductionNeedsASharding) {
  auto group = world_of_one(torch::kCPU, "gloo");
  std::vector<torch::Tensor> params{torch::randn({4}).requires_grad_()};
  try {
    GradientSync sync(*group, params, 1024, ShardingStage::none, {}, torch::kBFloat16);
    FAIL() << "an unsharded bf16 reduction was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("distributed.sharding"), std::string::npos) << e.what();
  }
  EXPECT_THROW(GradientSync(*group, params, 1024, ShardingStage::optimizer, {}, torch::kHalf), std::invalid_argument);
}

// The buckets follow the model's units backwards (the order backward produces gradients), not the order
// the parameters were registered in: a model registers its embedding, final norm and LM head before its
// layers, yet uses the head last, so the head's gradient, among the first to arrive, must not share a
// bucket with (and wait for) the first layer's. One parameter a bucket shows the order itself.
TEST(DataParallel, GlooBucketsFollowTheUnitsBackwards) {
  auto group = world_of_one(torch::kCPU, "gloo");
  torch::manual_seed(14);
  // Registration order: embedding, final norm, head, layer 0, layer 1.
  auto embedding = torch::randn({11, 8}).requires_grad_(), norm = torch::randn({8}).requires_grad_(),
       head = torch::randn({11, 8}).requires_grad_(), layer0 = torch::randn({8, 8}).requires_grad_(),
       layer1 = torch::randn({8, 8}).requires_grad_();
  const std::vector<torch::Tensor> params{embedding, norm, head, layer0, layer1};
  const std::vector<std::vector<torch::Tensor>> units{{embedding}, {layer0}, {layer1}, {norm, head}};
  const auto tokens = torch::tensor({3, 1, 4, 1, 5}, torch::kLong);
  auto loss_of = [&] {
    auto h = embedding.index_select(0, tokens).matmul(layer0).tanh().matmul(layer1).tanh() * norm;
    return torch::log_softmax(h.matmul(head.t()), -1).select(1, 2).sum();
  };
  loss_of().backward();
  std::vector<torch::Tensor> expected, values;
  for (auto& p : params) {
    expected.push_back(p.grad().clone());
    values.push_back(p.detach().clone());
    p.mutable_grad() = torch::Tensor();
  }
  for (const auto stage : {ShardingStage::none, ShardingStage::optimizer}) {
    SCOPED_TRACE(stage == ShardingStage::none ? "none" : "optimizer");
    GradientSync sync(*group, params, /*bucket_bytes=*/1, stage, units);
    const std::vector<torch::Tensor> backward_order{head, norm, layer1, layer0, embedding};
    ASSERT_EQ(sync.buckets(), backward_order.size());
    for (size_t b = 0; b < backward_order.size(); ++b) {
      ASSERT_EQ(sync.layout().buckets[b].params.size(), 1u);
      EXPECT_TRUE(sync.params()[sync.layout().buckets[b].params[0]].is_same(backward_order[b])) << "bucket " << b;
    }
    if (stage != ShardingStage::none) {
      // One all-gather a unit, in forward order; the head's unit gathers its two buckets together.
      const std::vector<std::vector<size_t>> groups{{4}, {3}, {2}, {1, 0}};
      EXPECT_EQ(sync.gather_groups(), groups);
    }
    sync.begin_step();
    loss_of().backward();
    sync.finish();
    if (stage != ShardingStage::none) {
      // A world of one's gathers (the coalesced one too, in place) leave the parameters as they were.
      sync.gather_parameters();
      sync.wait_parameters();
      for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], values[i])) << "param " << i;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const auto got = stage == ShardingStage::none
                           ? params[i].grad()
                           : sync.gradient_shard(sync.layout().bucket_of[sync_index(sync, params[i])])
                                 .narrow(0, sync.layout().offset_of[sync_index(sync, params[i])], params[i].numel())
                                 .view(params[i].sizes());
      EXPECT_TRUE(torch::equal(got, expected[i])) << "param " << i;
      params[i].mutable_grad() = torch::Tensor();
    }
  }
}

// A sync that communicates nothing (expert parallelism over the whole job: a rank's experts are its own),
// at every stage, asked to reduce in bf16 where the stage allows it: it launches no collective (Gloo
// cannot time one, so a launched collective would read NaN, not 0 ms), counts no bytes, keeps its
// parameters whole where they are (never freed nor gathered back: the storage stays), stages nothing,
// and hands back autograd's gradients divided by the job's size, in fp32 (dividing by 4 is exact).
TEST(DataParallel, GlooSyncThatCommunicatesNothingKeepsItsParametersWhole) {
  auto group = world_of_one(torch::kCPU, "gloo");
  torch::manual_seed(15);
  auto layer0 = torch::randn({8, 8}).requires_grad_(), layer1 = torch::randn({8, 8}).requires_grad_(),
       head = torch::randn({11, 8}).requires_grad_();
  const std::vector<torch::Tensor> params{layer0, layer1, head};
  const std::vector<std::vector<torch::Tensor>> units{{layer0}, {layer1}, {head}};
  const auto x = torch::randn({5, 8});
  auto loss_of = [&] { return torch::log_softmax(x.matmul(layer0).tanh().matmul(layer1).tanh().matmul(head.t()), -1).sum(); };
  constexpr int64_t kJob = 4;
  loss_of().backward();
  std::vector<torch::Tensor> expected, values;
  for (auto& p : params) {
    expected.push_back(p.grad() / kJob);
    values.push_back(p.detach().clone());
    p.mutable_grad() = torch::Tensor();
  }
  for (const auto stage : {ShardingStage::none, ShardingStage::optimizer, ShardingStage::gradients, ShardingStage::full}) {
    SCOPED_TRACE("stage " + std::to_string(static_cast<int>(stage)));
    const bool sharded = stage != ShardingStage::none;
    GradientSync sync(*group, params, /*bucket_bytes=*/1, stage, units, sharded ? torch::kBFloat16 : torch::kFloat,
                      /*communicates=*/false);
    sync.divide_gradients_by(kJob);
    EXPECT_EQ(sync.stage(), sharded ? ShardingStage::optimizer : ShardingStage::none);
    EXPECT_EQ(sync.reduce_dtype(), torch::kFloat);
    int64_t whole = 0;
    for (const auto& b : sync.layout().buckets) whole += b.numel;
    EXPECT_EQ(sync.parameter_bytes(), 4 * whole);
    EXPECT_EQ(sync.gradient_bytes(), 4 * whole);
    const auto bytes = sync.collective_bytes();
    EXPECT_EQ(bytes.all_reduce + bytes.reduce_scatter + bytes.all_gather, 0);
    std::vector<const void*> storage;
    for (const auto& p : params) storage.push_back(p.data_ptr());
    for (int step = 0; step < 2; ++step) {
      sync.begin_step();
      for (int64_t u = 0; u < 3; ++u) sync.before_unit(u);  // as the model's forward calls them
      const auto loss = loss_of();
      for (int64_t u = 0; u < 3; ++u) sync.after_unit(u);
      loss.backward();
      sync.finish();
      EXPECT_EQ(sync.staging_peak_bytes(), 0);
      const auto ms = sync.collective_ms();
      if (sharded) {
        EXPECT_EQ(ms.reduce_scatter, 0.0);
        EXPECT_EQ(ms.all_gather, 0.0);
        EXPECT_TRUE(std::isnan(ms.all_reduce));
      } else {
        EXPECT_EQ(ms.all_reduce, 0.0);
      }
      EXPECT_EQ(sync.comm_ms(), 0.0);
      for (size_t i = 0; i < params.size(); ++i) {
        const size_t k = sync_index(sync, params[i]);
        const auto got = sharded ? sync.gradient_shard(sync.layout().bucket_of[k])
                                       .narrow(0, sync.layout().offset_of[k], params[i].numel())
                                       .view(params[i].sizes())
                                 : params[i].grad();
        EXPECT_TRUE(torch::equal(got, expected[i])) << "param " << i << " step " << step;
        params[i].mutable_grad() = torch::Tensor();
      }
      if (sharded) {
        sync.gather_parameters();
        sync.wait_parameters(/*whole=*/true);
      }
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(params[i], values[i])) << "param " << i;
        EXPECT_EQ(params[i].data_ptr(), storage[i]) << "param " << i << " moved";
      }
    }
  }
}

TEST(DataParallel, ReductionDtypeNamesFailClosed) {
  EXPECT_EQ(distributed_dtype_of("fp32"), torch::kFloat);
  EXPECT_EQ(distributed_dtype_of("bf16"), torch::kBFloat16);
  EXPECT_THROW(distributed_dtype_of("fp16"), std::invalid_argument);
}

TEST(DataParallel, NcclWorldOfOneHandsBackAutogradsGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: NCCL runs on the GPU machine";
  check_identity_world(torch::Device(torch::kCUDA, 0), "nccl");
}

TEST(DataParallel, TransportAgainstDeviceIsRefused) {
  WorldEnv w;
  w.master_port = free_port();
  EXPECT_THROW(ProcessGroup(w, "nccl", torch::kCPU, std::chrono::seconds(5)), std::invalid_argument);
  if (torch::cuda::is_available()) {
    EXPECT_THROW(ProcessGroup(w, "gloo", torch::Device(torch::kCUDA, 0), std::chrono::seconds(5)), std::invalid_argument);
  }
}
