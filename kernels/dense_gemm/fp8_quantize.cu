// kernels/dense_gemm/fp8_quantize.cu: quantize(), quantize_stacked() and quantize_grouped() of
// fp8_quantize.h, two passes over x [R, C] in 64 x 64 tiles (what each pass does: fp8_quantize.h), one
// grid layer per matrix of a stack; quantize_delayed(), pass 2 alone with the scale from an amax history. Memory-bound: pass 1 reads x once, pass 2 reads it again and writes
// both FP8 orientations (1 byte an element each), every global access 8 or 16 bytes a thread but for
// token groups' transposed rows where they land off an 8-byte boundary (a group's columns start at a
// multiple of 16, its rows anywhere), written a byte at a time; nam56r-small's largest activation, 16384 x 4352 bf16 (143 MB), moves 428 MB:
// ~0.14 ms at the H100's ~3 TB/s. Two passes because current scaling needs a tensor's (row's, column's)
// amax before the first value is cast; delayed scaling takes the scale from earlier calls' amaxes and
// runs one.
// Tests: kernels_tests --gtest_filter='Fp8*'. Benchmark: build/bench/kernels_bench --benchmark_filter=fp8_quantize.
// Without a CUDA compiler this file is compiled as C++ and leaves everything out (fp8_quantize.h
// declares quantize() only for CUDA builds).
#include "kernels/dense_gemm/fp8_quantize.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fp8 {
namespace {

using fused::ceil_div;
using torch::Tensor;

// Tile shape and threads: a 64 x 64 tile of x, 256 threads; a thread moves 8 consecutive elements of a row
// (one 16-byte load of bf16, two of fp32; 8 bytes of FP8 out), so 8 threads span the tile's 64 columns,
// 32 rows a sweep, 2 sweeps.
constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kVec = 8;                                     // elements a thread moves at once
constexpr int kThreadsPerRow = kTile / kVec;                // 8, consecutive lanes of one warp
constexpr int kRowsPerSweep = kThreads / kThreadsPerRow;    // 32
constexpr int kSweeps = kTile / kRowsPerSweep;              // 2
constexpr int kWarps = kThreads / 32;                       // 8
constexpr int kSharedStride = kTile + 1;                    // a padded row of the shared tile (column reads)

// |v| as ordered bits: for non-negative floats (and +NaN, above +inf) integer order is float order, and a
// NaN wins every max (fmaxf would drop it).
__device__ __forceinline__ int magnitude_bits(float v) { return __float_as_int(fabsf(v)); }

// fp8_max / amax (1 for amax 0), optionally rounded down to a power of two; NaN for a non-finite amax.
__device__ __forceinline__ float scale_from_amax(float amax, float fp8_max, bool power_of_two) {
  float scale = amax > 0.f ? fp8_max / amax : 1.f;
  if (power_of_two) scale = __int_as_float(__float_as_int(scale) & 0xff800000);
  return isfinite(amax) ? scale : __int_as_float(0x7fc00000);
}

// kVec values times scale, round-to-nearest-even with saturation, packed little-endian into 8 bytes: one
// cvt.rn.satfinite.{e4m3,e5m2}x2.f32 a pair (what the one-value conversion runs too, with a zero beside).
// kNonFiniteToNan (delayed scaling, whose scale does not see this x): an inf becomes NaN, not fp8_max.
template <bool kE4M3, bool kNonFiniteToNan = false>
__device__ __forceinline__ uint2 cast8(const float (&v)[kVec], float scale) {
  uint32_t word[2];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float scaled[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      scaled[k] = v[4 * w + k] * scale;
      if (kNonFiniteToNan && !isfinite(v[4 * w + k])) scaled[k] = __int_as_float(0x7fc00000);
    }
    constexpr auto kFormat = kE4M3 ? __NV_E4M3 : __NV_E5M2;
    const uint32_t low = __nv_cvt_float2_to_fp8x2(make_float2(scaled[0], scaled[1]), __NV_SATFINITE, kFormat);
    const uint32_t high = __nv_cvt_float2_to_fp8x2(make_float2(scaled[2], scaled[3]), __NV_SATFINITE, kFormat);
    word[w] = low | (high << 16);
  }
  return make_uint2(word[0], word[1]);
}

