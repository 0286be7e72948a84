// kernels/dense_gemm/fp8_quantize.h: FP8 quantisation with current scaling for the FP8 GEMMs
// (fp8_scaled_mm.cu). A GEMM operand x [R, C] is read twice by a training step's three GEMMs: once along
// its rows (its own GEMM's inner dimension is C) and once transposed (the weight gradient's inner
// dimension is R). quantize() writes both from two passes over x:
//   pass 1 (ablate_fp8_<scaling>_amax): the amax of every row and column of each 64 x 64 tile, folded
//          into the row, column (rowwise) or tensor (tensorwise) amax by atomic max;
//   pass 2 (ablate_fp8_<scaling>_cast): the scale from the amax, the cast of the tile along its rows and,
//          through shared memory, transposed along its columns, and the inverse scales the GEMM
//          multiplies back.
// scale = fp8_max / amax (1 when amax = 0), optionally rounded down to a power of two (then the scaling
// itself is exact); a non-finite amax (an inf or NaN in x) makes the scale NaN, so every value quantised
// with it and every GEMM output that reads it is NaN: the loss turns non-finite and the run stops there,
// never trains on silently clipped values. Values are cast round-to-nearest-even with saturation at
// fp8_max. quantize_reference() is the same arithmetic in LibTorch ops on any device: the CUDA kernels
// match it bit for bit.
// Tests: kernels_tests --gtest_filter='Fp8*' (tests/kernels/fp8_test.cpp). Benchmark:
// build/bench/kernels_bench --benchmark_filter=dense_gemm (kernels/dense_gemm/bench.cpp).
#pragma once
#include <torch/torch.h>

namespace ablate::kernels::fp8 {

enum class Scaling {
  tensorwise,  // one scale for the whole tensor (both orientations share it)
  rowwise,     // one scale per row of each orientation: per row of x, and per column of x for x^T
};

struct QuantizeOptions {
  Scaling scaling = Scaling::tensorwise;
  at::ScalarType dtype = at::kFloat8_e4m3fn;  // kFloat8_e4m3fn or kFloat8_e5m2
  bool power_of_two_scales = false;
  bool rows = true;  // write x quantised along its rows
  bool cols = true;  // write x^T quantised along x's columns
};

// x [R, C] quantised; the parts not asked for are undefined tensors.
struct Quantized {
  torch::Tensor rows;          // [R, C] fp8: x * scale (per tensor, or per row of x)
  torch::Tensor rows_inverse;  // fp32 1 / scale: [1] (tensorwise) or [R] (rowwise)
  torch::Tensor cols;          // [C, R] fp8: x^T * scale (per tensor, or per column of x)
  torch::Tensor cols_inverse;  // fp32 1 / scale: [1] (tensorwise) or [C] (rowwise)
};

// The largest finite value of an FP8 dtype (448 for e4m3fn, 57344 for e5m2).
float max_finite(at::ScalarType dtype);

// LibTorch ops, any device and floating dtype of x (2-D).
Quantized quantize_reference(const torch::Tensor& x, const QuantizeOptions& options);

#if defined(ABLATE_HAVE_CUDA)
// The two-pass CUDA kernels: x a 2-D fp32 or bf16 CUDA tensor whose sizes are multiples of 16 (what the
// FP8 GEMMs take); throws c10::Error naming what is wrong otherwise.
Quantized quantize(const torch::Tensor& x, const QuantizeOptions& options);
#endif

}  // namespace ablate::kernels::fp8
