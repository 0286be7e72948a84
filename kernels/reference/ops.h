// kernels/reference/ops.h: the LibTorch-op backends of the catalog (every seam's `reference`, the
// `chunked` loss and the vendor SDPA adapters) and the small numeric helpers they share with the model
// (compute dtype, autocast exclusion, pair rotation). The scans have their own header (scans.h).
// Contracts (shapes, dtypes): kernels/dispatch.h. Registered by kernels/dispatch.cpp.
// Tests: tests/kernels/parity_test.cpp (every backend against these references).
#pragma once
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "kernels/dispatch.h"  // AdamWHyper

namespace ablate::kernels::reference {

// The dtype arithmetic happens in: fp32 for fp32/bf16/fp16 inputs, fp64 for fp64 inputs (tests).
inline at::ScalarType compute_dtype(const torch::Tensor& t) { return at::promote_types(t.scalar_type(), at::kFloat); }

// While alive, autocast is off on every device: for code whose contract is fp32 arithmetic (matmuls
// under autocast would silently run in bf16). Restores the previous state on destruction.
class NoAutocastScope {
 public:
  NoAutocastScope() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// Rotates adjacent pairs (x[2i], x[2i+1]) of the last dim by angles whose cos/sin are given with the
// last dim halved (broadcast against x's leading dims): (a, b) -> (a cos - b sin, a sin + b cos).
// Arithmetic in compute_dtype(x); the result has x's dtype. Used by the rope seam and Mamba-3's Rot(Phi).
torch::Tensor rotate_adjacent_pairs(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// --- seam `attention` -------------------------------------------------------------------------
// Explicit causal softmax attention (scores, -inf above the diagonal, softmax, weighted sum).
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale);

// The vendor kernels of LibTorch's scaled_dot_product_attention, each called directly (no silent
// backend choice). Head dims are zero-padded to what the kernel accepts and the output sliced back;
// the explicit `scale` keeps the padding exact. CUDA only; flash and cuDNN need bf16/fp16.
enum class SdpaKernel { flash, cudnn, efficient };
torch::Tensor sdpa_attention(SdpaKernel kernel, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale);

// --- seam `rope` (MLA layout, see RopeFn) -------------------------------------------------------
std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                             const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                             const torch::Tensor& cos, const torch::Tensor& sin);

// --- seam `residual_norm` -------------------------------------------------------------------------
std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const torch::Tensor& weight, double eps);

// --- seam `swiglu` --------------------------------------------------------------------------------
torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b);

// --- seam `moe_dispatch`: the standard path ---------------------------------------------------------
// Permute the (token, slot) assignments by expert, pad every expert to one capacity, three batched
// GEMMs (bmm), unpad, unpermute, weighted sum. Dropless (capacity_factor 0) sizes the capacity by the
// largest expert load, which is one host synchronisation per call: the documented nature of this path.
// With a capacity factor the capacity is ceil(cf * T * k / E) and the path is free of host syncs; slots
// beyond capacity (in token order) are dropped and counted.
torch::Tensor moe_dispatch_standard(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                    const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                    double capacity_factor, torch::Tensor* dropped);

// The MoeDispatchFn contract's shape checks, shared by the backends (TORCH_CHECK: c10::Error).
void check_moe_dispatch_args(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor);
// grouped_mm: dropless without a host sync: slots sorted by expert on the device and the three expert
// matmuls as LibTorch grouped GEMMs (at::_grouped_mm) over per-expert offsets (kernels/reference/moe_grouped.cpp).
torch::Tensor moe_dispatch_grouped(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                   const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                   double capacity_factor, torch::Tensor* dropped);

// --- seam `loss` ------------------------------------------------------------------------------------
// reference: the full [N, V] logits, then masked mean cross-entropy.
torch::Tensor loss_full_logits(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                               const torch::Tensor& targets, const torch::Tensor& mask);
// chunked: the same loss over row chunks of `chunk_rows` rows (0: as many rows as keep one chunk's
// logits near 16 Mi elements). A custom autograd function: backward recomputes each chunk's logits from
// the saved log-sum-exp, so no [N, V] tensor exists in forward or backward. Differentiable once.
torch::Tensor loss_chunked(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                           const torch::Tensor& mask, int64_t chunk_rows = 0);

// --- seam `optimizer` (see OptimizerFn in kernels/dispatch.h) ---------------------------------------
// reference: AdamW one parameter at a time in LibTorch ops, the arithmetic of torch::optim::AdamW
// (p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m /
// (sqrt(v) / sqrt(1 - b2^t) + eps)) with t and lr read from device tensors.
void adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
           at::TensorList steps, const torch::Tensor& lr, const AdamWHyper& hyper);
// fused_adamw: LibTorch's multi-tensor fused AdamW kernel (at::_fused_adamw_, tensor learning rate).
void adamw_fused(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps, const torch::Tensor& lr, const AdamWHyper& hyper);

}  // namespace ablate::kernels::reference
