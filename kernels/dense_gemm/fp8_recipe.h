// kernels/dense_gemm/fp8_recipe.h: the FP8 training recipes and the 2-D scaled GEMM that every FP8 GEMM
// family shares: the blocks' projections (fp8_scaled_mm.cu), the LM head (loss/fused_cuda.cu) and the
// MoE experts (moe_dispatch/grouped_mm_fp8.cu, row-wise only). The recipes are torchao's float8
// training recipes of the same names:
//   tensorwise: one current scale per tensor; x and W e4m3 (3 mantissa bits), the output gradient e5m2
//               (2 bits, exponent range to 57344): with a single scale a tensor's small values sit far
//               below its amax, and gradients span the widest range, so they trade a mantissa bit for range;
//   rowwise:    one current power-of-two scale per row along each GEMM's inner dimension, e4m3
//               throughout: each row's own scale keeps its values near the top of the range, so
//               precision wins over range (a power of two makes the scaling itself exact);
//   delayed:    tensorwise's formats with each operand's scale from its amax over its last calls
//               (fp8_quantize.h "Delayed scaling"; TransformerEngine's default recipe): one pass each
//               instead of two, for values above the past range saturating (projections only);
//   delayed, fast gradient accumulation: delayed's, with the two gradient GEMMs in fast accumulation too.
// Accumulation: Hopper's FP8 tensor cores add products into partial sums of about 14 mantissa bits
// (DeepSeek-V3's measurement). cuBLASLt's default ("2x accumulation", TransformerEngine's split
// accumulator) promotes those partials into fp32 registers every few k-blocks; fast accumulation keeps
// them in the tensor core for the whole inner dimension: faster (a projection's forward + backward ~4 %
// at medium's widths, an H200 on 2026-11-29), its error growing with K. Every recipe accumulates the
// forward fast (K is the layer's width); the gradients' GEMMs sum over the longest dimensions (the output
// width, the tokens: 16384 a micro-batch at medium), which torchao and TransformerEngine keep promoted:
// fast there changes numerics beyond an FP8 cast, so it is a recipe of its own, for the convergence gate
// to judge.
// Tests: kernels_tests --gtest_filter='Fp8*:*Parity*fp8*'.
#pragma once
#include <ATen/ATen.h>

#include "kernels/dense_gemm/fp8_quantize.h"

namespace ablate::kernels::fp8 {

struct Recipe {
  Scaling scaling;
  at::ScalarType inputs;    // x and W
  at::ScalarType gradient;  // dy
  bool power_of_two_scales;
  bool delayed = false;         // scales from each operand's amax history (tensorwise only)
  bool fast_gradients = false;  // dx and dW GEMMs in fast accumulation (the forward's always is)

  // How to quantise one operand in `dtype` (inputs or gradient), in the orientations asked for.
  QuantizeOptions options(at::ScalarType dtype, bool rows, bool cols) const {
    QuantizeOptions o;
    o.scaling = scaling;
    o.dtype = dtype;
    o.power_of_two_scales = power_of_two_scales;
    o.rows = rows;
    o.cols = cols;
    return o;
  }
};
inline constexpr Recipe kTensorwise{Scaling::tensorwise, at::kFloat8_e4m3fn, at::kFloat8_e5m2, false};
inline constexpr Recipe kRowwise{Scaling::rowwise, at::kFloat8_e4m3fn, at::kFloat8_e4m3fn, true};
inline constexpr Recipe kDelayed{Scaling::tensorwise, at::kFloat8_e4m3fn, at::kFloat8_e5m2, false, true};
inline constexpr Recipe kDelayedFastGradients{Scaling::tensorwise, at::kFloat8_e4m3fn, at::kFloat8_e5m2, false, true,
                                              true};

// a [M, K] x b^T, b given row-major as b_rows [N, K] (its transpose is the column-major [K, N] operand
// cuBLASLt takes), both quantised along K with their inverse scales ([1] each, or [M] and [N] per row):
// a new [M, N] tensor of `out_dtype` (scaled_mm), or written into `out` (scaled_mm_out).
struct GemmScales {
  torch::Tensor a, b;  // as at::_scaled_mm takes them: [M, 1] and [1, N] per row
  GemmScales(const torch::Tensor& a_inverse, const torch::Tensor& b_inverse, Scaling scaling)
      : a(scaling == Scaling::rowwise ? a_inverse.view({-1, 1}) : a_inverse),
        b(scaling == Scaling::rowwise ? b_inverse.view({1, -1}) : b_inverse) {}
};
inline torch::Tensor scaled_mm(const torch::Tensor& a, const torch::Tensor& a_inverse, const torch::Tensor& b_rows,
                               const torch::Tensor& b_inverse, Scaling scaling, at::ScalarType out_dtype,
                               bool fast_accumulation) {
  const GemmScales s(a_inverse, b_inverse, scaling);
  return at::_scaled_mm(a, b_rows.t(), s.a, s.b, /*bias=*/{}, /*scale_result=*/{}, out_dtype, fast_accumulation);
}
inline void scaled_mm_out(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& a_inverse,
                          const torch::Tensor& b_rows, const torch::Tensor& b_inverse, Scaling scaling,
                          bool fast_accumulation) {
  const GemmScales s(a_inverse, b_inverse, scaling);
  at::_scaled_mm_out(out, a, b_rows.t(), s.a, s.b, /*bias=*/{}, /*scale_result=*/{}, out.scalar_type(),
                     fast_accumulation);
}

}  // namespace ablate::kernels::fp8
