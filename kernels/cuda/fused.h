// kernels/cuda/fused.h: the C++ entry points of the fused CUDA backends (`fused_cuda` rows of the
// catalog) for the row-local seams. Each honours its seam's contract in kernels/dispatch.h and is an
// autograd function (forward and backward are one fused kernel each), so the model trains through it.
// Declared for plain C++ (dispatch.cpp, benchmarks); defined in the .cu files of this folder, which
// are compiled only when CUDA is (ABLATE_HAVE_CUDA). CUDA tensors only; fp32 or bf16 (the catalog's
// availability check keeps other devices and dtypes on the reference). The recurrent seams too:
// ssm_scan (ssm_scan.cu).
// Tests: kernels_tests --gtest_filter='*Parity*fused_cuda*:FusedCuda*' (skip without a GPU).
// Benchmark: bench/fused_bench.
#pragma once
#include <torch/torch.h>

#include <utility>

#include "kernels/dispatch.h"

namespace ablate::kernels::fused {

// ResidualNormFn: s = x + residual (s = residual when x is undefined), y = RMSNorm(s) * weight.
// x, residual [..., d] with d <= 16384 (any width; multiples of 8 on 16-byte aligned rows take the
// vectorised path), weight [d]; x, residual and weight may each be fp32 or bf16. Returns (y, s).
std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const torch::Tensor& weight, double eps);

namespace tuning {
// For bench/fused_bench only: the forward's vectors a thread holds per row (1, 2 or 4; 0 restores the
// built-in rule), i.e. how many threads share a row. Not thread-safe; never called by the harness.
void residual_norm_forward_iters(int iters);
}  // namespace tuning

// SwigluFn: silu(a) * b; a and b of one shape and one dtype (fp32 or bf16).
torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b);

// RopeFn (MLA layout): q = [q_nope ; Rot(q_rope)], k = [k_nope ; Rot(k_rope) for every head], written
// by one launch into contiguous [B,T,H,dn+dr] outputs. Inputs may be strided views (last dim
// contiguous), as the projections produce them; one dtype (fp32 or bf16) for the q and k parts.
std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                             const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                             const torch::Tensor& cos, const torch::Tensor& sin);

// Fused linear cross-entropy: cross-entropy of softmax(hidden @ head_weight^T) at targets, masked,
// without the full [N, V] logits (row chunks of ~64 MiB of logits; chunk_rows > 0 overrides).
// mean: the LossFn contract, sum(ce * mask) / max(sum(mask), 1), gradients computed in forward and
// scaled by the upstream scalar in backward (differentiable once). none: ce * mask per row [N], any
// per-row upstream gradient (backward recomputes the logits).
enum class LossReduction { mean, none };
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                   const torch::Tensor& targets, const torch::Tensor& mask, LossReduction reduction,
                                   int64_t chunk_rows = 0);

// SsmScanFn (Mamba-3 SISO scan, kernels/cuda/ssm_scan.cu): chunked forward and backward in fused
// kernels, fp32 state and arithmetic; x and z fp32 or bf16, q and k fp32 or bf16 (z and k converted to
// x's and q's dtype when they differ). P and N multiples of 16 up to 128, chunk 16/32/48/64 (a clear
// error otherwise, and for P = N = 128 at chunk 64, whose backward tiles exceed shared memory).
SsmScanOutputs ssm_scan(const SsmScanInputs& inputs);

}  // namespace ablate::kernels::fused