// What the two passes read and write. x is `batches` matrices of R x C (blockIdx.z picks one): rows
// [0, split) of each from `top` ([batches, split, C]), the rest from `bottom` ([batches, R - split, C]) when
// given. Outputs per matrix b: rows at b R C (row-major), cols at b C R (transposed), inverse scales at
// b R and b C. With token groups (grouped: batches = 1) the cols orientation is per (group, column): group
// g's rows [end[g-1], end[g]) go to columns [pend[g-1], pend[g-1] + rows) of cols [C, cols_stride], the
// rest of each column zero, inverse scales at g C.
template <typename T>
struct TileArgs {
  const T* top;
  const T* bottom;
  int64_t split, R, C;
  int* row_amax;     // [batches R]
  int* col_amax;     // [batches C], or [G C] when grouped; null when cols are not asked for
  int* tensor_amax;  // [1]
  float fp8_max;
  bool power_of_two;
  uint8_t* rows;
  float* rows_inverse;
  uint8_t* cols;
  float* cols_inverse;
  const int* group_end;   // [G] (grouped)
  const int* padded_end;  // [G] (grouped)
  int groups;
  int64_t cols_stride;    // the row length of cols when grouped
  int* history;           // delayed scaling: the amax history (fp8_quantize.h), updated by the pass
};

