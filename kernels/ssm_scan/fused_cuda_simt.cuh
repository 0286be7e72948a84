// kernels/ssm_scan/fused_cuda_simt.cuh: the SIMT fp32 path of the ssm_scan fused_cuda backend (fp32 x: every
// product on fp32 shared-memory tiles, 4 x 4 register tiles a thread, exact): its tile loaders and
// products, the chunk-state kernels and state passes each way, and the SIMT shared-memory sizes. The
// output and backward chunk kernels (fused_cuda_forward.cuh, fused_cuda_backward.cuh) hold their fp32-x
// branch inline and call these helpers.
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include "kernels/ssm_scan/fused_cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

// The kLoadsInFlight runs a thread loaded (runs i0 + u blockDim.x of a tile with runs_per_row runs a row)
// into dst (row stride ld).
template <int V>
__device__ __forceinline__ void store_runs(float* dst, int ld, int runs_per_row, int total, int i0,
                                           const float (&v)[kLoadsInFlight][V]) {
#pragma unroll
  for (int u = 0; u < kLoadsInFlight; ++u) {
    const int i = i0 + u * blockDim.x, r = i / runs_per_row, col = (i - r * runs_per_row) * V;
    if (i < total)
#pragma unroll
      for (int e = 0; e < V; ++e) dst[r * ld + col + e] = v[u][e];
  }
}

// Rows t_first .. t_first + nrows - 1 of one (b, h) slice of a [B,T,H,width] tensor into dst (row
// stride ld), as fp32; rows outside [0, T) are zero, except row -1, which is `before` when given.
// width is a multiple of 16, so rows split into whole 16-byte runs.
template <typename T>
__device__ void load_rows(float* dst, int ld, int width, const T* src, RowStrides rs, const Params& p, int b, int h,
                          int t_first, int nrows, const float* before) {
  constexpr int V = 16 / sizeof(T);
  const int runs_per_row = width / V, total = nrows * runs_per_row;
  const int64_t row_stride = rs.ts;
  const T* base = src + row_start(rs, b, 0, h, width);  // row t at base + t * row_stride
  const bool vector = is_aligned16(src);                // every row start is a multiple of 32 bytes past src
  for (int i0 = threadIdx.x; i0 < total; i0 += kLoadsInFlight * blockDim.x) {
    float v[kLoadsInFlight][V];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = i0 + u * blockDim.x, r = i / runs_per_row, col = (i - r * runs_per_row) * V, t = t_first + r;
      if (i < total && t >= 0 && t < p.T) {
        load_run<V>(base + t * row_stride + col, vector, v[u]);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[u][e] = i < total && t == -1 && before != nullptr ? before[col + e] : 0.f;
      }
    }
    store_runs(dst, ld, runs_per_row, total, i0, v);
  }
}

// A contiguous fp32 rows x width matrix (width a multiple of 16; a chunk state) into dst (row stride ld).
__device__ void load_matrix(float* dst, int ld, int rows, int width, const float* src) {
  constexpr int V = 4;
  const int runs_per_row = width / V, total = rows * runs_per_row;
  const bool vector = is_aligned16(src);
  for (int i0 = threadIdx.x; i0 < total; i0 += kLoadsInFlight * blockDim.x) {
    float v[kLoadsInFlight][V];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < total) load_run<V>(src + i * V, vector, v[u]);
    }
    store_runs(dst, ld, runs_per_row, total, i0, v);
  }
}

// acc += the 4 x 4 tile (rows ti + r rm, columns tj + s rn) of A B over shared-memory operands with
// arbitrary strides, A(i, k) = A[i * ars + k * acs], B(k, j) = B[k * brs + j * bcs], k < K.
__device__ __forceinline__ void tile_product(float (&acc)[4][4], int ti, int tj, int rm, int rn, int K,
                                             const float* A, int ars, int acs, const float* Bm, int brs, int bcs) {
#pragma unroll 2
  for (int kk = 0; kk < K; ++kk) {
    float a[4], bv[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = A[(ti + r * rm) * ars + kk * acs];
#pragma unroll
    for (int s = 0; s < 4; ++s) bv[s] = Bm[kk * brs + (tj + s * rn) * bcs];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int s = 0; s < 4; ++s) acc[r][s] = fmaf(a[r], bv[s], acc[r][s]);
  }
}

