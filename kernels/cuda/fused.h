// kernels/cuda/fused.h: the C++ entry points of the fused CUDA backends (`fused_cuda` rows of the
// catalog) for the row-local seams. Each honours its seam's contract in kernels/dispatch.h and is an
// autograd function (forward and backward are one fused kernel each), so the model trains through it.
// Declared for plain C++ (dispatch.cpp, benchmarks); defined in residual_norm.cu and swiglu.cu, which
// are compiled only when CUDA is (ABLATE_HAVE_CUDA). CUDA tensors only; fp32 or bf16 (the catalog's
// availability check keeps other devices and dtypes on the reference).
// Tests: kernels_tests --gtest_filter='*Parity*fused_cuda*:FusedCuda*' (skip without a GPU).
// Benchmark: bench/fused_bench.
#pragma once
#include <torch/torch.h>

#include <utility>

namespace ablate::kernels::fused {

// ResidualNormFn: s = x + residual (s = residual when x is undefined), y = RMSNorm(s) * weight.
// x, residual [..., d] with d <= 16384 (any width; multiples of 8 on 16-byte aligned rows take the
// vectorised path), weight [d]; x, residual and weight may each be fp32 or bf16. Returns (y, s).
std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const torch::Tensor& weight, double eps);

// SwigluFn: silu(a) * b; a and b of one shape and one dtype (fp32 or bf16).
torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace ablate::kernels::fused
