// kernels/causal_conv/reference.h: what every backend of seam `causal_conv` (CausalConvFn in
// kernels/seams.h: the R block's causal depthwise convolution over time) shares: the argument checks.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels::reference {

// Checks x [B,T,C], weight [C,K] (K >= 1), bias [C] and that they share a device (throws c10::Error
// naming the argument and its shape).
void check_causal_conv_args(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace ablate::kernels::reference
