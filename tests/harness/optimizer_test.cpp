// tests/harness/optimizer_test.cpp: harness::clip_grad_norm (harness/train/optimizer.h) against the
// global norm and scaling written out in fp64, on random gradients of mixed shapes and dtypes
// (fp32 and bf16, as a model with bf16 parameters would give), parameters without a gradient left
// alone. The optimizer's update itself is tested through its seam (tests/kernels/optimizer_test.cpp)
// and by checkpoint + resume (runner_test.cpp).
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

// fp32 gradients: the norm to 1e-6 relative (fp32 sums of ~2,000 squares); bf16 gradients are scaled
// in bf16, so their comparison allows its rounding (4e-3).
TEST(ClipGradNorm, NormAndScalingMatchTheDefinition) {
  for (const double scale : {0.01, 10.0}) {  // under and over max_norm 1.0
    auto params = parameters_with_gradients(scale);
    std::vector<torch::Tensor> before;
    for (const auto& p : params) before.push_back(p.grad().defined() ? p.grad().to(torch::kDouble) : torch::Tensor());
    const double want = norm_in_fp64(params);
    const auto norm = clip_grad_norm(params, 1.0);
    EXPECT_EQ(norm.scalar_type(), torch::kFloat);
    EXPECT_NEAR(norm.item<double>(), want, 1e-6 * want) << "scale " << scale;
    const double coef = std::min(1.0, 1.0 / (want + 1e-6));
    for (size_t i = 0; i < params.size(); ++i) {
      if (!before[i].defined()) {
        EXPECT_FALSE(params[i].grad().defined());
        continue;
      }
      const double tol = params[i].grad().scalar_type() == torch::kBFloat16 ? 4e-3 : 1e-6;
      const auto got = params[i].grad().to(torch::kDouble), expected = before[i] * coef;
      EXPECT_LE((got - expected).abs().max().item<double>(), tol * expected.abs().max().item<double>())
          << "parameter " << i << ", scale " << scale;
    }
    if (scale == 10.0) EXPECT_NEAR(norm_in_fp64(params), 1.0, 1e-3) << "clipped to max_norm";
  }
}

// max_norm 0: the norm is measured, nothing is scaled; no gradient at all: a zero norm.
TEST(ClipGradNorm, ZeroMaxNormMeasuresOnlyAndNoGradientsGiveZero) {
  auto params = parameters_with_gradients(10.0);
  const auto before = params[0].grad().clone();
  EXPECT_NEAR(clip_grad_norm(params, 0.0).item<double>(), norm_in_fp64(params), 1e-6 * norm_in_fp64(params));
  EXPECT_TRUE(torch::equal(params[0].grad(), before));
  std::vector<torch::Tensor> none = {torch::randn({3}).requires_grad_(true)};
  EXPECT_EQ(clip_grad_norm(none, 1.0).item<double>(), 0.0);
}

}  // namespace
}  // namespace ablate::harness
