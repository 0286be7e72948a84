// kernels/dense_gemm/reference.h: the reference backend of seam `dense_gemm` (DenseGemmFn in
// kernels/seams.h), y = x W^T (+ b). Under CUDA autocast with an fp32 weight (the training posture: fp32
// master weights, bf16 arithmetic) the weight gradient is written in fp32 by the GEMM itself (at::mm with
// an fp32 output: cuBLAS accumulates in fp32 either way) where autocast's linear produced it in bf16 and
// then cast it back to the weight's dtype in a separate, strided copy (~0.1 ms a step of nam56r-small on
// the H100, a launch a weight). Forward and input gradient are autocast's own (the same casts, the same
// GEMMs: bit for bit); the weight and bias gradients skip a bf16 rounding. Everywhere else (CPU, no
// autocast, half weights) it is torch::linear.
// Tests: kernels_tests --gtest_filter='DenseGemmReference*:Parity*dense_gemm*'
// (tests/kernels/dense_gemm_reference_test.cpp, tests/kernels/parity_test.cpp).
#pragma once
#include <torch/torch.h>

namespace ablate::kernels::reference {

torch::Tensor dense_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

}  // namespace ablate::kernels::reference
