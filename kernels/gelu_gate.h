// kernels/gelu_gate.h: the R block's output gate, gelu(g) * h (docs/model.md "R"): g the gate branch of
// the input projection (bf16 under autocast), h the recurrence's output (fp32), the exact (erf) GELU in
// fp32 and the product rounded once to g's dtype, which is what the output projection takes. LibTorch
// ran it as g cast to fp32, gelu, a product in fp32 and autocast's cast of the product for the
// projection, and backward as two products, gelu's backward and two casts: ~0.45 ms of nam56r-small's
// step on the H100 for its one R layer (profiled before 3d32509, 2026-11-26,
// experiments/results/2026-11-26-h100-s13/). On CUDA (g bf16 or fp32, h fp32) one pass
// each way (gelu_gate.cu), with LibTorch's arithmetic (its gelu and gelu-backward formulas, the same
// order of products); elsewhere the LibTorch ops. Not a seam: model glue, with a test against fp64 and
// a benchmark. Tests: kernels_tests --gtest_filter='GeluGate*'. Benchmark: kernels_bench
// --benchmark_filter=gelu_gate.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels {

// gelu(g) * h in fp32, returned in g's dtype; g and h of one shape. Differentiable in both.
torch::Tensor gelu_gate(const torch::Tensor& g, const torch::Tensor& h);
// The same in LibTorch ops (the CPU path, and the reference of the CUDA pass's tests and benchmark).
torch::Tensor gelu_gate_ops(const torch::Tensor& g, const torch::Tensor& h);

#if defined(ABLATE_HAVE_CUDA)
namespace fused {
// The CUDA passes: contiguous g (bf16 or fp32) and h (fp32) of one size on one device.
bool gelu_gate_cuda_supports(const torch::Tensor& g, const torch::Tensor& h);
torch::Tensor gelu_gate_cuda(const torch::Tensor& g, const torch::Tensor& h);
// {dg in g's dtype, dh in fp32} from d (the output's gradient, in g's dtype).
std::pair<torch::Tensor, torch::Tensor> gelu_gate_backward_cuda(const torch::Tensor& d, const torch::Tensor& g,
                                                                const torch::Tensor& h);
}  // namespace fused
#endif

}  // namespace ablate::kernels
