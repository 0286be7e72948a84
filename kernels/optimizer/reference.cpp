// kernels/optimizer/reference.cpp: the reference backend of seam `optimizer` (OptimizerFn in
// kernels/seams.h): AdamW one parameter at a time in LibTorch ops, the arithmetic of
// torch::optim::AdamW (p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)), g first divided by grad_scale when
// given, with t, lr and the scale read from device tensors,
// so it reads nothing on the host and a CUDA graph can capture it; the rounded copies after.
// Tests: kernels_tests --gtest_filter='Parity*optimizer*:Optimizer*' (parity_test.cpp: every backend
// against this one in fp64; optimizer_test.cpp: this one against torch::optim::AdamW in fp64).
// Benchmark: build/bench/kernels_bench --benchmark_filter=optimizer.
#include "kernels/optimizer/optimizer_lists.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

void adamw_reference(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                     at::TensorList steps, const torch::Tensor& lr, const torch::Tensor& grad_scale, const AdamWHyper& h,
                     at::TensorList rounded) {
  check_optimizer_lists(params, grads, exp_avgs, exp_avg_sqs, steps, grad_scale, rounded);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    auto p = params[i], m = exp_avgs[i], v = exp_avg_sqs[i], step = steps[i];
    const auto g = grad_scale.defined() ? grads[i] / grad_scale.to(grads[i].scalar_type()) : grads[i];
    step.add_(1);
    const auto t = step.to(p.scalar_type()), rate = lr.to(p.scalar_type());
    p.mul_(1 - rate * h.weight_decay);
    m.mul_(h.beta1).add_(g, 1 - h.beta1);
    v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
    const auto bias_correction1 = 1 - torch::pow(h.beta1, t);
    const auto bias_correction2 = 1 - torch::pow(h.beta2, t);
    const auto denom = v.sqrt() / bias_correction2.sqrt() + h.eps;
    p.sub_(m / denom * (rate / bias_correction1));
  }
  write_rounded(params, rounded);
}

}  // namespace

ABLATE_REGISTER_BACKENDS(optimizer_reference) {
  registry.optimizer("reference", &adamw_reference);
}

}  // namespace ablate::kernels
