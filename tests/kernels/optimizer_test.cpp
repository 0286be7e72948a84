// tests/kernels/optimizer_test.cpp: the `optimizer` seam's reference against LibTorch's own
// torch::optim::AdamW, the implementation the harness used before the seam existed, in fp64 on the
// CPU: same hyper-parameters, a learning-rate schedule, weight decay, fresh random gradients each
// step. Agreement to 1e-12 relative ties the reference (and through the parity driver every other
// backend) to the established arithmetic. Run: build/tests/kernels_tests --gtest_filter='Optimizer*'
#include <gtest/gtest.h>

#include <vector>

#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels {
namespace {

using testing::random_normal;
using testing::relative_error;
using testing::seeded_generator;

TEST(OptimizerReference, MatchesTorchOptimAdamWInFp64) {
  auto gen = seeded_generator(11);
  const std::vector<std::vector<int64_t>> shapes = {{6, 4}, {9}, {1}};
  std::vector<torch::Tensor> inits, ours, theirs, exp_avgs, exp_avg_sqs, steps;
  for (const auto& shape : shapes) {
    const auto init = random_normal(shape, gen);
    inits.push_back(init.clone());
    ours.push_back(init.clone());
    theirs.push_back(init.clone().requires_grad_(true));
    exp_avgs.push_back(torch::zeros(shape, torch::kDouble));
    exp_avg_sqs.push_back(torch::zeros(shape, torch::kDouble));
    steps.push_back(torch::zeros({}, torch::kFloat));
  }
  const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  auto options = torch::optim::AdamWOptions(1.0 / 64).betas({hyper.beta1, hyper.beta2}).eps(hyper.eps).weight_decay(
      hyper.weight_decay);
  torch::optim::AdamW oracle(theirs, options);
  // Binary fractions: exact in the fp32 learning-rate tensor the contract asks for, so both sides
  // use the same rates and only fp64 rounding order differs (~1e-16).
  const std::vector<double> schedule = {1.0 / 64, 1.0 / 32, 3.0 / 128, 1.0 / 128, 1.0 / 256};
  for (const double lr : schedule) {
    std::vector<torch::Tensor> grads;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back(random_normal(shapes[i], gen, 0.3));
      theirs[i].mutable_grad() = grads.back().clone();
    }
    static_cast<torch::optim::AdamWOptions&>(oracle.param_groups()[0].options()).lr(lr);
    oracle.step();
    implementations().optimizer.at("reference")(ours, grads, exp_avgs, exp_avg_sqs, steps,
                                                torch::full({}, lr, torch::kFloat), {}, hyper, {});
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_LE(relative_error(ours[i], theirs[i].detach()), 1e-12) << "parameter " << i;
    EXPECT_EQ(steps[i].item<float>(), static_cast<float>(schedule.size())) << "parameter " << i;
    // The comparison means something only if the parameters moved: ~lr per step, 5 steps.
    EXPECT_GT((ours[i] - inits[i]).abs().max().item<double>(), 1e-2) << "parameter " << i << " did not move";
  }
}

// A gradient scale s is the update on the gradients divided by s (how clipping folds into the step):
// against the same update on pre-divided gradients, fp64, to 1e-15 (one division either way; the
// updates themselves are the same operations); the reference leaves the gradients as they were.
TEST(OptimizerReference, GradScaleIsTheUpdateOnDividedGradients) {
  auto gen = seeded_generator(12);
  const std::vector<int64_t> shape = {5, 3};
  const auto init = random_normal(shape, gen), grad = random_normal(shape, gen, 0.3);
  const auto scale = torch::full({}, 3.0, torch::kFloat);
  const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  const auto lr = torch::full({}, 1.0 / 64, torch::kFloat);
  const auto update = [&](const torch::Tensor& g, const torch::Tensor& s) {
    std::vector<torch::Tensor> p = {init.clone()}, m = {torch::zeros(shape, torch::kDouble)},
                               v = {torch::zeros(shape, torch::kDouble)}, t = {torch::zeros({}, torch::kFloat)}, gs = {g};
    implementations().optimizer.at("reference")(p, gs, m, v, t, lr, s, hyper, {});
    return torch::cat({p[0].flatten(), m[0].flatten(), v[0].flatten()});  // parameter and moments
  };
  const auto scaled_grad = grad.clone();
  const auto with_scale = update(scaled_grad, scale), pre_divided = update(grad / 3.0, {});
  EXPECT_LE(relative_error(with_scale, pre_divided), 1e-15);
  EXPECT_TRUE(torch::equal(scaled_grad, grad)) << "the reference changed its gradients";
  // The scale took effect: the first moment of an unscaled update is 3x (Adam's first step itself is
  // nearly scale-free, so the moments are what shows it).
  const int64_t n = init.numel();
  const auto m_unscaled = update(grad.clone(), {}).narrow(0, n, n), m_scaled = with_scale.narrow(0, n, n);
  EXPECT_LE(relative_error(m_unscaled, m_scaled * 3.0), 1e-15);
}

