// kernels/ssm_scan/fused_cuda_tiles.cuh: the tensor-core tile helpers of the ssm_scan fused_cuda backend:
// shared-memory layouts (Carve), bf16 packing, ldmatrix / mma.sync m16n8k16 fragments and their row and
// column sums, the bf16 tile loaders (cp.async where the source allows), and the tiles the output and
// backward chunk kernels both start from.
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include "kernels/ssm_scan/fused_cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

// ---- tensor-core tiles (bf16 x) ----------------------------------------------------------------
// mma.sync m16n8k16 with bf16 operands and fp32 accumulation over bf16 shared-memory tiles, fragments
// loaded with ldmatrix (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type" and
// "ldmatrix"). Operands rounded to bf16 (x, z already are; q, k when fp32; dy, the states, the weighted
// scores): ~4e-3 relative per operand, as Mamba-2's chunked kernels round scores and states to the input
// dtype before their dots. A warp owns a 16 x 16 output tile (two m16n8 tiles) at a time; K runs in steps
// of 16 (every K here is L, P or N: multiples of 16).
using bf16 = __nv_bfloat16;

// Bump allocation of dynamic shared memory in 16-byte aligned pieces (ldmatrix rows and vector stores
// need 16 bytes). One layout struct per kernel takes its pieces in its constructor, on the device from
// the block's shared array and on the host (no array: null pieces) to size the launch: one source for
// both. Each piece is the shared array's pointer plus an offset, never a pointer made from an integer, so
// the compiler knows every access through it is to shared memory (LDS / STS on 32-bit addresses; a
// pointer made from an integer compiles to 64-bit generic loads and stores).
struct Carve {
  char* base = nullptr;  // the block's shared array on the device
  size_t used = 0;
  template <class T>
  __host__ __device__ T* take(size_t n) {
    used = (used + 15) / 16 * 16;
#if defined(__CUDA_ARCH__)
    T* ptr = reinterpret_cast<T*>(base + used);
#else
    T* ptr = nullptr;  // the host only sizes the layout
#endif
    used += n * sizeof(T);
    return ptr;
  }
};

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half: the lower index
  return *reinterpret_cast<const uint32_t*>(&v);
}

// One row of a warp's two accumulator column blocks (nt = 0, 1: columns 8 nt + 2 tq, + 1 of lane tq of
// the row's quad) stored as 16 bf16 at `row`, 8 bytes a lane: lanes tq and tq ^ 1 swap a pair first, so
// lane tq holds four adjacent columns and the quad fills whole 32-byte sectors (a 4-byte store per column
// block half-writes every sector it touches: the state scans' stores were 39 % excess L2 sectors).
// Every lane of the warp calls it; `row` 8-byte aligned.
__device__ __forceinline__ void store_row16_bf16(bf16* row, int tq, float a0, float a1, float b0, float b1) {
  const uint32_t nt0 = pack_bf16(a0, a1), nt1 = pack_bf16(b0, b1);
  const uint32_t swapped = __shfl_xor_sync(0xffffffffu, (tq & 1) ? nt0 : nt1, 1);
  if (tq & 1)  // columns 8 + 2 (tq - 1) ..: the even neighbour's nt1 pair, then its own
    *reinterpret_cast<uint2*>(row + 6 + 2 * tq) = make_uint2(swapped, nt1);
  else  // columns 2 tq ..: its own nt0 pair, then the odd neighbour's
    *reinterpret_cast<uint2*>(row + 2 * tq) = make_uint2(nt0, swapped);
}

__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}

// A bf16 operand tile in shared memory, indexed (r, k): r the output row (as A) or output column (as B)
// of the product, k the reduction index. k_major: (r, k) at base[r * ld + k]; else at base[k * ld + r].
struct Operand {
  const bf16* base;
  int ld;
  bool k_major;
};

