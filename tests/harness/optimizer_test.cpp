// tests/harness/optimizer_test.cpp: harness::measure_grad_norm (harness/train/optimizer.h) against the
// global norm and clipping scale written out in fp64, on random gradients of mixed shapes and dtypes
// (fp32 and bf16, as a model with bf16 parameters would give), parameters without a gradient left
// alone; and the clipped step (the scale divided in by the update) against LibTorch's
// clip_grad_norm_ followed by torch::optim::AdamW. The update itself is tested through its seam
// (tests/kernels/optimizer_test.cpp) and by checkpoint + resume (runner_test.cpp).
// Run: build/tests/harness_tests --gtest_filter='ClipGradNorm*'
#include "harness/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ablate::harness {
namespace {

// Parameters with random gradients: a few fp32 matrices and vectors, one bf16 matrix, one without a
// gradient. Gradients N(0, scale^2).
std::vector<torch::Tensor> parameters_with_gradients(double scale) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 33}, {33}, {7, 5, 3}, {1}}) {
    auto p = torch::randn(shape).requires_grad_(true);
    p.mutable_grad() = torch::randn(shape) * scale;
    params.push_back(p);
  }
  auto half = torch::randn({16, 8}).to(torch::kBFloat16).requires_grad_(true);
  half.mutable_grad() = (torch::randn({16, 8}) * scale).to(torch::kBFloat16);
  params.push_back(half);
  params.push_back(torch::randn({4}).requires_grad_(true));  // no gradient
  return params;
}

double norm_in_fp64(const std::vector<torch::Tensor>& params) {
  double sum = 0;
  for (const auto& p : params)
    if (p.grad().defined()) sum += p.grad().to(torch::kDouble).square().sum().item<double>();
  return std::sqrt(sum);
}

// The norm to 1e-6 relative (fp32 sums of ~2,000 squares); the scale by its definition from that norm;
// the gradients untouched (the optimizer divides them as it reads them).
TEST(ClipGradNorm, NormAndScaleMatchTheDefinitionAndLeaveTheGradients) {
  for (const double scale : {0.01, 10.0}) {  // under and over max_norm 1.0
    auto params = parameters_with_gradients(scale);
    std::vector<torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    const double want = norm_in_fp64(params);
    const auto clipping = measure_grad_norm(params, 1.0);
    EXPECT_EQ(clipping.norm.scalar_type(), torch::kFloat);
    EXPECT_EQ(clipping.scale.scalar_type(), torch::kFloat);
    EXPECT_NEAR(clipping.norm.item<double>(), want, 1e-6 * want) << "scale " << scale;
    // 1 / torch's coefficient min(1, max_norm / (norm + 1e-6)): 1 under max_norm, norm / max_norm over.
    EXPECT_NEAR(clipping.scale.item<double>(), std::max(1.0, want + 1e-6), 1e-6 * std::max(1.0, want));
    for (size_t i = 0; i < params.size(); ++i) {
      if (!before[i].defined()) {
        EXPECT_FALSE(params[i].grad().defined());
        continue;
      }
      EXPECT_TRUE(torch::equal(params[i].grad(), before[i])) << "parameter " << i << " was touched";
    }
  }
}

// max_norm 0: the norm is measured and no scale is made; no gradient at all: a zero norm.
TEST(ClipGradNorm, ZeroMaxNormMeasuresOnlyAndNoGradientsGiveZero) {
  auto params = parameters_with_gradients(10.0);
  const auto clipping = measure_grad_norm(params, 0.0);
  EXPECT_NEAR(clipping.norm.item<double>(), norm_in_fp64(params), 1e-6 * norm_in_fp64(params));
  EXPECT_FALSE(clipping.scale.defined());
  std::vector<torch::Tensor> none = {torch::randn({3}).requires_grad_(true)};
  EXPECT_EQ(measure_grad_norm(none, 1.0).norm.item<double>(), 0.0);
}

// The clipped step is torch's recipe, clip_grad_norm_ then the update: AdamW::step(scale) against
// LibTorch's torch::nn::utils::clip_grad_norm_ and torch::optim::AdamW, fp32 on the CPU, over gradients
// 10x the max norm (so the clipping changes the moments). Tolerance 1e-5 relative: fp32, a multiply by
// the coefficient there and a divide by its inverse here, over 3 updates.
TEST(ClipGradNorm, ClippedStepMatchesTorchClipThenUpdate) {
  auto ours = parameters_with_gradients(10.0);
  ours.pop_back();  // every parameter of the optimizer has a gradient
  ours.pop_back();  // fp32 master weights only (the bf16 one stays in the norm tests)
  std::vector<torch::Tensor> theirs;
  for (const auto& p : ours) theirs.push_back(p.detach().clone().requires_grad_(true));
  TrainSection train;
  train.lr = 1e-2;
  train.weight_decay = 0;  // ours decays matrices only, torch's AdamW every parameter: not this test's point
  const kernels::Dispatcher reference;
  AdamW adamw(ours, train, reference);
  adamw.set_lr(train.lr);
  torch::optim::AdamW oracle(theirs, torch::optim::AdamWOptions(train.lr)
                                         .betas({train.beta1, train.beta2})
                                         .eps(train.eps)
                                         .weight_decay(train.weight_decay));
  torch::manual_seed(5);
  for (int update = 0; update < 3; ++update) {
    for (size_t i = 0; i < ours.size(); ++i) {
      const auto g = torch::randn(ours[i].sizes()) * 10.0;
      ours[i].mutable_grad() = g.clone();
      theirs[i].mutable_grad() = g.clone();
    }
    adamw.step(measure_grad_norm(ours, 1.0).scale);
    torch::nn::utils::clip_grad_norm_(theirs, 1.0);
    oracle.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    const auto diff = (ours[i].detach() - theirs[i].detach()).abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * theirs[i].detach().abs().max().item<double>()) << "parameter " << i;
  }
}

}  // namespace
}  // namespace ablate::harness