// C = A B (M x Nc, multiples of 4; any K) on SIMT fp32: thread tiles of 4 x 4 interleaved (rows ti + r
// M/4, columns tj + s Nc/4), so a warp's B reads are consecutive (or odd-strided with padded leading
// dimensions) and its A reads broadcast. Calls epi(i, j, value) once per element.
template <class Epi>
__device__ __forceinline__ void block_gemm(int M, int Nc, int K, const float* A, int ars, int acs, const float* Bm,
                                           int brs, int bcs, Epi&& epi) {
  const int rm = M / 4, rn = Nc / 4;
  for (int task = threadIdx.x; task < rm * rn; task += blockDim.x) {
    const int ti = task / rn, tj = task - ti * rn;
    float acc[4][4] = {};
    tile_product(acc, ti, tj, rm, rn, K, A, ars, acs, Bm, brs, bcs);
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int s = 0; s < 4; ++s) epi(ti + r * rm, tj + s * rn, acc[r][s]);
  }
}

// Two products with one output shape: epi(i, j, (A1 B1)_ij, (A2 B2)_ij). When epi returns a float,
// row_sums[i] += the sum over j of what it returned, added per thread first (a shared-memory float
// atomic is a compare-and-swap loop: one per element would serialise).
template <class Epi>
__device__ __forceinline__ void block_gemm2(int M, int Nc, int K1, const float* A1, int ars1, int acs1,
                                            const float* B1, int brs1, int bcs1, int K2, const float* A2, int ars2,
                                            int acs2, const float* B2, int brs2, int bcs2, Epi&& epi,
                                            float* row_sums = nullptr) {
  constexpr bool kRowSums = !std::is_void_v<std::invoke_result_t<Epi, int, int, float, float>>;
  const int rm = M / 4, rn = Nc / 4;
  for (int task = threadIdx.x; task < rm * rn; task += blockDim.x) {
    const int ti = task / rn, tj = task - ti * rn;
    float acc1[4][4] = {}, acc2[4][4] = {};
    tile_product(acc1, ti, tj, rm, rn, K1, A1, ars1, acs1, B1, brs1, bcs1);
    tile_product(acc2, ti, tj, rm, rn, K2, A2, ars2, acs2, B2, brs2, bcs2);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if constexpr (kRowSums) {
        float sum = 0.f;
#pragma unroll
        for (int s = 0; s < 4; ++s) sum += epi(ti + r * rm, tj + s * rn, acc1[r][s], acc2[r][s]);
        atomicAdd(&row_sums[ti + r * rm], sum);
      } else {
#pragma unroll
        for (int s = 0; s < 4; ++s) epi(ti + r * rm, tj + s * rn, acc1[r][s], acc2[r][s]);
      }
    }
  }
}

// ---- forward ---------------------------------------------------------------------------------------

__host__ __device__ inline size_t chunk_state_smem_floats(int L, int P, int N) {
  return 3 * L + (L + 1) + (L + 1) * ld_of(P) + (L + 1) * ld_of(N);
}

// The SIMT path's chunk state (fp32 tiles); the tensor-core path runs ablate_ssm_scan_fwd_state_scan.
template <typename TX, typename TQK>
__global__ void __launch_bounds__(kThreads) ablate_ssm_scan_fwd_chunk_state(Params p) {
  extern __shared__ float smem[];
  {
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
    const int t0 = c * L, ldP = ld_of(P), ldN = ld_of(N);
    float *cum = smem, *bet = cum + L, *gam = bet + L, *wend = gam + L, *xa = wend + (L + 1), *ka = xa + (L + 1) * ldP;
    const int64_t bh = static_cast<int64_t>(b) * p.H + h;
    const bool first = c == 0;
    load_rows(xa, ldP, P, static_cast<const TX*>(p.x), p.xs, p, b, h, t0 - 1, L + 1,
              first && p.x_prev ? p.x_prev + bh * P : nullptr);
    load_rows(ka, ldN, N, static_cast<const TQK*>(p.k), packed(p, N), p, b, h, t0 - 1, L + 1,
              first && p.k_prev ? p.k_prev + bh * N : nullptr);
    load_coefficients(p, b, h, t0, cum, bet, gam);
    for (int j = threadIdx.x; j <= L; j += blockDim.x) wend[j] = weight(cum, bet, gam, L, L - 1, j);
    __syncthreads();
    for (int i = threadIdx.x; i < (L + 1) * P; i += blockDim.x) {
      const int j = i / P, col = i - j * P;
      xa[j * ldP + col] *= wend[j];
    }
    __syncthreads();
    float* Z = p.states + (bh * p.nC + c) * P * N;
    block_gemm(P, N, L + 1, xa, 1, ldP, ka, ldN, 1, [&](int i, int j, float v) { Z[i * N + j] = v; });
    if (threadIdx.x == 0) p.lam[bh * p.nC + c] = cum[L - 1];
  }
}