// The group ends in shared memory (grouped kernels: 2 G ints of dynamic shared memory).
struct SharedGroups {
  const int* end;
  const int* padded_end;
  int count;
  // The first group whose end lies after `row` (count when none).
  __device__ __forceinline__ int of_row(int64_t row) const {
    int lo = 0, hi = count;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (end[mid] > row) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
  __device__ __forceinline__ int64_t start(int g) const { return g == 0 ? 0 : end[g - 1]; }
  __device__ __forceinline__ int64_t padded_start(int g) const { return g == 0 ? 0 : padded_end[g - 1]; }
};

template <typename T>
__device__ __forceinline__ SharedGroups load_groups(const TileArgs<T>& a) {
  extern __shared__ int shared_groups[];
  for (int i = threadIdx.x; i < a.groups; i += blockDim.x) {
    shared_groups[i] = a.group_end[i];
    shared_groups[a.groups + i] = a.padded_end[i];
  }
  return {shared_groups, shared_groups + a.groups, a.groups};  // read after the caller's __syncthreads
}

// This thread's kVec elements of row gr of matrix b (a group of 8 columns at gc) as fp32, 0 outside x: rows
// [0, split) from top, the rest from bottom. C is a multiple of 16, so a group of 8 is wholly inside or
// outside, and every row starts 16-byte aligned (launch() sees to it). Loads go through the read-only
// data path (ld.global.nc): x is never written here, but the compiler cannot prove that for pointers
// held in TileArgs, and plain loads left these passes slower than ones taking __restrict__ arguments.
template <typename T>
__device__ __forceinline__ void load_row_group(const TileArgs<T>& a, int64_t b, int64_t gr, int64_t gc,
                                               float (&v)[kVec]) {
  if (gr < a.R && gc < a.C) {
    const T* src = gr < a.split ? a.top + (b * a.split + gr) * a.C + gc
                                : a.bottom + (b * (a.R - a.split) + gr - a.split) * a.C + gc;
    constexpr int kWords = kVec * sizeof(T) / 16;  // 16-byte words: 1 of bf16, 2 of fp32
    union {
      int4 words[kWords];
      T elems[kVec];
    } u;
#pragma unroll
    for (int k = 0; k < kWords; ++k) u.words[k] = __ldg(reinterpret_cast<const int4*>(src) + k);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = fused::to_float(u.elems[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = 0.f;
  }
}

// Each of the tile's columns' amax over its rows, from every thread's col_m (the amax of its kVec
// columns over its rows): across a warp by shuffles, across the warps through col_partial. Every thread
// calls it; thread t < kTile gets column t's.
__device__ __forceinline__ int tile_column_amax(int (&col_m)[kVec], int (*col_partial)[kTile]) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, c = (t % kThreadsPerRow) * kVec;
#pragma unroll
  for (int i = 0; i < kVec; ++i)
#pragma unroll
    for (int offset = kThreadsPerRow; offset < 32; offset <<= 1)
      col_m[i] = max(col_m[i], __shfl_xor_sync(0xffffffffu, col_m[i], offset));
  if (lane < kThreadsPerRow)
#pragma unroll
    for (int i = 0; i < kVec; ++i) col_partial[warp][c + i] = col_m[i];
  __syncthreads();
  int m = 0;
  if (t < kTile)
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = max(m, col_partial[w][t]);
  return m;
}

// Pass 1. rowwise: atomic max of each tile row's and column's amax into row_amax [B R] and col_amax [B C]
// (per group of rows, [G C], when grouped; skipped when null); tensorwise: of the tile's amax into
// tensor_amax [1]. The amax buffers start at 0. Rows reduce across their 8 lanes by shuffles, columns (and
// the tensorwise tile) across a warp by shuffles and the 8 warps through shared memory; grouped columns
// walk the tile's rows in shared memory, one atomic per group the tile meets.
template <typename T, bool kRowwise, bool kGrouped>
__device__ __forceinline__ void amax_tile(const TileArgs<T>& a) {
  __shared__ int col_partial[kWarps][kTile];
  __shared__ float tile[kGrouped ? kTile : 1][kGrouped ? kSharedStride : 1];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile, b = blockIdx.z;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, c = (t % kThreadsPerRow) * kVec;
  SharedGroups groups{};
  if constexpr (kGrouped) groups = load_groups(a);
  int col_m[kVec] = {};
  int all_m = 0;
#pragma unroll
  for (int s = 0; s < kSweeps; ++s) {
    const int r = t / kThreadsPerRow + s * kRowsPerSweep;
    const int64_t gr = row0 + r;
    float v[kVec];
    load_row_group(a, b, gr, col0 + c, v);
    int row_m = 0;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int bits = magnitude_bits(v[i]);
      row_m = max(row_m, bits);
      col_m[i] = max(col_m[i], bits);
      if constexpr (kGrouped) tile[r][c + i] = v[i];
    }
    if constexpr (kRowwise) {
#pragma unroll
      for (int offset = kThreadsPerRow / 2; offset > 0; offset >>= 1)
        row_m = max(row_m, __shfl_xor_sync(0xffffffffu, row_m, offset));
      if (t % kThreadsPerRow == 0 && gr < a.R) atomicMax(a.row_amax + b * a.R + gr, row_m);
    } else {
      all_m = max(all_m, row_m);
    }
  }
  if constexpr (kRowwise) {
    if (a.col_amax == nullptr) return;  // no transposed orientation asked for
    if constexpr (kGrouped) {
      __syncthreads();  // the group ends and the tile
      const int first = groups.of_row(row0), last = groups.of_row(min(row0 + kTile, a.R) - 1);
      if (first == last) {
        // The tile's rows all in one group (the usual case: groups are far taller than a tile).
        const int m = tile_column_amax(col_m, col_partial);
        if (first < groups.count && t < kTile && col0 + t < a.C && m > 0)
          atomicMax(a.col_amax + int64_t(first) * a.C + col0 + t, m);
      } else if (t < kTile && col0 + t < a.C) {
        // The tile's rows in order, their groups in order: one atomic per group the tile meets.
        const int64_t rows = min(int64_t(kTile), a.R - row0);
        int g = first, m = 0;
        for (int r = 0; r < rows && g < groups.count; ++r) {
          while (g < groups.count && row0 + r >= groups.end[g]) {
            if (m > 0) atomicMax(a.col_amax + int64_t(g) * a.C + col0 + t, m);
            m = 0;
            ++g;
          }
          if (g < groups.count) m = max(m, magnitude_bits(tile[r][t]));
        }
        if (g < groups.count && m > 0) atomicMax(a.col_amax + int64_t(g) * a.C + col0 + t, m);
      }
    } else {
      const int m = tile_column_amax(col_m, col_partial);
      if (t < kTile && col0 + t < a.C) atomicMax(a.col_amax + b * a.C + col0 + t, m);
    }
  } else {
    // One atomic a block: every block's atomics meet at one address, where they run one at a time.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) all_m = max(all_m, __shfl_xor_sync(0xffffffffu, all_m, offset));
    if (lane == 0) col_partial[0][warp] = all_m;
    __syncthreads();
    if (t == 0) {
      int m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = max(m, col_partial[0][w]);
      atomicMax(a.tensor_amax, m);
    }
  }
}

// Delayed scaling: the largest amax of the history's past calls (float bits).
template <typename T>
__device__ __forceinline__ int past_amax(const TileArgs<T>& a) {
  int m = 0;
#pragma unroll
  for (int i = 0; i < kAmaxHistory; ++i) m = max(m, a.history[i]);
  return m;
}

// Delayed scaling, once the block cast all its tiles (each thread's amax of its values in m): the block's
// amax into the history's accumulator, and the block done; the last block of the grid (every other block
// has read the history and added its amax, each fenced before it counted itself) shifts the history by
// one and enters the call's amax as the newest (CUDA's threadFenceReduction pattern: no second launch).
template <typename T>
__device__ __forceinline__ void record_amax(const TileArgs<T>& a, int m) {
  __shared__ int warp_amax[kWarps];
  __shared__ bool last_block;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (lane == 0) warp_amax[warp] = m;
  __syncthreads();
  if (t == 0) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = max(m, warp_amax[w]);
    int* accumulated = a.history + kAmaxHistory;
    int* blocks_done = accumulated + 1;
    atomicMax(accumulated, m);
    __threadfence();
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    last_block = atomicAdd(blocks_done, 1) == int(blocks) - 1;
    if (last_block) {
      __threadfence();
      const int newest = atomicExch(accumulated, 0);
      for (int i = kAmaxHistory - 1; i > 0; --i) a.history[i] = a.history[i - 1];
      a.history[0] = newest;
      *blocks_done = 0;
    }
  }
}

