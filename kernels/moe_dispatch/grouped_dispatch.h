// kernels/moe_dispatch/grouped_dispatch.h: the dropless grouped dispatch that the grouped backends of
// seam `moe_dispatch` share, with the expert GEMMs as a parameter: `grouped_mm` (grouped_mm.cpp: bf16
// grouped GEMMs) and `grouped_mm_fp8_rowwise` (grouped_mm_fp8.cu: FP8 grouped GEMMs). What the dispatch
// does around the GEMMs (slots sorted by expert on the device, row gathers and sums, the weighted SwiGLU,
// capacity, expert parallelism) is the same for both; see grouped_dispatch.cpp.
// Tests: kernels_tests (parity_test.cpp moe rows). Benchmark: kernels_bench --benchmark_filter=moe_dispatch.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/moe_dispatch/expert_exchange.h"

namespace ablate::kernels {

// The expert matrices' shapes in one call: w1, w3 [E, f, d], w2 [E, d, f] as given, and the widths the
// GEMMs run at (dp, fp: d and f zero-padded to multiples of 8, _grouped_mm's 16-byte row strides), in
// `dtype` (the autocast dtype, else x's). `chunks`: the experts of each chunk the dispatch runs apart,
// consecutive, summing to E (expert_chunk_sizes: a pipelined exchange, expert_exchange.h); {E} else.
struct ExpertShape {
  int64_t d = 0, f = 0, dp = 0, fp = 0;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> chunks;
};

// The experts' two projections of one call, one pair a chunk of experts (ExpertShape::chunks), over that
// chunk's rows in expert order (rows [S, dp]; group_end [chunk's experts] int32, each expert's group
// end): gate_up[c](rows) -> [S, 2 fp], the gate projection's fp columns then the up projection's;
// down[c](hidden [S, fp]) -> [S, dp]. Differentiable with respect to their input and to the master
// weights they were made from; each chunk's weight gradient lands in its own experts' rows (no sum over
// chunks, no zero-filled whole-size gradient a chunk).
struct ExpertProjections {
  using Projection = std::function<torch::Tensor(const torch::Tensor& rows, const torch::Tensor& group_end)>;
  std::vector<Projection> gate_up, down;
};

// The GEMM step: makes a call's projections from the master weights (once a call, whatever number of
// local runs expert parallelism makes); autocast is off while it and the projections run.
using ExpertGemmStep = std::function<ExpertProjections(const torch::Tensor& w1, const torch::Tensor& w3,
                                                       const torch::Tensor& w2, const ExpertShape& shape)>;

// MoeDispatchFn (kernels/seams.h) over `gemms`: dropless without a host sync (a capacity factor weights
// the slots past capacity 0 and counts them), expert parallel when `exchange` spans several ranks.
torch::Tensor grouped_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                               const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                               double capacity_factor, torch::Tensor* dropped, const ExpertExchange* exchange,
                               const ExpertGemmStep& gemms);

}  // namespace ablate::kernels