// The chunk-state recurrence S <- exp(Lam_c) S + Z_c for V adjacent state elements of one (b, h), over the
// chunks in order (forward) or in reverse (the adjoints): each chunk's slot gets the state entering it (in
// place of Z_c); s holds the start and returns the state after the last chunk (SIMT path). V = 4: 16-byte
// loads, enough bytes in flight per SM to run near the copy ceiling (one 4-byte load a thread ran at
// ~2.4 TB/s).
template <int V, bool kReverse>
__device__ __forceinline__ void pass_states(const Params& p, int64_t PN, float* slot, const float* lam, float (&s)[V]) {
  float next[V];
  load_vec<V>(slot + (kReverse ? p.nC - 1 : 0) * PN, next);
  for (int k = 0; k < p.nC; ++k) {
    const int c = kReverse ? p.nC - 1 - k : k;
    float z[V];
#pragma unroll
    for (int e = 0; e < V; ++e) z[e] = next[e];
    if (k + 1 < p.nC) load_vec<V>(slot + (kReverse ? c - 1 : c + 1) * PN, next);
    store_vec<V>(slot + c * PN, s);
    const float decay = expf(lam[c]);
#pragma unroll
    for (int e = 0; e < V; ++e) s[e] = fmaf(decay, s[e], z[e]);
  }
}

// V state elements a thread: S_0 = h0 (or 0), S_{c+1} = exp(Lam_c) S_c + Z_c; h_last = S_nC.
template <int V>
__global__ void __launch_bounds__(kThreads) ablate_ssm_scan_fwd_state_pass(Params p) {
  const int64_t PN = static_cast<int64_t>(p.P) * p.N;
  const int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const int64_t bh = blockIdx.y;
  if (e >= PN) return;
  float s[V] = {};
  if (p.h0) load_vec<V>(p.h0 + bh * PN + e, s);
  pass_states<V, false>(p, PN, p.states + bh * p.nC * PN + e, p.lam + bh * p.nC, s);
  store_vec<V>(p.h_last + bh * PN + e, s);
}

__host__ __device__ inline size_t output_smem_floats(int L, int P, int N) {
  const int rows_big = (L + 1) > P ? (L + 1) : P;
  return 3 * L + static_cast<size_t>(L) * ld_of(N) + static_cast<size_t>(rows_big) * ld_of(N) +
         static_cast<size_t>(L + 1) * ld_of(P) + static_cast<size_t>(L) * ld_of(L);
}

// ---- backward --------------------------------------------------------------------------------------

// dy_t = dout_t * silu(z_t) (dout_t without z), rows t0 .. t0 + L - 1 (0 past the end), scaled by
// exp(cum_t) when `cum` is given.
template <typename TX>
__device__ void load_dy(float* dst, int ld, const Params& p, int b, int h, int t0, const float* cum) {
  constexpr int V = 4;  // runs of 4: one 16-byte load of dout (fp32), 4 elements of z
  const TX* z = static_cast<const TX*>(p.z);
  const int runs_per_row = p.P / V, total = p.L * runs_per_row;
  const TX* dout = static_cast<const TX*>(p.dout);
  const bool vector = sizeof(TX) * V % 16 != 0 || (is_aligned16(dout) && (z == nullptr || is_aligned16(z)));
  for (int i0 = threadIdx.x; i0 < total; i0 += kLoadsInFlight * blockDim.x) {
    float v[kLoadsInFlight][V], zv[kLoadsInFlight][V];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = i0 + u * blockDim.x, t = i / runs_per_row, col = (i - t * runs_per_row) * V;
      const bool real = i < total && t0 + t < p.T;
      const int64_t o = real ? row_index(p, b, t0 + t, h) * p.P + col : 0;
      if (real) load_run<V>(dout + o, vector, v[u]);
      if (real && z) load_run<V>(z + z_index(p, b, t0 + t, h, col), vector, zv[u]);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (!real) v[u][e] = 0.f;
        if (!real || !z) zv[u][e] = 0.f;
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = i0 + u * blockDim.x, t = i / runs_per_row, col = (i - t * runs_per_row) * V;
      if (i >= total) continue;
      const float scale = cum != nullptr && t0 + t < p.T ? expf(cum[t]) : 1.f;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        float w = v[u][e];
        if (z) w *= zv[u][e] * sigmoid(zv[u][e]);
        dst[t * ld + col + e] = w * scale;
      }
    }
  }
}