// Pass 2 of token groups' cols, after a __syncthreads that made the tile and the group ends visible:
// each of this thread's 8 rows to its group's columns, and, by the first tile row, the inverse scales
// and the zeros between and after the groups. A tile wholly in one group casts with its columns' scales
// from shared memory and writes 8 bytes at once where they land 8-byte aligned (a group's columns start
// at a multiple of 16, its rows anywhere); a tile that meets several groups goes a byte at a time.
template <typename T, bool kE4M3>
__device__ __forceinline__ void cast_grouped_cols(const TileArgs<T>& a, const SharedGroups& groups, int64_t row0,
                                                  int64_t col0, const float (*tile)[kSharedStride],
                                                  float* col_scale) {
  const int t = threadIdx.x, lane = (t % kThreadsPerRow) * kVec;
  const int first = groups.of_row(row0), last = groups.of_row(min(row0 + kTile, a.R) - 1);
  if (first == last && first < groups.count) {
    if (t < kTile && col0 + t < a.C)
      col_scale[t] = scale_from_amax(__int_as_float(a.col_amax[int64_t(first) * a.C + col0 + t]), a.fp8_max,
                                     a.power_of_two);
    __syncthreads();
    const int64_t r0 = row0 + lane, column0 = groups.padded_start(first) + (r0 - groups.start(first));
    const int n = static_cast<int>(min(int64_t(kVec), a.R - r0));
    for (int c = t / kThreadsPerRow; c < kTile && n > 0; c += kRowsPerSweep) {
      const int64_t gc = col0 + c;
      if (gc >= a.C) continue;
      float w[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) w[i] = tile[lane + i][c];
      const uint2 packed = cast8<kE4M3>(w, col_scale[c]);
      uint8_t* out = a.cols + gc * a.cols_stride + column0;
      if (n == kVec && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
        *reinterpret_cast<uint2*>(out) = packed;
      } else {
        for (int i = 0; i < n; ++i) out[i] = uint8_t((i < 4 ? packed.x : packed.y) >> (8 * (i % 4)));
      }
    }
  } else {
    int group_of[kVec];
    int64_t column_of[kVec];
    int g = groups.of_row(row0 + lane);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int64_t gr = row0 + lane + i;
      while (g < groups.count && gr >= groups.end[g]) ++g;
      group_of[i] = gr < a.R ? g : groups.count;
      column_of[i] = group_of[i] < groups.count ? groups.padded_start(g) + (gr - groups.start(g)) : 0;
    }
    for (int c = t / kThreadsPerRow; c < kTile; c += kRowsPerSweep) {
      const int64_t gc = col0 + c;
      if (gc >= a.C) continue;
      uint8_t* out = a.cols + gc * a.cols_stride;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        if (group_of[i] >= groups.count) continue;
        const float amax = __int_as_float(a.col_amax[int64_t(group_of[i]) * a.C + gc]);
        out[column_of[i]] = __nv_cvt_float_to_fp8(
            tile[lane + i][c] * scale_from_amax(amax, a.fp8_max, a.power_of_two), __NV_SATFINITE,
            kE4M3 ? __NV_E4M3 : __NV_E5M2);
      }
    }
  }
  if (row0 != 0) return;
  for (int i = t; i < kTile * groups.count; i += kThreads) {
    const int c = i % kTile, g = i / kTile;
    const int64_t gc = col0 + c;
    if (gc < a.C && a.cols_inverse != nullptr)
      a.cols_inverse[int64_t(g) * a.C + gc] =
          1.f / scale_from_amax(__int_as_float(a.col_amax[int64_t(g) * a.C + gc]), a.fp8_max, a.power_of_two);
  }
  // Each group's padding (to a multiple of 16, or 16 for an empty group), and the tail past the last.
  for (int i = t; i < kTile * (groups.count + 1); i += kThreads) {
    const int c = i % kTile, g = i / kTile;
    const int64_t gc = col0 + c;
    if (gc >= a.C) continue;
    const int64_t from = g < groups.count ? groups.padded_start(g) + (groups.end[g] - groups.start(g))
                                          : groups.padded_end[groups.count - 1];
    const int64_t to = g < groups.count ? groups.padded_end[g] : a.cols_stride;
    for (int64_t p = from; p < to; ++p) a.cols[gc * a.cols_stride + p] = 0;
  }
}

