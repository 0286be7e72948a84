// kernels/reference/optimizer.cpp: the `optimizer` seam's backends: AdamW in plain LibTorch ops (the
// reference) and LibTorch's fused multi-tensor AdamW. Both keep the step count and the learning rate
// on the device, so neither reads the host and a CUDA graph can capture either.
// Tests: kernels_tests --gtest_filter='Parity*optimizer*:Optimizer*' (tests/kernels/parity_test.cpp:
// every backend against the reference in fp64; tests/kernels/optimizer_test.cpp: the reference against
// torch::optim::AdamW in fp64). Benchmark: build/kernels/bench/optimizer_bench.
#include "kernels/reference/ops.h"

namespace ablate::kernels::reference {
namespace {

void check_lists(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps) {
  TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                  exp_avg_sqs.size() == params.size() && steps.size() == params.size(),
              "optimizer seam: params, grads, exp_avgs, exp_avg_sqs and steps must have the same length");
}

}  // namespace

void adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
           at::TensorList steps, const torch::Tensor& lr, const AdamWHyper& h) {
  check_lists(params, grads, exp_avgs, exp_avg_sqs, steps);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    auto p = params[i], m = exp_avgs[i], v = exp_avg_sqs[i], step = steps[i];
    const auto& g = grads[i];
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
}

void adamw_fused(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps, const torch::Tensor& lr, const AdamWHyper& h) {
  check_lists(params, grads, exp_avgs, exp_avg_sqs, steps);
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  at::_foreach_add_(steps, 1);
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, h.beta1, h.beta2,
                    h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
}

}  // namespace ablate::kernels::reference