// The four 8x8 matrices of the 16 (r) x 16 (k) block at (r0, k0). Lane l addresses row l % 8 of matrix
// l / 8 and receives, of matrix m in register m, stored row l / 4, stored columns 2 (l % 4) + {0, 1}
// (.trans: stored rows 2 (l % 4) + {0, 1}, stored column l / 4). So a lane gets (r = g, k = 2t + {0,1})
// of each matrix with g = l / 4, t = l % 4 either way: k-major tiles load plain, the others .trans.
// As A (a_role) matrix m is at r offset 8 (m & 1), k offset 8 (m >> 1): registers a0..a3 of the mma
// ((g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8)). As B, r offset 8 (m >> 1), k offset 8 (m & 1): b0, b1 of
// the first 8 columns, then b0, b1 of the next 8 ((k 2t, n g), (k 2t+8, n g)).
__device__ __forceinline__ void load_block(uint32_t (&f)[4], const Operand& o, int r0, int k0, bool a_role) {
  const int lane = threadIdx.x & 31, m = lane >> 3, row = lane & 7;
  const int r_off = 8 * (a_role ? (m & 1) : (m >> 1)), k_off = 8 * (a_role ? (m >> 1) : (m & 1));
  // The tile's shared address once (loop-invariant where the caller loops), then 32-bit offsets: 64-bit
  // pointer arithmetic and a conversion per fragment were 4 % of the backward chunk kernel's instructions.
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(o.base));
  constexpr uint32_t kBytes = sizeof(bf16);
  if (o.k_major) {
    const uint32_t addr = base + kBytes * static_cast<uint32_t>((r0 + r_off + row) * o.ld + k0 + k_off);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
                 : "r"(addr));
  } else {
    const uint32_t addr = base + kBytes * static_cast<uint32_t>((k0 + k_off + row) * o.ld + r0 + r_off);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
                 : "r"(addr));
  }
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc[nt] += A(i0 .. i0+15, k) B(k, j0 + 8 nt .. j0 + 8 nt + 7) over k in [k_begin, k_end) (multiples of
// 16). Accumulator layout (C of m16n8): acc[nt][e] is row i0 + g + 8 (e >> 1), column j0 + 8 nt + 2t + (e & 1).
__device__ __forceinline__ void mma_block(float (&acc)[2][4], const Operand& A, const Operand& B, int i0, int j0,
                                          int k_begin, int k_end) {
#pragma unroll 2
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    uint32_t a[4], b[4];
    load_block(a, A, i0, k0, true);
    load_block(b, B, j0, k0, false);
    mma_bf16(acc[0], a, b[0], b[1]);
    mma_bf16(acc[1], a, b[2], b[3]);
  }
}

// Sums of a 16 x 16 tile's rows: v[half] is a lane's part of row i0 + g + 8 half (its 4 columns); the 4
// lanes of a row are added (a fixed butterfly) and lane t = 0 writes out[i0 + g + 8 half]. One writer per
// (tile, row): partial sums land in per-tile slots and are added in a fixed order later (deterministic,
// no shared atomics).
__device__ __forceinline__ void store_row_sums(float (&v)[2], float* out, int i0) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    v[half] += __shfl_xor_sync(0xffffffffu, v[half], 1);
    v[half] += __shfl_xor_sync(0xffffffffu, v[half], 2);
    if ((lane & 3) == 0) out[i0 + (lane >> 2) + 8 * half] = v[half];
  }
}

// Sums of a 16 x 16 tile's columns: v[nt][c] is a lane's part of column j0 + 8 nt + 2t + c (its 2 rows);
// the 8 row groups are added and lanes 0..3 write out[column] for the columns below `limit`.
__device__ __forceinline__ void store_column_sums(float (&v)[2][2], float* out, int j0, int limit) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float s = v[nt][c];
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      s += __shfl_xor_sync(0xffffffffu, s, 8);
      s += __shfl_xor_sync(0xffffffffu, s, 16);
      if (lane < 4 && j0 + 8 * nt + 2 * lane + c < limit) out[j0 + 8 * nt + 2 * lane + c] = s;
    }
}

// The lower-triangular 16 x 16 tiles (block row bi >= block column bj) of an L x L matrix, numbered row by
// row: task -> (bi, bj). The strictly upper tiles of the weighted score matrices are zero (W_tj = 0 for
// j > t) and are neither computed nor read.
__device__ __forceinline__ void lower_tile(int task, int& bi, int& bj) {
  bi = 0;
  while (task > bi) task -= ++bi;
  bj = task;
}