// Pass 2: rows [B R C] and cols [B C R] (either may be null; token groups' cols as above), their inverse
// scales written by the first tile column (rows) and the first tile row (cols). Rows are cast from the
// loaded registers; columns from the tile in shared memory, 8 consecutive rows of one column a thread (8
// threads a column's 64 bytes, so the writes coalesce).
// Tile `at` (column tile, row tile, matrix). kDelayed (tensorwise): the scale from the history's past
// amaxes; returns the amax (bits) of this thread's values (0 otherwise), which record_amax enters.
template <typename T, bool kRowwise, bool kE4M3, bool kGrouped, bool kDelayed = false>
__device__ __forceinline__ int cast_tile(const TileArgs<T>& a, const uint3 at) {
  __shared__ float tile[kTile][kSharedStride];
  __shared__ float row_scale[kTile], col_scale[kTile];
  const int64_t row0 = int64_t(at.y) * kTile, col0 = int64_t(at.x) * kTile, b = at.z;
  const int t = threadIdx.x, c = (t % kThreadsPerRow) * kVec;
  SharedGroups groups{};
  if constexpr (kGrouped) groups = load_groups(a);
  float v[kSweeps][kVec];
#pragma unroll
  for (int s = 0; s < kSweeps; ++s) {
    const int r = t / kThreadsPerRow + s * kRowsPerSweep;
    load_row_group(a, b, row0 + r, col0 + c, v[s]);
    if (a.cols != nullptr)
#pragma unroll
      for (int i = 0; i < kVec; ++i) tile[r][c + i] = v[s][i];
  }
  if (t < kTile) {
    const float amax = __int_as_float(kDelayed   ? past_amax(a)
                                      : kRowwise ? (row0 + t < a.R ? a.row_amax[b * a.R + row0 + t] : 0)
                                                 : *a.tensor_amax);
    row_scale[t] = scale_from_amax(amax, a.fp8_max, a.power_of_two);
  } else if (t < 2 * kTile && !kGrouped) {
    const int cc = t - kTile;
    const float amax = __int_as_float(
        kDelayed   ? past_amax(a)
        : kRowwise ? (col0 + cc < a.C && a.col_amax != nullptr ? a.col_amax[b * a.C + col0 + cc] : 0)
                   : *a.tensor_amax);
    col_scale[cc] = scale_from_amax(amax, a.fp8_max, a.power_of_two);
  }
  __syncthreads();
  int amax = 0;
  if constexpr (kDelayed)
#pragma unroll
    for (int s = 0; s < kSweeps; ++s)
#pragma unroll
      for (int i = 0; i < kVec; ++i) amax = max(amax, magnitude_bits(v[s][i]));
  if (a.rows_inverse != nullptr && col0 == 0 && t < kTile && (kRowwise ? row0 + t < a.R : row0 == 0 && t == 0))
    a.rows_inverse[kRowwise ? b * a.R + row0 + t : 0] = 1.f / row_scale[t];
  if (!kGrouped && a.cols_inverse != nullptr && row0 == 0 && t >= kTile && t < 2 * kTile &&
      (kRowwise ? col0 + (t - kTile) < a.C : col0 == 0 && t == kTile))
    a.cols_inverse[kRowwise ? b * a.C + col0 + (t - kTile) : 0] = 1.f / col_scale[t - kTile];
  if (a.rows != nullptr)
#pragma unroll
    for (int s = 0; s < kSweeps; ++s) {
      const int r = t / kThreadsPerRow + s * kRowsPerSweep;
      const int64_t gr = row0 + r, gc = col0 + c;
      if (gr < a.R && gc < a.C)
        *reinterpret_cast<uint2*>(a.rows + (b * a.R + gr) * a.C + gc) = cast8<kE4M3, kDelayed>(v[s], row_scale[r]);
    }
  if (a.cols == nullptr) return amax;
  if constexpr (kGrouped) {
    cast_grouped_cols<T, kE4M3>(a, groups, row0, col0, tile, col_scale);
  } else {
    for (int u = t; u < kTile * kThreadsPerRow; u += kThreads) {
      const int cc = u / kThreadsPerRow, r = (u % kThreadsPerRow) * kVec;
      const int64_t gc = col0 + cc, gr = row0 + r;
      if (gc >= a.C || gr >= a.R) continue;  // R is a multiple of 16: 8 rows are wholly inside or outside
      float w[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) w[i] = tile[r + i][cc];
      *reinterpret_cast<uint2*>(a.cols + (b * a.C + gc) * a.R + gr) = cast8<kE4M3, kDelayed>(w, col_scale[cc]);
    }
  }
  return amax;
}

