// kernels/dense_gemm/fp8_quantize.h: FP8 quantisation with current (and delayed) scaling for the FP8 GEMMs
// (dense_gemm/fp8_scaled_mm.cu, moe_dispatch/grouped_mm_fp8.cu). A GEMM operand x [R, C] is read twice by
// a training step's three GEMMs: once along its rows (its own GEMM's inner dimension is C) and once
// transposed (the weight gradient's inner dimension is R). quantize() writes both from two passes over x:
//   pass 1 (ablate_fp8_<scaling>_amax): the amax of every row and column of each 64 x 64 tile, folded
//          into the row, column (rowwise) or tensor (tensorwise) amax by atomic max;
//   pass 2 (ablate_fp8_<scaling>_cast): the scale from the amax, the cast of the tile along its rows and,
//          through shared memory, transposed along its columns, and the inverse scales the GEMM
//          multiplies back.
// The expert GEMMs' operands take the same two passes in two more layouts (rowwise only):
//   quantize_stacked(): a stack of matrices, the experts' weights [E, R, C], each matrix its own rows and
//          transposed; a second stack may sit under the first in each matrix (w1 over w3: the gate and
//          up projections, one [E, 2f, d] operand never written in high precision);
//   quantize_grouped(): token rows grouped by expert ([S, C] in expert order with the groups' ends): the
//          rows as quantize()'s, and the transposed operand of the weight gradient, whose inner dimension
//          is each group's tokens: a scale per (group, column), each group's columns starting at a
//          multiple of 16 (what the FP8 grouped GEMM's TMA loads along K need), zeros between.
// scale = fp8_max / amax (1 when amax = 0), optionally rounded down to a power of two (then the scaling
// itself is exact); a non-finite amax (an inf or NaN in x) makes the scale NaN, so every value quantised
// with it and every GEMM output that reads it is NaN: the loss turns non-finite and the run stops there,
// never trains on silently clipped values. Values are cast round-to-nearest-even with saturation at
// fp8_max. The *_reference() functions are the same arithmetic in LibTorch ops on any device: the CUDA
// kernels match them bit for bit.
// Tests: kernels_tests --gtest_filter='Fp8*' (tests/kernels/fp8_test.cpp, fp8_experts_test.cpp).
// Benchmark: build/bench/kernels_bench --benchmark_filter='dense_gemm|fp8_quantize'.
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

// Stacked matrices, rowwise: x [B, R1, C] and, when defined, below [B, R2, C] under each of x's matrices
// (R = R1 + R2): rows [B, R, C] along C with rows_inverse [B, R]; cols [B, C, R] (each matrix transposed)
// along R with cols_inverse [B, C].
Quantized quantize_stacked_reference(const torch::Tensor& x, const torch::Tensor& below, const QuantizeOptions& options);

// Token groups along the rows of the weight gradient's transposed operand: each group padded to a
// multiple of 16 rows (16 for an empty group, so that no group of the GEMM is empty), the padded
// groups' ends [G] int32 (group_end [G] int32 the groups' ends, on any device: LibTorch ops, no host
// read), and the padded row count a buffer for S rows in G groups needs at most.
torch::Tensor padded_group_ends(const torch::Tensor& group_end);
int64_t padded_rows(int64_t rows, int64_t groups);

// Grouped token rows, rowwise: x [S, C] in group order, group_end [G] int32, padded_end =
// padded_group_ends(group_end), `rows_out` = padded_rows(S, G): rows [S, C] with rows_inverse [S] as
// quantize_reference's; cols [C, rows_out], group g's rows transposed into columns [padded_end[g-1],
// padded_end[g-1] + its rows) scaled along them, zeros elsewhere, with cols_inverse [G, C] (1 for an
// empty group). Reads the group ends on the host (a reference for tests).
Quantized quantize_grouped_reference(const torch::Tensor& x, const torch::Tensor& group_end,
                                     const torch::Tensor& padded_end, int64_t rows_out, const QuantizeOptions& options);

// Delayed scaling (tensorwise only; TransformerEngine's and torchao's "delayed" recipe): the scale comes
// from the largest amax this operand had over its last kAmaxHistory calls, so one pass casts x and enters
// x's own amax into the history for the calls after it. A history is int32 [kAmaxHistory + 2]: the amaxes
// (float bits) of the last calls, newest first; then this call's amax as the pass reduces it, and a count
// of the pass's blocks done (both 0 between calls). Values above the delayed scale's range saturate at
// fp8_max (the price of one pass: what TransformerEngine's delayed recipe pays too); a non-finite value of
// x is cast to NaN (it does not saturate silently) and its amax makes the next call's scale NaN.
inline constexpr int64_t kAmaxHistory = 16;
torch::Tensor new_amax_history(const torch::Device& device);  // zeros: scale 1 until the first amax enters
// Throws c10::Error unless `history` is such a tensor on x's device and the options are tensorwise.
void check_amax_history(const torch::Tensor& history, const torch::Tensor& x, const QuantizeOptions& options);
// LibTorch ops, any device: the CUDA pass's arithmetic, `history` updated in place.
Quantized quantize_delayed_reference(const torch::Tensor& x, torch::Tensor& history, const QuantizeOptions& options);

#if defined(ABLATE_HAVE_CUDA)
// The two-pass CUDA kernels: x a 2-D fp32 or bf16 CUDA tensor whose sizes are multiples of 16 (what the
// FP8 GEMMs take); throws c10::Error naming what is wrong otherwise.
Quantized quantize(const torch::Tensor& x, const QuantizeOptions& options);
// The same two passes for the stacked and grouped layouts above (rowwise scaling; x and below fp32 or
// bf16; R and C multiples of 16 for stacks, C for groups, any S). No host read: capturable.
Quantized quantize_stacked(const torch::Tensor& x, const torch::Tensor& below, const QuantizeOptions& options);
Quantized quantize_grouped(const torch::Tensor& x, const torch::Tensor& group_end, const torch::Tensor& padded_end,
                           int64_t rows_out, const QuantizeOptions& options);
// Delayed scaling's one pass (tensorwise; x as quantize() takes it; history from new_amax_history() on x's
// device, updated in stream order: no host read, capturable).
Quantized quantize_delayed(const torch::Tensor& x, const torch::Tensor& history, const QuantizeOptions& options);
#endif

}  // namespace ablate::kernels::fp8