TEST(OptimizerReference, RefusesMismatchedListsAndBadScales) {
  std::vector<torch::Tensor> one = {torch::ones({2})}, none;
  const auto& update = implementations().optimizer.at("reference");
  EXPECT_THROW(update(one, none, one, one, one, torch::ones({}), {}, AdamWHyper{}, {}), c10::Error);
  EXPECT_THROW(update(one, one, one, one, one, torch::ones({}), torch::ones({1}), AdamWHyper{}, {}), c10::Error);
  EXPECT_THROW(update(one, one, one, one, one, torch::ones({}), torch::ones({}, torch::kDouble), AdamWHyper{}, {}),
               c10::Error);
  // Rounded copies: one per parameter, bf16, the parameter's shape.
  const std::vector<torch::Tensor> two = {torch::ones({2}, torch::kBFloat16), torch::ones({2}, torch::kBFloat16)};
  const std::vector<torch::Tensor> wide = {torch::ones({2}, torch::kFloat)}, longer = {torch::ones({3}, torch::kBFloat16)};
  for (const auto& rounded : {two, wide, longer})
    EXPECT_THROW(update(one, one, one, one, one, torch::ones({}), {}, AdamWHyper{}, rounded), c10::Error);
}

// The rounded copies (what a sharded stage gathers of a GEMM weight kept in bf16) hold the updated fp32
// parameter rounded to nearest, bit for bit what .to(kBFloat16) gives, for every backend available here
// (the CPU: reference; a CUDA device: all three), over three updates of odd shapes, one a view 2 bytes
// past its allocation (fused_cuda's element-wise path); the fp32 update is the same as without them
// (to fp32 ulps where that view moves fused_cuda's update to the element-wise path).
TEST(OptimizerRounded, EveryBackendWritesTheUpdateRoundedToNearest) {
  std::vector<std::pair<std::string, torch::Device>> runs = {{"reference", torch::kCPU}};
  if (torch::cuda::is_available())
    for (const std::string name : {"reference", "fused_adamw", "fused_cuda"})
      if (implementations().optimizer.count(name)) runs.emplace_back(name, torch::kCUDA);
  for (const auto& [name, device] : runs) {
    SCOPED_TRACE(name + " on " + device.str());
    auto gen = seeded_generator(41);
    const auto fp32 = torch::TensorOptions(device).dtype(torch::kFloat);
    const std::vector<std::vector<int64_t>> shapes = {{37, 5}, {8193}, {1}};
    std::vector<torch::Tensor> p, m, v, t, rounded, p_plain, m_plain, v_plain, t_plain;
    for (size_t i = 0; i < shapes.size(); ++i) {
      p.push_back(random_normal(shapes[i], gen).to(fp32));
      m.push_back(random_normal(shapes[i], gen, 0.1).to(fp32));
      v.push_back(random_normal(shapes[i], gen, 0.1).abs().to(fp32));
      t.push_back(torch::full({}, 4.0, fp32));
      const int64_t n = p.back().numel(), offset = i == 1 ? 1 : 0;
      rounded.push_back(torch::full({n + offset}, -7.0, fp32.dtype(torch::kBFloat16))
                            .narrow(0, offset, n)
                            .view(shapes[i]));
      for (auto [plain, x] : {std::pair{&p_plain, &p}, std::pair{&m_plain, &m}, std::pair{&v_plain, &v},
                              std::pair{&t_plain, &t}})
        plain->push_back(x->back().clone());
    }
    const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
    const auto& update = implementations().optimizer.at(name);
    for (const double lr : {1e-2, 3e-2, 2e-2}) {
      std::vector<torch::Tensor> g, g_plain;
      for (const auto& shape : shapes) {
        g.push_back(random_normal(shape, gen, 0.3).to(fp32));
        g_plain.push_back(g.back().clone());
      }
      const auto rate = torch::full({}, lr, fp32), scale = torch::full({}, 2.5, fp32);
      update(p, g, m, v, t, rate, scale, hyper, rounded);
      update(p_plain, g_plain, m_plain, v_plain, t_plain, rate, scale, hyper, {});
      for (size_t i = 0; i < shapes.size(); ++i)
        EXPECT_TRUE(torch::equal(rounded[i], p[i].to(torch::kBFloat16))) << "parameter " << i << " lr " << lr;
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      // Bit for bit, but for fused_cuda's tensor whose rounded copy is unaligned: the element-wise path
      // it then takes may contract into FMAs other than the float4 path's (the plain call's), a few fp32
      // ulps over three updates.
      if (name == "fused_cuda" && i == 1) {
        for (const auto& [got, plain] : {std::pair{p[i], p_plain[i]}, {m[i], m_plain[i]}, {v[i], v_plain[i]}})
          EXPECT_LE(relative_error(got, plain), 1e-6) << "parameter " << i;
        continue;
      }
      EXPECT_TRUE(torch::equal(p[i], p_plain[i])) << "parameter " << i << ": the fp32 update changed";
      EXPECT_TRUE(torch::equal(m[i], m_plain[i]) && torch::equal(v[i], v_plain[i])) << "moments " << i;
    }
  }
}

