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
                                                torch::full({}, lr, torch::kFloat), {}, hyper);
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
    implementations().optimizer.at("reference")(p, gs, m, v, t, lr, s, hyper);
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
  EXPECT_THROW(update(one, none, one, one, one, torch::ones({}), {}, AdamWHyper{}), c10::Error);
  EXPECT_THROW(update(one, one, one, one, one, torch::ones({}), torch::ones({1}), AdamWHyper{}), c10::Error);
  EXPECT_THROW(update(one, one, one, one, one, torch::ones({}), torch::ones({}, torch::kDouble), AdamWHyper{}),
               c10::Error);
}

}  // namespace
}  // namespace ablate::kernels
