// kernels/loss/fused_cuda.h: the entry point of backends loss/fused_cuda and loss/fused_cuda_fp8_rowwise
// (kernels/loss/fused_cuda.cu) with its options beyond the seam (per-row reduction, chunk size, the head
// GEMMs' precision), for tests and the benchmark.
// Defined only when nvcc compiled the .cu (ABLATE_HAVE_CUDA); CUDA tensors, fp32 or bf16.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace ablate::kernels::fused {

// Fused linear cross-entropy: cross-entropy of softmax(hidden @ head_weight^T) at targets, masked,
// without the full [N, V] logits (row chunks of ~256 MiB of logits; chunk_rows > 0 overrides).
// mean: the LossFn contract, sum(ce * mask) / max(sum(mask), 1), gradients computed in forward and
// scaled by the upstream scalar in backward (differentiable once). none: ce * mask per row [N], any
// per-row upstream gradient (backward recomputes the logits).
enum class LossReduction { mean, none };
// How the three head GEMMs run: autocast: in the dtype autocast (or the inputs) give; fp8_rowwise: FP8
// GEMMs with current power-of-two scales per row along each GEMM's inner dimension, e4m3 throughout
// (backend fused_cuda_fp8_rowwise; N, d and V multiples of 16; the mean reduction only).
enum class HeadGemms : int64_t { autocast, fp8_rowwise };
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                   const torch::Tensor& targets, const torch::Tensor& mask, LossReduction reduction,
                                   int64_t chunk_rows = 0, HeadGemms gemms = HeadGemms::autocast);

}  // namespace ablate::kernels::fused