// fused_cuda puts up to 480 tensors in one launch and finds a block's tensor by a binary search of their
// first blocks: 500 parameters (two launches), sizes from one element to several chunks of 8192 with
// ragged ends, an empty one, and odd offsets (element-wise path), against the fp64 reference from the
// same fp32 state, one scaled update. Tolerance 1e-5 relative to each tensor's largest entry: fp32
// arithmetic, a handful of roundings an element (the reference's are in fp64).
TEST(OptimizerFusedCuda, ManyTensorsAcrossLaunchesMatchTheReference) {
#if !defined(ABLATE_HAVE_CUDA)
  GTEST_SKIP() << "the fused_cuda optimizer needs CUDA: built without it";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "the fused_cuda optimizer needs a CUDA device";
  auto gen = seeded_generator(31);
  const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  std::vector<torch::Tensor> p, g, m, v, t;
  for (int i = 0; i < 500; ++i) {
    const int64_t n = i == 7 ? 0 : i % 50 == 3 ? 3 * 8192 + 5 : i % 10 == 1 ? 8193 : 1 + (i * 37) % 700;
    // fp32 on both sides: the reference starts from the same fp32 state, widened.
    p.push_back(random_normal({n}, gen).to(torch::kFloat));
    g.push_back(random_normal({n}, gen, 0.3).to(torch::kFloat));
    m.push_back(random_normal({n}, gen, 0.1).to(torch::kFloat));
    v.push_back(random_normal({n}, gen, 0.1).abs().to(torch::kFloat));
    t.push_back(torch::full({}, 4.0, torch::kFloat));
  }
  const auto to = [](const std::vector<torch::Tensor>& ts, const torch::TensorOptions& opts) {
    std::vector<torch::Tensor> out;
    for (const auto& x : ts) out.push_back(x.to(opts, /*non_blocking=*/false, /*copy=*/true));
    return out;
  };
  const auto cuda = torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat);
  const auto fp64 = torch::TensorOptions().dtype(torch::kDouble);
  // Every third tensor a contiguous view 4 bytes past its allocation on the device: no float4 there.
  const auto to_cuda_offset = [&](const std::vector<torch::Tensor>& ts) {
    std::vector<torch::Tensor> out;
    for (size_t i = 0; i < ts.size(); ++i) {
      const int64_t offset = i % 3 == 2 ? 1 : 0;
      auto x = torch::empty({ts[i].numel() + offset}, cuda).narrow(0, offset, ts[i].numel());
      out.push_back(x.copy_(ts[i]));
    }
    return out;
  };
  auto cp = to_cuda_offset(p), cg = to_cuda_offset(g), cm = to_cuda_offset(m), cv = to_cuda_offset(v);
  auto ct = to(t, cuda);
  auto rp = to(p, fp64), rg = to(g, fp64), rm = to(m, fp64), rv = to(v, fp64), rt = to(t, torch::kFloat);
  // Rounded copies too, every fifth a bf16 view 2 bytes past its allocation (no 8-byte stores there).
  std::vector<torch::Tensor> rounded;
  for (size_t i = 0; i < p.size(); ++i) {
    const int64_t offset = i % 5 == 4 ? 1 : 0, n = p[i].numel();
    rounded.push_back(torch::empty({n + offset}, cuda.dtype(torch::kBFloat16)).narrow(0, offset, n));
  }
  implementations().optimizer.at("fused_cuda")(cp, cg, cm, cv, ct, torch::full({}, 1e-2, cuda),
                                               torch::full({}, 2.5, cuda), hyper, rounded);
  implementations().optimizer.at("reference")(rp, rg, rm, rv, rt, torch::full({}, 1e-2, torch::kFloat),
                                              torch::full({}, 2.5, torch::kFloat), hyper, {});
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].numel() == 0) continue;
    EXPECT_LE(relative_error(cp[i].cpu().to(torch::kDouble), rp[i], 1e-3), 1e-5) << "parameter " << i;
    EXPECT_LE(relative_error(cm[i].cpu().to(torch::kDouble), rm[i], 1e-3), 1e-5) << "exp_avg " << i;
    EXPECT_LE(relative_error(cv[i].cpu().to(torch::kDouble), rv[i], 1e-3), 1e-5) << "exp_avg_sq " << i;
    EXPECT_EQ(ct[i].item<float>(), 5.f) << "step " << i;
    EXPECT_TRUE(torch::equal(rounded[i], cp[i].to(torch::kBFloat16))) << "rounded " << i;
    // The update moved the parameter (a kernel that skipped a tensor would leave it as it was).
    EXPECT_GT((cp[i].cpu() - p[i]).abs().max().item<float>(), 0.f) << "parameter " << i << " unchanged";
  }
#endif
}

}  // namespace
}  // namespace ablate::kernels
