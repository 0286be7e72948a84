// kernels/ssm_scan/limits.h: the shapes the ssm_scan fused_cuda kernels take, shared by the kernels
// (fused_cuda.cu and its fused_cuda_*.cuh) and the availability check of their catalog row
// (catalog.cpp), which is plain C++: one definition, so the catalog never admits a shape the kernels
// refuse. Every other tunable is in fused_cuda_config.cuh.
#pragma once
#include <cstddef>

#if defined(__CUDACC__)
#define ABLATE_SSM_SCAN_HOST_DEVICE __host__ __device__
#else
#define ABLATE_SSM_SCAN_HOST_DEVICE
#endif

namespace ablate::kernels::fused {

// Longest chunk L: the log alpha scans hold a chunk's rows two a lane (lane, lane + 32) of one warp.
inline constexpr int kMaxChunk = 64;
// Largest head dim P and state N: the backward's dy loader takes 2 column pairs a lane (2 lane + 64 u),
// its key dot 4 keys a lane, and the state scans' accumulators are sized for N = kMaxDim.
inline constexpr int kMaxDim = 128;
// Shared memory a block may use on an H100 (and H200): the SIMT backward chunk must fit it.
inline constexpr std::size_t kHopperSmemPerBlock = 232448;

// Padded leading dimension of the SIMT path's fp32 tiles: odd, so a warp's column-strided reads hit
// distinct banks.
ABLATE_SSM_SCAN_HOST_DEVICE constexpr int ld_of(int width) { return width + 1; }

// Floats of shared memory the SIMT path's backward chunk kernel takes at chunk L, head dim P, state N.
ABLATE_SSM_SCAN_HOST_DEVICE constexpr std::size_t bwd_chunk_smem_floats(int L, int P, int N) {
  const int rows_big = (L + 1) > P ? (L + 1) : P;
  return 3 * L + (L + 1) + 3 * L + (L + 1) + 1 + static_cast<std::size_t>(L) * ld_of(N) +
         static_cast<std::size_t>(L + 1) * ld_of(N) + static_cast<std::size_t>(L + 1) * ld_of(P) +
         static_cast<std::size_t>(L) * ld_of(P) + 2 * static_cast<std::size_t>(L) * ld_of(L) +
         static_cast<std::size_t>(rows_big) * ld_of(N);
}

}  // namespace ablate::kernels::fused