__host__ __device__ inline size_t chunk_dstate_smem_floats(int L, int P, int N) {
  return 3 * L + static_cast<size_t>(L) * ld_of(P) + static_cast<size_t>(L) * ld_of(N);
}

// The SIMT path's dZ_c (fp32 tiles); the tensor-core path runs ablate_ssm_scan_bwd_state_scan.
template <typename TX, typename TQK>
__global__ void __launch_bounds__(kThreads) ablate_ssm_scan_bwd_chunk_dstate(Params p) {
  extern __shared__ float smem[];
  {
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
    const int t0 = c * L, ldP = ld_of(P), ldN = ld_of(N);
    float *cum = smem, *bet = cum + L, *gam = bet + L, *dys = gam + L, *qs = dys + L * ldP;
    const int64_t bh = static_cast<int64_t>(b) * p.H + h;
    load_rows(qs, ldN, N, static_cast<const TQK*>(p.q), packed(p, N), p, b, h, t0, L, nullptr);
    load_coefficients(p, b, h, t0, cum, bet, gam);
    load_dy<TX>(dys, ldP, p, b, h, t0, cum);
    __syncthreads();
    float* dZ = p.dstates + (bh * p.nC + c) * P * N;
    block_gemm(P, N, L, dys, 1, ldP, qs, ldN, 1, [&](int i, int j, float v) { dZ[i * N + j] = v; });
  }
}

// Reverse: dS_end(nC-1) = dh_last (or 0), dS_end(c-1) = exp(Lam_c) dS_end(c) + dZ_c; dh0 = what leaves
// chunk 0. dZ_c is replaced by dS_end(c) in place (or dS_end(c) written to dstates_lo in bf16). V state
// elements a thread, as the forward pass.
template <int V>
__global__ void __launch_bounds__(kThreads) ablate_ssm_scan_bwd_state_pass(Params p) {
  const int64_t PN = static_cast<int64_t>(p.P) * p.N;
  const int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  const int64_t bh = blockIdx.y;
  if (e >= PN) return;  // PN / V is a whole number of warps (PN a multiple of 256): the warp sum below is whole
  float s[V] = {};
  // h_last = h_{T-1} is an output at position T-1: d/d cum_{T-1} gains <dh_last, h_last> (the r_t of
  // ablate_ssm_scan_bwd_chunk counts the outputs y only).
  float dot = 0.f;
  if (p.dh_last) {
    float h[V];
    load_vec<V>(p.dh_last + bh * PN + e, s);
    load_vec<V>(p.h_last_saved + bh * PN + e, h);
#pragma unroll
    for (int k = 0; k < V; ++k) dot = fmaf(s[k], h[k], dot);
  }
  pass_states<V, true>(p, PN, p.dstates + bh * p.nC * PN + e, p.lam + bh * p.nC, s);
  if (p.dh0) store_vec<V>(p.dh0 + bh * PN + e, s);
  if (p.dh_last) {
    dot = warp_sum(dot);
    if ((threadIdx.x & 31) == 0) p.last_dot[bh * p.dot_parts + e / (32 * V)] = dot;  // warp e / 32 V of the (b, h)
  }
}

// bwd_chunk_smem_floats: kernels/ssm_scan/limits.h.

}  // namespace
}  // namespace ablate::kernels::fused