// Two adjacent outputs (j even, so 8- or 4-byte aligned in the tensors fused_cuda.cu allocates).
template <typename T>
__device__ __forceinline__ void store_pair(T* dst, float a, float b) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
  }
}

// 8 consecutive elements at src as bf16: one 16-byte load (bf16) or two (fp32) when `vector`.
template <typename T>
__device__ __forceinline__ uint4 load8_bf16(const T* src, bool vector) {
  uint4 out;
  if constexpr (std::is_same_v<T, bf16>) {
    if (vector) return *reinterpret_cast<const uint4*>(src);
  }
  float v[8];
  load_run<8>(src, vector, v);
  out.x = pack_bf16(v[0], v[1]), out.y = pack_bf16(v[2], v[3]);
  out.z = pack_bf16(v[4], v[5]), out.w = pack_bf16(v[6], v[7]);
  return out;
}

// Rows t_first .. t_first + nrows - 1 of a tile whose row t starts at base + t * row_stride into a bf16
// tile (row stride ld, width a multiple of 8): rows outside [0, rows_end) are zero, except row -1, which is
// `before` when given; src is the tensor's own pointer (its 16-byte alignment decides the vector path,
// every row start being a multiple of 32 bytes past it). bf16 sources are copied asynchronously (cp.async:
// complete after the caller's wait and barrier, e.g. load_coefficients' first, which every caller reaches
// before reading the tile); fp32 ones converted through registers, kLoadsInFlight 16-byte runs per thread in
// flight. Inlined, so that its stores are known to be shared, with a thread's runs walked by (row, run)
// steps instead of a division per run; the element-wise path (unaligned source, or x_prev / k_prev) out of
// line: it is cold, and the unrolled loader would otherwise hold a copy per run. The output kernel, the
// backward chunk and the state scans all load with it.
template <typename T>
__device__ __noinline__ uint4 load8_bf16_scalar(const T* src) {
  return load8_bf16(src, false);
}

template <typename T>
__device__ __forceinline__ uint4 load8_bf16_any(const T* src, bool vector) {
  return vector ? load8_bf16(src, true) : load8_bf16_scalar(src);
}

__device__ __forceinline__ void next_run(int& r, int& run, int runs_per_row, int step_r, int step_c) {
  run += step_c;
  r += step_r;
  if (run >= runs_per_row) run -= runs_per_row, ++r;
}

template <typename T>
__device__ __forceinline__ void load_tile_bf16(bf16* dst, int ld, int width, const T* src, const T* base,
                                               int64_t row_stride, int t_first, int nrows, int rows_end,
                                               const float* before) {
  constexpr int V = 8;
  const int runs_per_row = width / V, total = nrows * runs_per_row;
  const bool vector = is_aligned16(src);  // every row start is a multiple of 32 bytes past src
  const int step_r = blockDim.x / runs_per_row, step_c = blockDim.x - step_r * runs_per_row;
  int r = threadIdx.x / runs_per_row, run = threadIdx.x - r * runs_per_row;  // of run i0
  if constexpr (std::is_same_v<T, bf16>) {
    if (vector) {  // asynchronously (the caller waits before its barrier)
      for (int i = threadIdx.x; i < total; i += blockDim.x) {
        const int col = run * V, t = t_first + r;
        bf16* to = dst + r * ld + col;
        if (t == -1 && before != nullptr) {
          *reinterpret_cast<uint4*>(to) = load8_bf16_scalar(before + col);
        } else {
          const bool real = t >= 0 && t < rows_end;
          cp_async16(to, real ? base + t * row_stride + col : src, real);
        }
        next_run(r, run, runs_per_row, step_r, step_c);
      }
      return;
    }
  }
  for (int i0 = threadIdx.x; i0 < total; i0 += kLoadsInFlight * blockDim.x) {
    uint4 v[kLoadsInFlight];
    int at[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = i0 + u * blockDim.x, col = run * V, t = t_first + r;
      at[u] = r * ld + col;
      if (i < total && t >= 0 && t < rows_end)
        v[u] = load8_bf16_any(base + t * row_stride + col, vector);
      else if (i < total && t == -1 && before != nullptr)
        v[u] = load8_bf16_scalar(before + col);
      else
        v[u] = make_uint4(0, 0, 0, 0);
      next_run(r, run, runs_per_row, step_r, step_c);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u)
      if (i0 + u * blockDim.x < total) *reinterpret_cast<uint4*>(dst + at[u]) = v[u];
  }
}

