// kernels/optimizer/optimizer_lists.h: the OptimizerFn contract's list check that both optimizer
// backends share (reference.cpp, fused_adamw.cpp).
#pragma once
#include <torch/torch.h>

namespace ablate::kernels {

inline void check_optimizer_lists(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                  at::TensorList exp_avg_sqs, at::TensorList steps, const torch::Tensor& grad_scale) {
  TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                  exp_avg_sqs.size() == params.size() && steps.size() == params.size(),
              "optimizer seam: params, grads, exp_avgs, exp_avg_sqs and steps must have the same length");
  TORCH_CHECK(!grad_scale.defined() || (grad_scale.dim() == 0 && grad_scale.scalar_type() == torch::kFloat),
              "optimizer seam: grad_scale must be undefined or a 0-dim fp32 tensor, got ",
              grad_scale.defined() ? c10::str(grad_scale.sizes(), " ", grad_scale.scalar_type()) : std::string());
}

}  // namespace ablate::kernels
