// kernels/optimizer/fused_adamw.cpp: backend `fused_adamw` of seam `optimizer`: LibTorch's fused
// multi-tensor AdamW kernel (at::_fused_adamw_ with the learning rate and the gradient scale as
// tensors), every parameter of a group in a few launches; step counts stay on the device, so a CUDA graph
// can capture it.
// Tests: kernels_tests --gtest_filter='Parity*optimizer*'. Benchmark: kernels_bench --benchmark_filter=optimizer.
#include "kernels/optimizer/optimizer_lists.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

void adamw_fused(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps, const torch::Tensor& lr, const torch::Tensor& grad_scale, const AdamWHyper& h,
                 at::TensorList rounded) {
  check_optimizer_lists(params, grads, exp_avgs, exp_avg_sqs, steps, grad_scale, rounded);
  if (params.empty()) return;
  torch::NoGradGuard no_grad;
  at::_foreach_add_(steps, 1);
  // grad_scale: the kernel divides each gradient as it loads it and stores it back divided (one pass
  // over the gradients fewer than a separate clipping multiply).
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, h.beta1, h.beta2,
                    h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false,
                    grad_scale.defined() ? std::optional<torch::Tensor>(grad_scale) : std::nullopt);
  write_rounded(params, rounded);  // LibTorch's kernel writes fp32 only
}

}  // namespace

ABLATE_REGISTER_BACKENDS(optimizer_fused_adamw) {
  registry.optimizer("fused_adamw", &adamw_fused);
}

}  // namespace ablate::kernels
