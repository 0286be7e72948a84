// kernels/ssm_scan/fused_cuda_config.cuh: every tunable and launch shape of the ssm_scan fused_cuda backend
// (threads a block, chunk and head-dim limits, loads in flight, tile padding, the state scans' slice, the
// finish launch's blocks, the blocks an SM the per-chunk kernels are compiled for, the shape compiled with
// constants), each with its why.
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/ssm_scan/limits.h"

namespace ablate::kernels::fused {
namespace {

// 8 warps a block (every kernel but the finish launch): the tile tasks and the state scans' accumulator
// tiles (kScanTilesPerWarp) are spread over them; the bf16 tiles fit 2 such blocks an SM on an H100.
constexpr int kThreads = 256;
// kMaxChunk, kMaxDim, ld_of: kernels/ssm_scan/limits.h (the catalog row's availability check reads them).

// Global-to-shared tile loads: each thread issues kLoadsInFlight 16-byte loads before it stores any
// (a loop of one dependent element load per iteration waits a full memory latency per element).
constexpr int kLoadsInFlight = 4;

// Whether a launch runs its products on tensor cores: when x is bf16, whether q/k are bf16 or fp32 (the
// M block under autocast gives bf16 x, z and fp32 q, k: with q/k left out of this rule it ran the SIMT
// path, 7.5 ms of backward chunk a layer on the H100 instead of 3.4). fp32 x stays on the exact path.
template <typename TX, typename TQK>
constexpr bool kTensorCores = std::is_same_v<TX, __nv_bfloat16>;
// Blocks per SM the per-chunk kernels are compiled for: the tensor-core path's bf16 tiles fit 2 (or
// more) blocks of 8 warps on an H100, whose warps then hide each other's barrier and load latency.
template <typename TX, typename TQK>
constexpr int kMinBlocks = kTensorCores<TX, TQK> ? 2 : 0;  // 0: no directive (SIMT)

// The shape the tensor-core kernels (both state scans, the output and backward chunk kernels) are also
// compiled for with the chunk, head dim and state as constants (model.mamba's defaults, every named
// configuration's M layer: chunk 64, P 64, N 128): the shared tiles' offsets, the tasks' split and the
// loops' bounds then fold at compile time, where the general instantiation computes them at run time
// (integer instructions were half of the backward chunk kernel's at this shape; fwd+bwd 1.92 -> 1.70 ms
// on an H200, 2026-11-29, experiments/results/2026-11-29-h200-ssm-fixed-shape/). Any other supported
// shape runs the general instantiation.
struct ChunkShape {
  int L, P, N;
};
constexpr ChunkShape kFixedShape{64, 64, 128};
__host__ __device__ constexpr bool is_fixed_shape(int L, int P, int N) {
  return L == kFixedShape.L && P == kFixedShape.P && N == kFixedShape.N;
}

// Row stride (elements) of a bf16 tile `width` (a multiple of 16) wide: width + 8, an odd number of
// 16-byte units, so the 8 row addresses of an ldmatrix 8x8 matrix hit 8 distinct groups of 4 banks.
__host__ __device__ constexpr int ld_tc(int width) { return width + 8; }

// Rows of P a state-scan block carries (a block per slice, head, batch): 64-row slices run 2 blocks an
// SM; 32-row slices at 4 an SM took fwd+bwd 2.19 ms against 2.04 (2026-11-26, 48db02b,
// experiments/results/2026-11-26-h100-s16/).
constexpr int kScanRows = 64;
// Accumulator tiles a warp holds: the kScanRows x N slice in 16 x 16 tiles over the block's warps.
constexpr int kScanTilesPerWarp = (kScanRows / 16) * (kMaxDim / 16) / (kThreads / 32);

// A chunk's rows in 32-row halves: r_t is summed per half (store_r_half_sums) and the finish launch
// gives each half a warp.
constexpr int kRowHalves = kMaxChunk / 32;
static_assert(kThreads >= 32 * kRowHalves, "a thread per row of the chunk");
// Threads of a finish block: a warp per row half of its chunk; then the blocks of dD's sums (a warp a head).
constexpr int kFinishThreads = 32 * kRowHalves;
__host__ __device__ inline int finish_sum_blocks(int H) { return (H * 32 + kFinishThreads - 1) / kFinishThreads; }
inline int64_t finish_blocks(int64_t B, int64_t H, int64_t nC) { return B * H * nC + finish_sum_blocks(static_cast<int>(H)); }

}  // namespace
}  // namespace ablate::kernels::fused