// Rows t_first .. t_first + nrows - 1 of one (b, h) slice (0 outside [0, T), row -1 from `before` when given).
template <typename T>
__device__ __forceinline__ void load_rows_bf16(bf16* dst, int ld, int width, const T* src, RowStrides rs,
                                               const Params& p, int b, int h, int t_first, int nrows,
                                               const float* before) {
  load_tile_bf16(dst, ld, width, src, src + row_start(rs, b, 0, h, width), rs.ts, t_first, nrows, p.T, before);
}

// A contiguous rows x width matrix (a chunk state: fp32, or bf16 copied as is).
template <typename T>
__device__ __forceinline__ void load_matrix_bf16(bf16* dst, int ld, int rows, int width, const T* src) {
  load_tile_bf16(dst, ld, width, src, src, width, 0, rows, rows, nullptr);
}

// Pulls `count` contiguous floats into L2 (one prefetch per 128-byte line), for a tile loaded after a
// phase that does not need it: the later load then waits on L2, not HBM.
__device__ __forceinline__ void prefetch_l2(const float* src, int count) {
  for (int i = threadIdx.x * 32; i < count; i += blockDim.x * 32)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(src + i));
}

// Per row t of the chunk (a warp per row): q_t . k_0 over the bf16 tiles (k_0 = row 0 of the key tile),
// times W_t0 into sc0[t]: the weighted column 0 of the scores, kept in fp32 beside the bf16 tile of
// columns 1..L (column 0 would misalign every ldmatrix row). raw0, when given, keeps q_t . k_0 unweighted.
__device__ void score_column0(const bf16* qs, int ldq, const bf16* ka, int N, int L, const float* cum,
                              const float* bet, const float* gam, float* sc0, float* raw0 = nullptr) {
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x & 31;
  for (int t = warp; t < L; t += warps) {
    float v = 0.f;
    for (int n = lane; n < N; n += 32) v = fmaf(__bfloat162float(qs[t * ldq + n]), __bfloat162float(ka[n]), v);
    v = warp_sum(v);
    if (lane == 0) {
      sc0[t] = v * weight(cum, bet, gam, L, t, 0);
      if (raw0) raw0[t] = v;
    }
  }
}

// Calls fn(i, j, index) for the 8 accumulator elements a lane holds of the 16 x 16 tile at (i0, j0).
template <class Fn>
__device__ __forceinline__ void for_tile_elements(int i0, int j0, Fn&& fn) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) fn(i0 + g + (e >> 1) * 8, j0 + nt * 8 + 2 * t + (e & 1), nt, e);
}

// The tiles the output and backward chunk kernels both start from (their layouts name them alike): q
// (rows t0 .., L of them), k and x (rows t0 - 1 .., the first from k_prev / x_prev on chunk 0) and the
// chunk's state S_c, all in bf16, asynchronously where the source allows (the caller waits).
template <typename TQK, class Tiles>
__device__ __forceinline__ void load_chunk_tiles(const Params& p, const Tiles& s, int b, int h, int c) {
  const int L = p.L, P = p.P, N = p.N, t0 = c * L, ldP = ld_tc(P), ldN = ld_tc(N);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const bool first = c == 0;
  load_rows_bf16(s.qs, ldN, N, static_cast<const TQK*>(p.q), packed(p, N), p, b, h, t0, L, nullptr);
  load_rows_bf16(s.ka, ldN, N, static_cast<const TQK*>(p.k), packed(p, N), p, b, h, t0 - 1, L + 1,
                 first && p.k_prev ? p.k_prev + bh * N : nullptr);
  load_rows_bf16(s.xa, ldP, P, static_cast<const bf16*>(p.x), p.xs, p, b, h, t0 - 1, L + 1,
                 first && p.x_prev ? p.x_prev + bh * P : nullptr);
  load_matrix_bf16(s.state, ldN, P, N, p.states_lo + (bh * p.nC + c) * P * N);
}

}  // namespace
}  // namespace ablate::kernels::fused
