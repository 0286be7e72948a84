// kernels/optimizer/optimizer_lists.h: the OptimizerFn contract's list check that the optimizer
// backends share (reference.cpp, fused_adamw.cpp, fused_cuda.cu), and the rounded copies' pass of the two
// in LibTorch ops.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels {

inline void check_optimizer_lists(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                  at::TensorList exp_avg_sqs, at::TensorList steps, const torch::Tensor& grad_scale,
                                  at::TensorList rounded) {
  TORCH_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() &&
                  exp_avg_sqs.size() == params.size() && steps.size() == params.size(),
              "optimizer seam: params, grads, exp_avgs, exp_avg_sqs and steps must have the same length");
  TORCH_CHECK(!grad_scale.defined() || (grad_scale.dim() == 0 && grad_scale.scalar_type() == torch::kFloat),
              "optimizer seam: grad_scale must be undefined or a 0-dim fp32 tensor, got ",
              grad_scale.defined() ? c10::str(grad_scale.sizes(), " ", grad_scale.scalar_type()) : std::string());
  TORCH_CHECK(rounded.empty() || rounded.size() == params.size(),
              "optimizer seam: rounded must be empty or hold one tensor per parameter, got ", rounded.size(), " for ",
              params.size());
  for (size_t i = 0; i < rounded.size(); ++i)
    TORCH_CHECK(rounded[i].scalar_type() == torch::kBFloat16 && rounded[i].sizes() == params[i].sizes() &&
                    rounded[i].device() == params[i].device(),
                "optimizer seam: rounded[", i, "] must be bf16 with parameter ", i, "'s shape ", params[i].sizes(),
                " on ", params[i].device(), ", got ", rounded[i].scalar_type(), " ", rounded[i].sizes(), " on ",
                rounded[i].device());
}

// The backends that update the fp32 values in LibTorch ops round them afterwards, in one pass.
inline void write_rounded(at::TensorList params, at::TensorList rounded) {
  if (!rounded.empty()) at::_foreach_copy_(rounded, params);
}

}  // namespace ablate::kernels
