// kernels/moe_router/reference.h: what every backend of seam `moe_router` (MoeRouterFn in
// kernels/seams.h: the E block's fp32 router) shares: the argument checks.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels::reference {

// Checks x [T,d] (a floating dtype), weight [E,d] on x's device and 1 <= top_k <= E (throws c10::Error
// naming the argument and its shape).
void check_moe_router_args(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k);

}  // namespace ablate::kernels::reference