// The kernels, named after their scaling so that the catalog's CUPTI patterns tell the two backends apart.
template <typename T, bool kGrouped>
__global__ void __launch_bounds__(kThreads) ablate_fp8_rowwise_amax(TileArgs<T> a) {
  amax_tile<T, true, kGrouped>(a);
}
template <typename T>
__global__ void __launch_bounds__(kThreads) ablate_fp8_tensorwise_amax(TileArgs<T> a) {
  amax_tile<T, false, false>(a);
}
template <typename T, bool kE4M3, bool kGrouped>
__global__ void __launch_bounds__(kThreads) ablate_fp8_rowwise_cast(TileArgs<T> a) {
  cast_tile<T, true, kE4M3, kGrouped>(a, blockIdx);
}
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreads) ablate_fp8_tensorwise_cast(TileArgs<T> a) {
  cast_tile<T, false, kE4M3, false>(a, blockIdx);
}

// Delayed scaling's one pass (fp8_quantize.h) over one matrix's tiles, tiles_x a row of them: a grid of
// as many blocks as stay resident, each striding over the tiles, so that the one-address atomics of
// record_amax come once a block, not once a tile (a tile each left the pass slower than two passes).
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreads) ablate_fp8_delayed_cast(TileArgs<T> a, unsigned tiles_x, unsigned tiles) {
  int amax = 0;
  for (unsigned i = blockIdx.x; i < tiles; i += gridDim.x) {
    amax = max(amax, cast_tile<T, false, kE4M3, false, true>(a, make_uint3(i % tiles_x, i / tiles_x, 0)));
    __syncthreads();  // the next tile reuses the shared tile and scales
  }
  record_amax(a, amax);
}

// Blocks of `kernel` (kThreads each) resident on the current device at once.
template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return std::max(1, per_sm) * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// The layouts beyond one matrix (fp8_quantize.h): a stack (x 3-D, `below` optionally under it), or token
// groups (group_end, padded_end, cols_stride).
struct Layout {
  Tensor below, group_end, padded_end;
  int64_t cols_stride = 0;
};

