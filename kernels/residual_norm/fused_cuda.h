// kernels/residual_norm/fused_cuda.h: the entry points of backend residual_norm/fused_cuda
// (kernels/residual_norm/fused_cuda.cu) for code that calls it beyond the seam: the benchmark's layout
// knob and direct tests. Defined only when nvcc compiled the .cu (ABLATE_HAVE_CUDA); CUDA tensors only.
#pragma once
#include <torch/torch.h>

#include <utility>

namespace ablate::kernels::fused {

// ResidualNormFn: s = x + residual (s = residual when x is undefined), y = RMSNorm(s) * weight.
// x, residual [..., d] with d <= 16384 (any width; multiples of 8 on 16-byte aligned rows take the
// vectorised path), weight [d]; x, residual and weight may each be fp32 or bf16. Returns (y, s).
std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const torch::Tensor& weight, double eps);

namespace tuning {
// For the benchmark only: the forward's vectors a thread holds per row (1, 2 or 4; 0 restores the
// built-in rule), i.e. how many threads share a row. Not thread-safe; never called by the harness.
void residual_norm_forward_iters(int iters);
}  // namespace tuning

}  // namespace ablate::kernels::fused