// x [batches, split, C] or [split, C] (one matrix); the two passes over every matrix and what `layout` adds,
// or with an amax history (delayed scaling) the one pass.
Quantized launch(const Tensor& x_in, const Layout& layout, const QuantizeOptions& o, const Tensor& history = {}) {
  // 16-byte loads: an operand that starts off a 16-byte boundary is copied first.
  const auto aligned = [](Tensor t) {
    t = t.contiguous();
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
  };
  const Tensor x = aligned(x_in);
  const Tensor below = layout.below.defined() ? aligned(layout.below.to(x.scalar_type())) : Tensor();
  const bool grouped = layout.group_end.defined(), rowwise = o.scaling == Scaling::rowwise;
  const int64_t batches = x.dim() == 3 ? x.size(0) : 1, split = x.size(-2), C = x.size(-1),
                R = split + (below.defined() ? below.size(1) : 0);
  const int groups = grouped ? static_cast<int>(layout.group_end.size(0)) : 0;
  const float fp8_max = max_finite(o.dtype);
  const auto f32 = x.options().dtype(torch::kFloat);
  // Two passes: one zeroed buffer for every amax: [B R] rows, [B C] or [G C] columns, [1] tensor (int
  // bits of non-negative floats). Delayed scaling's one pass reads its history instead: none.
  int *row_amax = nullptr, *col_amax = nullptr, *tensor_amax = nullptr;
  Tensor amax;
  if (!history.defined()) {
    const int64_t col_amax_size = o.cols ? (grouped ? groups : batches) * C : 0;
    amax = torch::zeros({batches * R + col_amax_size + 1}, x.options().dtype(torch::kInt32));
    row_amax = amax.data_ptr<int>();
    col_amax = o.cols ? row_amax + batches * R : nullptr;
    tensor_amax = row_amax + batches * R + col_amax_size;
  }
  Quantized q;
  const auto fp8 = x.options().dtype(o.dtype);
  const bool stacked = x_in.dim() == 3;
  if (o.rows) {
    q.rows = stacked ? torch::empty({batches, R, C}, fp8) : torch::empty({R, C}, fp8);
    q.rows_inverse = !rowwise ? torch::empty({1}, f32) : stacked ? torch::empty({batches, R}, f32) : torch::empty({R}, f32);
  }
  if (o.cols) {
    q.cols = stacked ? torch::empty({batches, C, R}, fp8) : torch::empty({C, grouped ? layout.cols_stride : R}, fp8);
    q.cols_inverse = !rowwise ? torch::empty({1}, f32)
                     : grouped ? torch::empty({groups, C}, f32)
                     : stacked ? torch::empty({batches, C}, f32)
                               : torch::empty({C}, f32);
  }
  // Token groups still owe their columns' zeros and unit scales when no row arrived.
  if ((R == 0 && !grouped) || C == 0 || batches == 0) return q;
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kTile)), static_cast<unsigned>(std::max<int64_t>(1, ceil_div(R, kTile))),
                  static_cast<unsigned>(batches));
  const size_t shared = grouped ? 2 * sizeof(int) * groups : 0;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const bool e4m3 = o.dtype == at::kFloat8_e4m3fn;
  fused::with_float_or_bf16(x.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const TileArgs<T> args{static_cast<const T*>(x.data_ptr()),
                           below.defined() ? static_cast<const T*>(below.data_ptr()) : nullptr,
                           split, R, C, row_amax, col_amax, tensor_amax, fp8_max, o.power_of_two_scales,
                           data_or_null<uint8_t>(q.rows), data_or_null<float>(q.rows_inverse),
                           data_or_null<uint8_t>(q.cols), data_or_null<float>(q.cols_inverse),
                           grouped ? layout.group_end.data_ptr<int>() : nullptr,
                           grouped ? layout.padded_end.data_ptr<int>() : nullptr, groups, layout.cols_stride,
                           data_or_null<int>(history)};
    if (history.defined()) {
      const auto kernel = e4m3 ? ablate_fp8_delayed_cast<T, true> : ablate_fp8_delayed_cast<T, false>;
      const unsigned tiles = grid.x * grid.y;
      kernel<<<std::min<unsigned>(tiles, resident_blocks(kernel)), kThreads, 0, stream>>>(args, grid.x, tiles);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    const auto amax_kernel = !rowwise ? ablate_fp8_tensorwise_amax<T>
                             : grouped ? ablate_fp8_rowwise_amax<T, true>
                                       : ablate_fp8_rowwise_amax<T, false>;
    amax_kernel<<<grid, kThreads, shared, stream>>>(args);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const auto cast = !rowwise ? (e4m3 ? ablate_fp8_tensorwise_cast<T, true> : ablate_fp8_tensorwise_cast<T, false>)
                      : grouped ? (e4m3 ? ablate_fp8_rowwise_cast<T, true, true> : ablate_fp8_rowwise_cast<T, false, true>)
                                : (e4m3 ? ablate_fp8_rowwise_cast<T, true, false> : ablate_fp8_rowwise_cast<T, false, false>);
    cast<<<grid, kThreads, shared, stream>>>(args);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return q;
}

void check_cuda_operand(const Tensor& x, const char* what) {
  TORCH_CHECK(x.is_cuda() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16),
              "fp8 ", what, ": x must be an fp32 or bf16 CUDA tensor, got ", x.scalar_type(), " on ", x.device());
}

}  // namespace

namespace {
void check_matrix(const Tensor& x, const char* what) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "fp8 ", what, ": x must be a 2-D CUDA tensor, got ", x.sizes(), " on ",
              x.device());
  TORCH_CHECK(x.size(0) % 16 == 0 && x.size(1) % 16 == 0, "fp8 ", what,
              ": x's sizes must be multiples of 16 (what FP8 GEMMs take), got ", x.sizes());
}
}  // namespace

Quantized quantize(const Tensor& x, const QuantizeOptions& o) {
  check_matrix(x, "quantize");
  return launch(x, {}, o);
}

Quantized quantize_delayed(const Tensor& x, const Tensor& history, const QuantizeOptions& o) {
  check_matrix(x, "quantize_delayed");
  check_cuda_operand(x, "quantize_delayed");
  check_amax_history(history, x, o);
  return launch(x, {}, o, history);
}

Quantized quantize_stacked(const Tensor& x, const Tensor& below, const QuantizeOptions& o) {
  check_cuda_operand(x, "quantize_stacked");
  TORCH_CHECK(o.scaling == Scaling::rowwise, "fp8 quantize_stacked: only rowwise scaling");
  TORCH_CHECK(x.dim() == 3 && (!below.defined() || (below.dim() == 3 && below.size(0) == x.size(0) &&
                                                      below.size(2) == x.size(2) && below.device() == x.device())),
              "fp8 quantize_stacked: x must be [B, R1, C] and below [B, R2, C] on its device");
  const int64_t R = x.size(1) + (below.defined() ? below.size(1) : 0);
  TORCH_CHECK(R % 16 == 0 && x.size(2) % 16 == 0,
              "fp8 quantize_stacked: each matrix's rows (", R, ") and columns (", x.size(2),
              ") must be multiples of 16 (what FP8 GEMMs take)");
  Layout stack;
  stack.below = below;
  return launch(x, stack, o);
}

Quantized quantize_grouped(const Tensor& x, const Tensor& group_end, const Tensor& padded_end, int64_t rows_out,
                           const QuantizeOptions& o) {
  check_cuda_operand(x, "quantize_grouped");
  TORCH_CHECK(o.scaling == Scaling::rowwise, "fp8 quantize_grouped: only rowwise scaling");
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 16 == 0,
              "fp8 quantize_grouped: x must be [S, C] with C a multiple of 16, got ", x.sizes());
  if (!o.cols) return launch(x, {}, o);  // the rows alone know no groups
  const int64_t groups = group_end.size(0);
  TORCH_CHECK(group_end.dim() == 1 && groups > 0 && groups <= 1024 && group_end.scalar_type() == torch::kInt &&
                  group_end.device() == x.device() && padded_end.sizes() == group_end.sizes() &&
                  padded_end.scalar_type() == torch::kInt && padded_end.device() == x.device(),
              "fp8 quantize_grouped: group_end and padded_end must be int32 [G] on x's device, 0 < G <= 1024");
  TORCH_CHECK(rows_out >= padded_rows(x.size(0), groups) && rows_out % 16 == 0,
              "fp8 quantize_grouped: ", rows_out, " columns cannot hold ", x.size(0), " rows in ", groups,
              " groups padded to multiples of 16: use padded_rows()");
  Layout tokens;
  tokens.group_end = group_end.contiguous();
  tokens.padded_end = padded_end.contiguous();
  tokens.cols_stride = rows_out;
  return launch(x, tokens, o);
}

}  // namespace ablate::kernels::fp8
#endif  // __CUDACC__
