// kernels/ssm_scan/fused_cuda.cu: backend `fused_cuda` of the `ssm_scan` seam (Mamba-3 SISO, docs/model.md "M";
// contract SsmScanFn in kernels/seams.h): forward and backward as fused CUDA kernels over chunks of
// L positions, SSD-style, with the algebra of the chunked reference (kernels/ssm_scan/reference.cpp,
// whose header derives it): per (batch, head, chunk) the chunk-local cumulative log alpha cum_t, the
// (L x L+1) weights W_tj = exp(cum_t - cum_{j-1}) gamma_{j-1} + exp(cum_t - cum_j) beta_j (column j holds
// position j-1; column 0 is the previous chunk's last position, or x_prev / k_prev before chunk 0),
// every exponent a difference cum_t - cum_s with s <= t (a sum of log alphas <= 0: never a positive
// number exponentiated, never a division by alpha); log alpha floored at log(FLT_MIN) as the reference.
//
// Forward (2 launches on the tensor-core path, bf16 x; 3 on the SIMT path, fp32 x):
//   ablate_ssm_scan_fwd_state_scan   (tensor cores) S_0 = h0 (or 0), S_{c+1} = exp(Lam_c) S_c + Z_c with
//                                    Z_c = sum_j W_{L-1,j} x_j k_j^T and Lam_c = cum_{L-1}: a block per (64
//                                    rows of P, b, h) walks the chunks in order, the state slice in mma
//                                    accumulators; S_c kept in bf16 (the operand precision it is used
//                                    at) for the output and the backward; h_last = S_nC (the zero-padded
//                                    tail has alpha = 1, no inputs);
//   (SIMT) ablate_ssm_scan_fwd_chunk_state (Z_c, Lam_c per chunk) + ablate_ssm_scan_fwd_state_pass (the
//                                    same recurrence, 4 adjacent (p, n) of one (b, h) a thread, S_c in place);
//   ablate_ssm_scan_fwd_output       y_t = sum_j W_tj (q_t.k_j) x_j + exp(cum_t) S_c q_t + D x_t, times
//                                    silu(z_t) when z is given.
// Backward (3 launches on the tensor-core path, 4 on the SIMT path; recomputes the chunk-local products
// instead of storing them):
//   ablate_ssm_scan_bwd_state_scan   (tensor cores) the adjoint states at chunk ends, in reverse:
//                                    dS_end(nC-1) = dh_last (or 0), dS_end(c-1) = exp(Lam_c) dS_end(c) + dZ_c
//                                    with dZ_c = sum_t exp(cum_t) dy_t q_t^T, dy = dout * silu(z); dh0 =
//                                    what leaves chunk 0; as the forward scan, in reverse;
//   (SIMT) ablate_ssm_scan_bwd_chunk_dstate (dZ_c per chunk) + ablate_ssm_scan_bwd_state_pass;
//   ablate_ssm_scan_bwd_chunk        per chunk: dx, dk (with the state term W_{L-1,j} dS_end), dq (with
//                                    the inter-chunk term), dz, dbeta, dgamma, the column-0 gradients
//                                    (of the previous chunk's last position, or x_prev / k_prev), dD
//                                    partial sums, and r_t = dy_t.yscan_t - beta_t dbeta_t - gamma_t
//                                    dgamma_t, with d log alpha_r = sum_{t >= r} r_t (the exact identity
//                                    for d/d cum_t, summed back to log alpha), and r's sums over the
//                                    chunk's 32-row halves (fp64);
//   ablate_ssm_scan_bwd_finish       what needs other chunks, in one grid: dD from the partial sums; per
//                                    chunk, that reverse cumulative sum over the whole sequence (fp64,
//                                    from <dh_last, h_last> (h_last is an output at T-1) plus the later
//                                    halves' sums), the last row of each chunk (its own part plus the
//                                    next chunk's column 0, rounded once) and dx_prev / dk_prev.
// State and accumulation in fp32; x, z (one dtype) and q, k (one dtype) fp32 or bf16; y written in x's
// dtype (rounded once, at the store). With fp32 x every product runs SIMT over fp32 shared-memory tiles (4 x 4 register tiles per thread, exact). With bf16 x
// (q/k bf16 or fp32) the per-chunk products run on tensor cores: mma.sync m16n8k16 with bf16 operands and
// fp32 accumulation, fragments loaded by ldmatrix from bf16 shared tiles. Operands are rounded to bf16
// once (q, k when fp32; dy; the chunk states S_c and adjoints dS; the weighted scores W o (q.k) and
// W o (dy.x)): ~4e-3 relative per operand, as Mamba-2's chunked kernels round scores and states to the
// input dtype before their dots. What sums many terms stays fp32: the column-0 (previous position)
// terms, the intra-chunk dgamma / dbeta sums (from the accumulators, before rounding), e_j, r_t (dy
// recomputed from dout and z), dD; per-tile partial sums are added in a fixed order (deterministic).
// The bf16 tiles halve the backward chunk's shared memory (~98 KB at L 64, P 64, N 128: 2 blocks of 8
// warps per SM on an H100; the output kernel's ~72 KB: 3).
// bf16 tiles (x, z's rows, bf16 q and k, the bf16 chunk states) go from global to shared memory by cp.async,
// 16 bytes a copy, all of a kernel's tiles in flight at once; fp32 sources are converted through registers.
// x and z are read in place when they are views into a wider buffer (the M block's input projection:
// rows of H P contiguous elements, any 8-element-aligned token and batch strides); other layouts are
// copied once. q, k are contiguous; y, dx, dz are written contiguous.
// Supported: P and N multiples of 16 up to 128, chunk L in {16, 32, 48, 64}, as long as the shared tiles
// fit the device (on an H100 all do on tensor cores, the largest, P = N = 128 at L = 64, ~133 KB; the
// SIMT path's backward chunk needs 234,516 bytes there, over the H100's 232,448: fp32 x at that shape
// takes chunk 48); anything else is a TORCH_CHECK error that says so. No host synchronisation:
// capturable in a CUDA graph.
// Tests: kernels_tests --gtest_filter='*Parity*ssm_scan*:FusedSsmScan*'.
// Benchmark: bench/kernels_bench --benchmark_filter='ssm/fused_cuda' (kernels/ssm_scan/bench.cpp).
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kThreads = 256;
constexpr int kMaxChunk = 64;
constexpr int kMaxDim = 128;
// log(FLT_MIN): the chunked reference's floor for log alpha in fp32 (see its log_alpha_floor).
constexpr float kLogAlphaFloor = -87.33654475f;

// Where row (b, t, h) of a [B,T,H,width] tensor starts: b bs + t ts + h width elements past its pointer.
// q, k and the outputs are contiguous (ts = H width, bs = T ts); x and z may be views into the M block's
// input projection (a wider token stride), read in place. The host passes such a view only when its
// pointer is 16-byte aligned and both strides are multiples of 8 elements, so every 16-byte (and paired)
// access of a contiguous tensor stays aligned (else it copies, see rows_in_place).
struct RowStrides {
  int64_t bs, ts;
};

// Everything a launch reads or writes. Pointers to optional inputs are null when absent.
struct Params {
  const void* x;  // [B,T,H,P], TX
  const void* z;  // [B,T,H,P], TX, or null
  const void* q;  // [B,T,H,N], TQK
  const void* k;  // [B,T,H,N], TQK
  const float *log_alpha, *beta, *gamma;  // [B,T,H]
  const float* D;                         // [H]
  const float* h0;                        // [B,H,P,N] or null
  const float *x_prev, *k_prev;           // [B,H,P], [B,H,N] or null
  int B, T, H, P, N, L, nC;
  RowStrides xs, zs;  // x's and z's (z's unused without z)
  float* states;  // SIMT path: [B,H,nC,P,N]: Z_c after chunk_state, S_c (the state entering chunk c) after
                  // state_pass; null on the tensor-core path
  float* lam;     // [B,H,nC]: sum of (floored) log alpha over each chunk (SIMT path; null on tensor cores)
  // Tensor-core path (bf16 x): the state scans write S_c and the adjoints dS_end(c) here in bf16, the
  // operand precision the per-chunk kernels use them at: half the bytes of fp32, and no fp32 copy at all.
  // Null on the SIMT path (fp32 tiles, fp32 states in place).
  __nv_bfloat16 *states_lo, *dstates_lo;  // [B,H,nC,P,N]
  // forward outputs
  void* y;  // [B,T,H,P], TX (x's dtype: rounded once, at the store)
  float* h_last;
  // backward
  const void* dout;      // [B,T,H,P] TX: the gradient of y, in y's dtype
  const float* dh_last;  // [B,H,P,N] or null
  const float* h_last_saved;  // [B,H,P,N]: the forward's h_last
  // <dh_last, h_last> in parts: [B,H,dot_parts], part w written once by warp w of the (b, h)'s backward
  // state pass or scan (no atomics: added in a fixed order by d log alpha's walk); null without dh_last.
  float* last_dot;
  int dot_parts;
  float* dstates;        // [B,H,nC,P,N]: dZ_c, then the adjoint at the end of chunk c (SIMT; null on tensor cores)
  float* dh0;            // [B,H,P,N] or null
  void *dx, *dz, *dq, *dk;                 // input dtypes; dz null without z
  float *dbeta, *dgamma, *r;               // [B,T,H]
  // [B,H,nC,kRowHalves]: r_t summed over each chunk's 32-row halves (fp64, a fixed order; 0 past the
  // chunk's rows), by the chunk kernel: the finish launch's walks start from them.
  double* r_half_sums;
  // [B,H]: the chunk blocks of (b, h) that have finished (zeroed before the chunk kernel): the finish
  // launch overlaps the chunk kernel's last wave and waits on these, not on the whole grid.
  int* chunks_done;
  float* dlog_alpha;                       // [B,T,H]
  float *gprev_x, *gprev_k;                // [B,H,nC,P], [B,H,nC,N]: column-0 gradients of each chunk
  float *last_x, *last_k;                  // [B,H,nC,P], [B,H,nC,N]: own gradient of each chunk's last row
  float* dD_part;                          // [B,H,nC]
  float* dD;                               // [H]: dD_part summed over (b, c)
  float *dx_prev, *dk_prev;                // [B,H,P], [B,H,N] or null
};

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

__device__ __forceinline__ int64_t row_index(const Params& p, int b, int t, int h) {
  return (static_cast<int64_t>(b) * p.T + t) * p.H + h;
}

// The first element of row (b, t, h) of a tensor laid out as `rs` with rows `width` wide.
__device__ __forceinline__ int64_t row_start(RowStrides rs, int b, int t, int h, int width) {
  return static_cast<int64_t>(b) * rs.bs + static_cast<int64_t>(t) * rs.ts + static_cast<int64_t>(h) * width;
}
// A contiguous [B,T,H,width] tensor's strides (q, k).
__device__ __forceinline__ RowStrides packed(const Params& p, int width) {
  const int64_t ts = static_cast<int64_t>(p.H) * width;
  return {ts * p.T, ts};
}
// z's element (b, t, h, col): z may be a strided view, dout, y, dz are contiguous (row_index * P + col).
__device__ __forceinline__ int64_t z_index(const Params& p, int b, int t, int h, int col) {
  return row_start(p.zs, b, t, h, p.P) + col;
}

// Global-to-shared tile loads: each thread issues kLoadsInFlight 16-byte loads before it stores any
// (a loop of one dependent element load per iteration waits a full memory latency per element).
constexpr int kLoadsInFlight = 4;

__device__ __forceinline__ bool is_aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

// V consecutive elements at src into fp32: one 16-byte load when `vector` (src 16-byte aligned), else
// element-wise.
template <int V, typename T>
__device__ __forceinline__ void load_run(const T* src, bool vector, float (&out)[V]) {
  if (vector) {
    load_vec<V>(src, out);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = to_float(src[e]);
  }
}

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

// log alpha (floored; 0 past the end), beta, gamma (0 past the end) of chunk rows 0..L-1, and the
// inclusive cumulative sum of log alpha in `cum` (warp 0: lane holds rows lane and lane + 32). Its first
// barrier also completes the caller's asynchronous tile copies (every caller loads its tiles first). Inlined:
// where the caller's pointers are known to be shared memory, its stores compile to shared stores.
__device__ __forceinline__ void load_coefficients(const Params& p, int b, int h, int t0, float* cum, float* bet, float* gam) {
  for (int t = threadIdx.x; t < p.L; t += blockDim.x) {
    const bool real = t0 + t < p.T;
    const int64_t i = real ? row_index(p, b, t0 + t, h) : 0;
    cum[t] = real ? fmaxf(p.log_alpha[i], kLogAlphaFloor) : 0.f;
    bet[t] = real ? p.beta[i] : 0.f;
    gam[t] = real ? p.gamma[i] : 0.f;
  }
  cp_async_wait_all();  // the tiles a caller's loaders copied asynchronously (load_rows_bf16) land here
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float lo = lane < p.L ? cum[lane] : 0.f, hi = lane + 32 < p.L ? cum[lane + 32] : 0.f;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float nlo = __shfl_up_sync(0xffffffffu, lo, off), nhi = __shfl_up_sync(0xffffffffu, hi, off);
      if (lane >= off) {
        lo += nlo;
        hi += nhi;
      }
    }
    hi += __shfl_sync(0xffffffffu, lo, 31);
    if (lane < p.L) cum[lane] = lo;
    if (lane + 32 < p.L) cum[lane + 32] = hi;
  }
  __syncthreads();
}

// e^v. kFast: ex2.approx (__expf: at most 2 + 1.2 |v| ulp, ~6e-6 relative at |v| ~ 80, 0 below ~-87; two
// instructions against expf's ~ten). The tensor-core path takes it where the result scales a value rounded
// to bf16 (4e-3) before use or enters an fp32 sum whose own error budget is bf16's; the SIMT (fp32) path
// keeps expf.
template <bool kFast>
__device__ __forceinline__ float exp_of(float v) {
  if constexpr (kFast) {
    return __expf(v);
  } else {
    return expf(v);
  }
}
// sigmoid(v) on the tensor-core path: the fast exponential and a rounded reciprocal (no IEEE division).
__device__ __forceinline__ float sigmoid_tc(float v) { return __frcp_rn(1.f + __expf(-v)); }

// exp(cum_t - cum_s) for s <= t: the decay from just after position s to position t.
template <bool kFast = false>
__device__ __forceinline__ float decay(const float* cum, int t, int s) { return exp_of<kFast>(cum[t] - cum[s]); }

// W_tj (column j = position j-1; 0 above the diagonal), see the header.
template <bool kFast = false>
__device__ __forceinline__ float weight(const float* cum, const float* bet, const float* gam, int L, int t, int j) {
  float w = 0.f;
  if (j >= 1 && j - 1 <= t) w += decay<kFast>(cum, t, j - 1) * gam[j - 1];
  if (j <= L - 1 && j <= t) w += decay<kFast>(cum, t, j) * bet[j];
  return w;
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

// Calls fn(i, j, index) for the 8 accumulator elements a lane holds of the 16 x 16 tile at (i0, j0).
template <class Fn>
__device__ __forceinline__ void for_tile_elements(int i0, int j0, Fn&& fn) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) fn(i0 + g + (e >> 1) * 8, j0 + nt * 8 + 2 * t + (e & 1), nt, e);
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

// Whether a launch runs its products on tensor cores: when x is bf16, whether q/k are bf16 or fp32 (the
// M block under autocast gives bf16 x, z and fp32 q, k: with q/k left out of this rule it ran the SIMT
// path, 7.5 ms of backward chunk a layer on the H100 instead of 3.4). fp32 x stays on the exact path.
template <typename TX, typename TQK>
constexpr bool kTensorCores = std::is_same_v<TX, __nv_bfloat16>;
// Blocks per SM the per-chunk kernels are compiled for: the tensor-core path's bf16 tiles fit 2 (or
// more) blocks of 8 warps on an H100, whose warps then hide each other's barrier and load latency.
template <typename TX, typename TQK>
constexpr int kMinBlocks = kTensorCores<TX, TQK> ? 2 : 0;  // 0: no directive, as before for SIMT

// Padded leading dimension of the SIMT path's fp32 tiles: odd, so a warp's column-strided reads hit
// distinct banks.
__host__ __device__ __forceinline__ int ld_of(int width) { return width + 1; }

// ---- tensor-core tiles (bf16 x) ----------------------------------------------------------------
// mma.sync m16n8k16 with bf16 operands and fp32 accumulation over bf16 shared-memory tiles, fragments
// loaded with ldmatrix (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type" and
// "ldmatrix"). Operands rounded to bf16 (x, z already are; q, k when fp32; dy, the states, the weighted
// scores): ~4e-3 relative per operand, as Mamba-2's chunked kernels round scores and states to the input
// dtype before their dots. A warp owns a 16 x 16 output tile (two m16n8 tiles) at a time; K runs in steps
// of 16 (every K here is L, P or N: multiples of 16).
using bf16 = __nv_bfloat16;

// Row stride (elements) of a bf16 tile `width` (a multiple of 16) wide: width + 8, an odd number of
// 16-byte units, so the 8 row addresses of an ldmatrix 8x8 matrix hit 8 distinct groups of 4 banks.
__host__ __device__ constexpr int ld_tc(int width) { return width + 8; }

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
  if (o.k_major) {
    const bf16* ptr = o.base + (r0 + r_off + row) * o.ld + k0 + k_off;
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3])
                 : "r"(addr));
  } else {
    const bf16* ptr = o.base + (k0 + k_off + row) * o.ld + r0 + r_off;
    const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
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

// Two adjacent outputs (j even, so 8- or 4-byte aligned in the tensors this file allocates).
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

// ---- forward -----------------------------------------------------------------------------------

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

// Tensor cores: q, k, x, the state S_c and the weighted scores (columns 1..L; column 0 in fp32) in bf16,
// all resident at once (no reuse: the state's load overlaps the others).
struct OutputTc {
  float *cum, *bet, *gam, *sc0;
  bf16 *qs, *ka, *xa, *scw, *state;
  __host__ __device__ OutputTc(Carve& c, int L, int P, int N)
      : cum(c.take<float>(L)), bet(c.take<float>(L)), gam(c.take<float>(L)), sc0(c.take<float>(L)),
        qs(c.take<bf16>(L * ld_tc(N))), ka(c.take<bf16>((L + 1) * ld_tc(N))), xa(c.take<bf16>((L + 1) * ld_tc(P))),
        scw(c.take<bf16>(L * ld_tc(L))), state(c.take<bf16>(P * ld_tc(N))) {}
};

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

template <typename TQK>
__device__ void output_tc(const Params& p, float* smem) {
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
  const int t0 = c * L, ldP = ld_tc(P), ldN = ld_tc(N), ldL = ld_tc(L);
  Carve carve{reinterpret_cast<char*>(smem)};
  const OutputTc s(carve, L, P, N);
  load_chunk_tiles<TQK>(p, s, b, h, c);
  load_coefficients(p, b, h, t0, s.cum, s.bet, s.gam);  // ends with a barrier
  score_column0(s.qs, ldN, s.ka, N, L, s.cum, s.bet, s.gam, s.sc0);
  // Weighted scores W_tj (q_t . k_j) for columns j = 1..L: scw[t][j - 1], lower-triangular tiles.
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, nL = L / 16;
  for (int task = warp; task < nL * (nL + 1) / 2; task += warps) {
    int bi, bj;
    lower_tile(task, bi, bj);
    float acc[2][4] = {};
    mma_block(acc, {s.qs, ldN, true}, {s.ka + ldN, ldN, true}, 16 * bi, 16 * bj, 0, N);
    for_tile_elements(16 * bi, 16 * bj, [&](int t, int j, int nt, int e) {
      if (e & 1) return;
      *reinterpret_cast<uint32_t*>(s.scw + t * ldL + j) =
          pack_bf16(acc[nt][e] * weight<true>(s.cum, s.bet, s.gam, L, t, j + 1),
                    acc[nt][e + 1] * weight<true>(s.cum, s.bet, s.gam, L, t, j + 2));
    });
  }
  __syncthreads();
  const float Dh = p.D[h];
  const bf16* z = static_cast<const bf16*>(p.z);
  const int tn = P / 16;
  const int g = (threadIdx.x & 31) >> 2, tq = threadIdx.x & 3;  // the lane's accumulator rows and column pair
  for (int task = warp; task < nL * tn; task += warps) {
    const int i0 = (task / tn) * 16, j0 = (task % tn) * 16;
    // z's pairs at the lane's accumulator positions ([nt][row half]: rows i0 + g + 8 half, columns
    // j0 + 8 nt + 2 tq; col even and z's rows 16-byte aligned: rows_in_place, or copied contiguous),
    // requested before the products so their latency overlaps them (read in the epilogue, after the
    // stores of y, they waited one round trip a pair: the compiler cannot move a load of z above a
    // store to y).
    uint32_t zw[2][2] = {};
    if (z)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int t = i0 + g + 8 * half, col = j0 + 8 * nt + 2 * tq;
          if (t0 + t < p.T) zw[nt][half] = *reinterpret_cast<const uint32_t*>(z + z_index(p, b, t0 + t, h, col));
        }
    float intra[2][4] = {}, inter[2][4] = {};
    // intra: sum_{j >= 1} scw[t][j - 1] x_j (x_j = xa row j, stored j-major); zero past the diagonal block.
    mma_block(intra, {s.scw, ldL, true}, {s.xa + ldP, ldP, false}, i0, j0, 0, i0 + 16);
    // inter: q_t . S_c[col, :]
    mma_block(inter, {s.qs, ldN, true}, {s.state, ldN, true}, i0, j0, 0, N);
    const float decay_in[2] = {exp_of<true>(s.cum[i0 + g]), exp_of<true>(s.cum[i0 + g + 8])};  // per row half
    for_tile_elements(i0, j0, [&](int t, int col, int nt, int e) {
      if ((e & 1) || t0 + t >= p.T) return;
      const int64_t o = row_index(p, b, t0 + t, h) * P + col;
      const float2 zp = unpack_bf16(zw[nt][e >> 1]);
      const float zv[2] = {zp.x, zp.y};
      float v[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        v[u] = intra[nt][e + u] + s.sc0[t] * __bfloat162float(s.xa[col + u]) +
               decay_in[e >> 1] * inter[nt][e + u] +
               Dh * __bfloat162float(s.xa[(t + 1) * ldP + col + u]);
        if (z) v[u] *= zv[u] * sigmoid_tc(zv[u]);
      }
      store_pair(static_cast<bf16*>(p.y) + o, v[0], v[1]);
    });
  }
}

template <typename TX, typename TQK>
__global__ void __launch_bounds__(kThreads, kMinBlocks<TX, TQK>) ablate_ssm_scan_fwd_output(Params p) {
  extern __shared__ float smem[];
  if constexpr (kTensorCores<TX, TQK>) {
    output_tc<TQK>(p, smem);
  } else {
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
    const int t0 = c * L, ldP = ld_of(P), ldN = ld_of(N), ldS = ld_of(L);
    const int rows_big = (L + 1) > P ? (L + 1) : P;
    float *cum = smem, *bet = cum + L, *gam = bet + L, *qs = gam + L, *big = qs + L * ldN, *xa = big + rows_big * ldN,
          *sc = xa + (L + 1) * ldP;
    float* ka = big;  // keys first, then the state entering the chunk
    const int64_t bh = static_cast<int64_t>(b) * p.H + h;
    const bool first = c == 0;
    load_rows(qs, ldN, N, static_cast<const TQK*>(p.q), packed(p, N), p, b, h, t0, L, nullptr);
    load_rows(ka, ldN, N, static_cast<const TQK*>(p.k), packed(p, N), p, b, h, t0 - 1, L + 1,
              first && p.k_prev ? p.k_prev + bh * N : nullptr);
    load_rows(xa, ldP, P, static_cast<const TX*>(p.x), p.xs, p, b, h, t0 - 1, L + 1,
              first && p.x_prev ? p.x_prev + bh * P : nullptr);
    load_coefficients(p, b, h, t0, cum, bet, gam);  // ends with a barrier
    // Scores times weights: sc[t][j] = W_tj (q_t . k_j); columns 1..L as a product, column 0 per row.
    block_gemm(L, L, N, qs, ldN, 1, ka + ldN, 1, ldN,
               [&](int t, int j, float v) { sc[t * ldS + j + 1] = v * weight(cum, bet, gam, L, t, j + 1); });
    for (int t = threadIdx.x / 32; t < L; t += blockDim.x / 32) {  // a warp per row
      float v = 0.f;
      for (int n = threadIdx.x & 31; n < N; n += 32) v = fmaf(qs[t * ldN + n], ka[n], v);
      v = warp_sum(v);
      if ((threadIdx.x & 31) == 0) sc[t * ldS] = v * weight(cum, bet, gam, L, t, 0);
    }
    __syncthreads();
    const float* S = p.states + (bh * p.nC + c) * P * N;
    load_matrix(big, ldN, P, N, S);
    __syncthreads();
    const float Dh = p.D[h];
    const TX* z = static_cast<const TX*>(p.z);
    block_gemm2(L, P, L + 1, sc, ldS, 1, xa, ldP, 1,  // intra: sum_j sc[t][j] x_j
                N, qs, ldN, 1, big, 1, ldN,           // inter: q_t . S_c[p, :]
                [&](int t, int col, float intra, float inter) {
                  if (t0 + t >= p.T) return;
                  const int64_t o = row_index(p, b, t0 + t, h) * P + col;
                  float v = intra + expf(cum[t]) * inter + Dh * xa[(t + 1) * ldP + col];
                  if (z) {
                    const float zv = to_float(z[z_index(p, b, t0 + t, h, col)]);
                    v *= zv * sigmoid(zv);
                  }
                  static_cast<TX*>(p.y)[o] = from_float<TX>(v);
                });
  }
}

// ---- backward ----------------------------------------------------------------------------------

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

__host__ __device__ inline size_t bwd_chunk_smem_floats(int L, int P, int N) {
  const int rows_big = (L + 1) > P ? (L + 1) : P;
  return 3 * L + (L + 1) + 3 * L + (L + 1) + 1 + static_cast<size_t>(L) * ld_of(N) +
         static_cast<size_t>(L + 1) * ld_of(N) + static_cast<size_t>(L + 1) * ld_of(P) +
         static_cast<size_t>(L) * ld_of(P) + 2 * static_cast<size_t>(L) * ld_of(L) +
         static_cast<size_t>(rows_big) * ld_of(N);
}

// Tensor cores: every operand tile in bf16 (q, k, x, dy, the weighted scores W o (q.k) and W o (dy.x) of
// columns 1..L, the state S_c then the adjoint dS), about half the fp32 tiles' bytes: 2 blocks per SM at
// L 64, P 64, N 128. The fp32 side: the weighted column 0 of both score matrices (sc0, dx0), and per-tile
// partial sums (one writer each, added in a fixed order at the end) of the intra-chunk dgamma / dbeta
// (dgp, dbp: per block row of the scores), r_t (r1p: per column block of yscan), e_j (ep: per column
// block of dk), e_0 (e0p: per warp of 32 keys), db0p[t] (dbeta_0's terms) and drow[t] = dy_t . x_t (dD);
// the intra-chunk parts of the column-0 gradients (gk0 = sum_t dxm_t0 q_t, gx0 = sum_t sc_t0 dy_t).
struct BwdChunkTc {
  float *cum, *bet, *gam, *wend, *sc0, *dx0, *db0p, *drow, *dgp, *dbp, *r1p, *ep, *e0p, *gk0, *gx0;
  bf16 *qs, *ka, *xa, *dys, *scw, *dxw, *state;
  __host__ __device__ BwdChunkTc(Carve& c, int L, int P, int N)
      : cum(c.take<float>(L)), bet(c.take<float>(L)), gam(c.take<float>(L)), wend(c.take<float>(L + 1)),
        sc0(c.take<float>(L)), dx0(c.take<float>(L)), db0p(c.take<float>(L)), drow(c.take<float>(L)),
        dgp(c.take<float>(L / 16 * L)), dbp(c.take<float>(L / 16 * L)), r1p(c.take<float>(P / 16 * L)),
        ep(c.take<float>(N / 16 * L)), e0p(c.take<float>((N + 31) / 32)), gk0(c.take<float>(N)),
        gx0(c.take<float>(P)), qs(c.take<bf16>(L * ld_tc(N))), ka(c.take<bf16>((L + 1) * ld_tc(N))),
        xa(c.take<bf16>((L + 1) * ld_tc(P))), dys(c.take<bf16>(L * ld_tc(P))), scw(c.take<bf16>(L * ld_tc(L))),
        dxw(c.take<bf16>(L * ld_tc(L))), state(c.take<bf16>(P * ld_tc(N))) {}
};

// ---- chunk-state scans (tensor cores) ----------------------------------------------------------
// On the tensor-core path the chunk states do not travel through global memory in fp32: one block per
// (slice of kScanRows rows of P, head, batch) walks the chunks in order (forward) or in reverse
// (backward) with its slice of the running state in mma accumulators (fp32), and per chunk
//   forward:  stores S_c (bf16, states_lo: the operand the output and backward kernels read), then
//             S <- exp(Lam_c) S + W_{L-1,0} x_0 k_0^T + sum_{j=1..L} (W_{L-1,j} x_j) k_j^T;
//   backward: stores dS_end(c) (bf16, dstates_lo), then dS <- exp(Lam_c) dS + sum_t (exp(cum_t) dy_t) q_t^T
// (h_last and dh0 are what leaves the last step, in fp32). The next chunks' tiles are copied (cp.async)
// while the current chunk is multiplied (three stages: two chunks in flight). This replaces a chunk-state
// launch plus a state pass each way: the fp32 Z_c / dZ_c (B H nC P N x 4 bytes, 268 MB a layer at
// nam56r-small) are neither written nor read back. The operands are rounded to bf16 where those kernels
// rounded them (x_j W_{L-1,j} and exp(cum_t) dy_t, once; the column-0 term stays fp32); the factors come
// from the fast exponential (exp_of) and the fp32 sums run in another order.
// Measured and not kept (session 16, experiments/results/2026-11-26-h100-s16/, patches there): no scans,
// the states passed block to block by the output and backward chunk kernels (fwd+bwd 2.07 ms at best
// against 2.04: +58% instructions in the output kernel); 32-row slices at 4 blocks an SM (2.19 ms).
// The chunk loop is a serial chain (32 links at nam56r-small, 2 blocks of 8 warps an SM), so each link
// is kept short: two barriers a chunk; every warp scans log alpha itself (a few shuffles, no barrier for
// a shared copy) and weights its own rows of the operand; each warp's tiles share one column block, so
// a k step loads the B fragment once for all of them.
constexpr int kScanRows = 64;
// Accumulator tiles a warp holds: the kScanRows x N slice in 16 x 16 tiles over the block's warps.
constexpr int kScanTilesPerWarp = (kScanRows / 16) * (kMaxDim / 16) / (kThreads / 32);

// One stage: a chunk's raw tiles. Forward: x's slice and k, rows t0-1 .. t0+L-1 (row 0 the column-0
// position), log alpha, beta, gamma. Backward: dout's and z's slices and q, rows t0 .. t0+L-1, log alpha.
struct ScanStage {
  float *la, *bet, *gam;
  bf16 *a, *zt, *b;
};

// One stage's pieces of shared memory.
__host__ __device__ inline ScanStage take_stage(Carve& c, int L, int rows, int N, bool backward) {
  const int arows = backward ? L : L + 1;
  ScanStage st;
  st.la = c.take<float>(L);
  st.bet = c.take<float>(backward ? 0 : L);
  st.gam = c.take<float>(backward ? 0 : L);
  st.a = c.take<bf16>(arows * ld_tc(rows));
  st.zt = c.take<bf16>(backward ? L * ld_tc(rows) : 0);
  st.b = c.take<bf16>(arows * ld_tc(N));
  return st;
}

// Three stages: chunk step s uses stage s % 3, so two chunks' copies are in flight while one is used (with
// two the backward scan took 248 us at nam56r-small on the H100, with three 228; the forward, 217 both
// ways, is bound by its chain of instructions, not its loads). At P 64, N 128, chunk 64: 84 KB forward,
// 108 KB backward: 2 blocks an SM either way.
struct StateScanTc {
  ScanStage s0, s1, s2;
  __host__ __device__ StateScanTc(Carve& c, int L, int rows, int N, bool backward)
      : s0(take_stage(c, L, rows, N, backward)), s1(take_stage(c, L, rows, N, backward)),
        s2(take_stage(c, L, rows, N, backward)) {}
  // The stage of chunk step `step`, pointer by pointer (choosing among the structs as objects takes their
  // address: the whole layout then lives on the stack).
  __device__ ScanStage stage(int step) const {
    const int k = step % 3;
    auto pick = [k](auto a, auto b, auto c) { return k == 0 ? a : k == 1 ? b : c; };
    return {pick(s0.la, s1.la, s2.la), pick(s0.bet, s1.bet, s2.bet), pick(s0.gam, s1.gam, s2.gam),
            pick(s0.a, s1.a, s2.a),    pick(s0.zt, s1.zt, s2.zt),    pick(s0.b, s1.b, s2.b)};
  }
};

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `kPending` of this thread's most recent copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool fill) {
  const uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(to), "l"(src), "r"(fill ? 4 : 0) : "memory");
}

// The fp32 [B,T,H] coefficient rows t0 .. t0+L-1 of (b, h) into dst (0 past T), asynchronously.
__device__ __forceinline__ void scan_coefficients(float* dst, const float* src, const Params& p, int b, int h, int t0) {
  for (int t = threadIdx.x; t < p.L; t += blockDim.x) {
    const bool real = t0 + t < p.T;
    cp_async4(dst + t, real ? src + row_index(p, b, t0 + t, h) : src, real);
  }
}

// Chunk c's tiles into `st` (bf16 sources by cp.async; fp32 ones, unaligned rows and x_prev / k_prev
// through registers), by the backward chunk's inlined tile loader.
template <bool kBackward, typename TQK>
__device__ __forceinline__ void scan_prefetch(const Params& p, const ScanStage& st, int b, int h, int c, int p0,
                                              int rows) {
  const int L = p.L, N = p.N, t0 = c * L, ldR = ld_tc(rows), ldN = ld_tc(N);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const RowStrides qk = packed(p, N);
  scan_coefficients(st.la, p.log_alpha, p, b, h, t0);
  if constexpr (!kBackward) {
    const bf16* x = static_cast<const bf16*>(p.x);
    const TQK* k = static_cast<const TQK*>(p.k);
    const bool first = c == 0;
    scan_coefficients(st.bet, p.beta, p, b, h, t0);
    scan_coefficients(st.gam, p.gamma, p, b, h, t0);
    load_tile_bf16(st.a, ldR, rows, x, x + row_start(p.xs, b, 0, h, p.P) + p0, p.xs.ts, t0 - 1, L + 1, p.T,
                   first && p.x_prev ? p.x_prev + bh * p.P + p0 : nullptr);
    load_tile_bf16(st.b, ldN, N, k, k + row_start(qk, b, 0, h, N), qk.ts, t0 - 1, L + 1, p.T,
                   first && p.k_prev ? p.k_prev + bh * N : nullptr);
  } else {
    const bf16* dout = static_cast<const bf16*>(p.dout);
    const TQK* q = static_cast<const TQK*>(p.q);
    const RowStrides ys = packed(p, p.P);
    load_tile_bf16(st.a, ldR, rows, dout, dout + row_start(ys, b, 0, h, p.P) + p0, ys.ts, t0, L, p.T, nullptr);
    if (p.z) {
      const bf16* z = static_cast<const bf16*>(p.z);
      load_tile_bf16(st.zt, ldR, rows, z, z + row_start(p.zs, b, 0, h, p.P) + p0, p.zs.ts, t0, L, p.T, nullptr);
    }
    load_tile_bf16(st.b, ldN, N, q, q + row_start(qk, b, 0, h, N), qk.ts, t0, L, p.T, nullptr);
  }
}

// Warp w's accumulator tiles of a rows x N slice: column block w % tn (tn = N / 16 column blocks) and
// row blocks w / tn + per u, u < kScanTilesPerWarp, where per = 8 / tn warps share a column block
// (warps past tn per hold none): 4 per >= the slice's rows / 16 <= 4 row blocks, so every tile is held.
struct ScanTiles {
  int rb0, per, nrb, j0;
  __device__ ScanTiles(int rows, int N) {
    const int warp = threadIdx.x / 32, tn = N / 16;
    per = (kThreads / 32) / tn;
    nrb = rows / 16;
    rb0 = warp < tn * per ? warp / tn : nrb;
    j0 = 16 * (warp % tn);
  }
  __device__ bool has(int u) const { return rb0 + per * u < nrb; }
  __device__ int i0(int u) const { return 16 * (rb0 + per * u); }
};

template <bool kBackward, typename TQK>
__device__ __forceinline__ void state_scan_tc(const Params& p, float* smem) {
  const int h = blockIdx.y, b = blockIdx.z, L = p.L, N = p.N, nC = p.nC;
  const int p0 = blockIdx.x * kScanRows, rows = min(kScanRows, p.P - p0);
  const int ldR = ld_tc(rows), ldN = ld_tc(N), warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  Carve carve{reinterpret_cast<char*>(smem)};
  const StateScanTc s(carve, L, rows, N, kBackward);
  const ScanTiles tiles(rows, N);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h, PN = static_cast<int64_t>(p.P) * N;
  const int64_t slice = bh * PN + static_cast<int64_t>(p0) * N;  // element (p0, 0) of a [B,H,P,N] state
  // Chunk steps 0 and 1 in flight (a group each; a group may be empty: the waits below count groups).
  auto chunk_of = [&](int step) { return kBackward ? nC - 1 - step : step; };
  scan_prefetch<kBackward, TQK>(p, s.stage(0), b, h, chunk_of(0), p0, rows);
  cp_async_commit();
  if (nC > 1) scan_prefetch<kBackward, TQK>(p, s.stage(1), b, h, chunk_of(1), p0, rows);
  cp_async_commit();

  // The running state starts at h0 (forward) or dh_last (backward), or 0. The backward also forms
  // <dh_last, h_last>: h_last is an output at position T-1, so d/d cum_{T-1} gains it (see
  // dlog_alpha_rows, which starts from it). Accumulator layout as mma_block's.
  float acc[kScanTilesPerWarp][2][4] = {};
  const float* start = kBackward ? p.dh_last : p.h0;
  float dot = 0.f;
  if (start)
#pragma unroll
    for (int u = 0; u < kScanTilesPerWarp; ++u)
      if (tiles.has(u))
        for_tile_elements(tiles.i0(u), tiles.j0, [&](int i, int j, int nt, int e) {
          acc[u][nt][e] = start[slice + i * N + j];
          if (kBackward) dot = fmaf(acc[u][nt][e], p.h_last_saved[slice + i * N + j], dot);
        });

  // [B,H,nC,P,N]: chunk c's slot of this slice at + c P N.
  bf16* slots = (kBackward ? p.dstates_lo : p.states_lo) + bh * nC * PN + static_cast<int64_t>(p0) * N;
  for (int step = 0; step < nC; ++step) {
    const int c = chunk_of(step);
    const ScanStage st = s.stage(step);
    // The state entering chunk c (forward) or at its end (backward), in the operand precision.
    bf16* slot = slots + c * PN;
#pragma unroll
    for (int u = 0; u < kScanTilesPerWarp; ++u)
      if (tiles.has(u)) {  // warp-uniform
        bf16* row = slot + (tiles.i0(u) + g) * N + tiles.j0;
        store_row16_bf16(row, tq, acc[u][0][0], acc[u][0][1], acc[u][1][0], acc[u][1][1]);
        store_row16_bf16(row + 8 * N, tq, acc[u][0][2], acc[u][0][3], acc[u][1][2], acc[u][1][3]);
      }
    cp_async_wait_group<1>();  // step's group has landed (step + 1's may still be in flight)
    __syncthreads();  // chunk c's tiles are in for every thread; every warp is done with step - 1's stage
    if (step + 2 < nC) scan_prefetch<kBackward, TQK>(p, s.stage(step + 2), b, h, chunk_of(step + 2), p0, rows);
    cp_async_commit();
    // cum_t = sum_{s <= t} log alpha_s (floored; 0 past T) in every warp: lane l holds rows l and l + 32.
    float lo = lane < L ? fmaxf(st.la[lane], kLogAlphaFloor) : 0.f;
    float hi = lane + 32 < L ? fmaxf(st.la[lane + 32], kLogAlphaFloor) : 0.f;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float nlo = __shfl_up_sync(0xffffffffu, lo, off), nhi = __shfl_up_sync(0xffffffffu, hi, off);
      if (lane >= off) lo += nlo, hi += nhi;
    }
    hi += __shfl_sync(0xffffffffu, lo, 31);
    // cum at index t (0 <= t < L; a lane's own t: every lane takes part in both shuffles).
    auto cum = [&](int t) {
      const float from_lo = __shfl_sync(0xffffffffu, lo, t & 31), from_hi = __shfl_sync(0xffffffffu, hi, t & 31);
      return t < 32 ? from_lo : from_hi;
    };
    const float lam = cum(L - 1);
    // The weighted, rounded operand, a warp per row (rows warp + 8 m, m < 8: L <= 64), a lane per column
    // pair: forward x_j W_{L-1,j} for rows j = 1..L in place (row 0, the column-0 position, stays as is);
    // backward exp(cum_t) dout_t silu(z_t) in place of dout_t. Lane m computes row m's factor once and the
    // row loop broadcasts it (every lane computing every row's exponentials was most of the loop's
    // instructions). The factors and the gate use the fast exponential (ex2.approx: ~2 ulp, a few 1e-6
    // relative at |arguments| ~80): what they scale is rounded to bf16 (4e-3) right after.
    const int col = 2 * lane, my_row = warp + warps * lane;
    float factor = 0.f;
    if constexpr (kBackward) {
      factor = __expf(cum(min(my_row, L - 1)));
    } else {
      const int j = min(my_row + 1, L);  // W_{L-1,j}: the gamma term of position j-1, the beta term of j (j < L)
      const float cj1 = cum(j - 1), cj = cum(min(j, L - 1));
      factor = __expf(lam - cj1) * st.gam[j - 1];
      if (j <= L - 1) factor += __expf(lam - cj) * st.bet[j];
    }
    for (int m = 0, r = warp; r < L; ++m, r += warps) {
      const float f = __shfl_sync(0xffffffffu, factor, m);
      if (col >= rows) continue;
      if constexpr (kBackward) {
        const float2 d = unpack_bf16(*reinterpret_cast<const uint32_t*>(st.a + r * ldR + col));
        float v0 = d.x, v1 = d.y;
        if (p.z) {
          const float2 zv = unpack_bf16(*reinterpret_cast<const uint32_t*>(st.zt + r * ldR + col));
          v0 *= zv.x * __frcp_rn(1.f + __expf(-zv.x)), v1 *= zv.y * __frcp_rn(1.f + __expf(-zv.y));
        }
        *reinterpret_cast<uint32_t*>(st.a + r * ldR + col) = pack_bf16(v0 * f, v1 * f);
      } else {
        uint32_t* pair = reinterpret_cast<uint32_t*>(st.a + (r + 1) * ldR + col);
        const float2 v = unpack_bf16(*pair);
        *pair = pack_bf16(v.x * f, v.y * f);
      }
    }
    const float w0 = kBackward ? 0.f : __expf(lam - cum(0)) * st.bet[0];  // W_{L-1,0}: position 0's beta term
    __syncthreads();
    const float decay = expf(lam);
    // S <- decay S (+ the column-0 term in fp32), then the chunk's product on tensor cores:
    // forward A(p, j) = x[1 + j][p] W_{L-1,1+j}, B(j, n) = k[1 + j][n]; backward A(p, t) = dy[t][p] (in
    // dout's tile), B(t, n) = q[t][n]; all stored j- (t-) major, loaded .trans.
#pragma unroll
    for (int u = 0; u < kScanTilesPerWarp; ++u)
      if (tiles.has(u)) {
        const int i = tiles.i0(u) + g;
        const float x0a = kBackward ? 0.f : w0 * __bfloat162float(st.a[i]);
        const float x0b = kBackward ? 0.f : w0 * __bfloat162float(st.a[i + 8]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const float2 k0 = kBackward ? make_float2(0.f, 0.f)
                                      : unpack_bf16(*reinterpret_cast<const uint32_t*>(st.b + tiles.j0 + 8 * nt + 2 * tq));
          acc[u][nt][0] = fmaf(decay, acc[u][nt][0], x0a * k0.x);
          acc[u][nt][1] = fmaf(decay, acc[u][nt][1], x0a * k0.y);
          acc[u][nt][2] = fmaf(decay, acc[u][nt][2], x0b * k0.x);
          acc[u][nt][3] = fmaf(decay, acc[u][nt][3], x0b * k0.y);
        }
      }
    const Operand A = kBackward ? Operand{st.a, ldR, false} : Operand{st.a + ldR, ldR, false};
    const Operand B = kBackward ? Operand{st.b, ldN, false} : Operand{st.b + ldN, ldN, false};
    if (tiles.has(0))
#pragma unroll 2
      for (int k0 = 0; k0 < L; k0 += 16) {
        uint32_t bf[4];
        load_block(bf, B, tiles.j0, k0, false);
#pragma unroll
        for (int u = 0; u < kScanTilesPerWarp; ++u)
          if (tiles.has(u)) {
            uint32_t af[4];
            load_block(af, A, tiles.i0(u), k0, true);
            mma_bf16(acc[u][0], af, bf[0], bf[1]);
            mma_bf16(acc[u][1], af, bf[2], bf[3]);
          }
      }
  }
  float* out = kBackward ? p.dh0 : p.h_last;  // fp32: the state after the last step, [B,H,P,N]
  if (out)
#pragma unroll
    for (int u = 0; u < kScanTilesPerWarp; ++u)
      if (tiles.has(u))
        for_tile_elements(tiles.i0(u), tiles.j0, [&](int i, int j, int nt, int e) {
          if (!(e & 1)) store_pair(out + slice + i * N + j, acc[u][nt][e], acc[u][nt][e + 1]);
        });
  if (kBackward && start) {
    dot = warp_sum(dot);
    if (lane == 0) p.last_dot[bh * p.dot_parts + blockIdx.x * warps + warp] = dot;
  }
}

template <typename TQK>
__global__ void __launch_bounds__(kThreads, 2) ablate_ssm_scan_fwd_state_scan(Params p) {
  extern __shared__ float smem[];
  state_scan_tc<false, TQK>(p, smem);
}

template <typename TQK>
__global__ void __launch_bounds__(kThreads, 2) ablate_ssm_scan_bwd_state_scan(Params p) {
  extern __shared__ float smem[];
  state_scan_tc<true, TQK>(p, smem);
}

// The bf16 pairs dout[o], dout[o + 1] (into fp32) and z[zo], z[zo + 1] (as one word, left as is without
// z): a 4-byte read each when `paired` (the pointers allow it; o and zo are even), else element by element.
__device__ __forceinline__ void load_dout_z_pair(const bf16* dout, int64_t o, const bf16* z, int64_t zo, bool paired,
                                                 float2& dv, uint32_t& zw) {
  if (paired) {
    dv = unpack_bf16(*reinterpret_cast<const uint32_t*>(dout + o));
    if (z) zw = *reinterpret_cast<const uint32_t*>(z + zo);
  } else {
    dv = make_float2(__bfloat162float(dout[o]), __bfloat162float(dout[o + 1]));
    if (z) {
      const bf16 pair[2] = {z[zo], z[zo + 1]};
      zw = *reinterpret_cast<const uint32_t*>(pair);
    }
  }
}

// dy_t = dout_t * silu(z_t) (dout_t without z; 0 past the end) of chunk rows 0..L-1, rounded into the bf16
// tile, and the column-0 values of the same row by the same warp (what a dy loader, score_column0 and
// the weighting of column 0 computed in three passes): from dy before its rounding the fp32 dots
// d0 = dy_t . x_0 and drow[t] = dy_t . x_t, raw = q_t . k_0 over the bf16 tiles, then sc0[t] = raw W_t0,
// dx0[t] = d0 W_t0 and db0p[t] = exp(cum_t - cum_0) raw d0 (dbeta_0's terms). A warp per row, a lane per
// 2 adjacent columns (2 lane + 64 u, u < 2: P <= 128), kRows rows' loads in flight. Measured and not
// kept (session 17, experiments/results/2026-11-27-h100-s17/): dout and z staged in shared memory by
// cp.async with the tiles, 1.35 ms for the kernel against 1.23 where the benchmark runs it.
__device__ __forceinline__ void bwd_dy_column0(const Params& p, const BwdChunkTc& s, int b, int h, int t0, int ldP,
                                               int ldN) {
  constexpr int kRows = 4, kPairs = 2;
  const bf16* z = static_cast<const bf16*>(p.z);
  const int L = p.L, P = p.P, N = p.N;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x & 31;
  const bf16* dout = static_cast<const bf16*>(p.dout);
  const bool vector = reinterpret_cast<uintptr_t>(dout) % 4 == 0 && reinterpret_cast<uintptr_t>(z) % 4 == 0;
  for (int tb = warp; tb < L; tb += kRows * warps) {
    float2 dv[kRows][kPairs];
    uint32_t zw[kRows][kPairs];
    float raws[kRows] = {}, d0s[kRows] = {}, dxs[kRows] = {};  // the batch's row sums (every lane)
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int t = tb + u * warps;
      const bool real = t < L && t0 + t < p.T;
      const int64_t o = real ? row_index(p, b, t0 + t, h) * P : 0;
      const int64_t zo = real && z ? z_index(p, b, t0 + t, h, 0) : 0;
#pragma unroll
      for (int q = 0; q < kPairs; ++q) {
        const int col = 2 * lane + 64 * q;
        dv[u][q] = make_float2(0.f, 0.f);
        zw[u][q] = 0u;
        if (real && col < P) load_dout_z_pair(dout, o + col, z, zo + col, vector, dv[u][q], zw[u][q]);
      }
    }
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int t = tb + u * warps;  // warp-uniform: the warp sums below see every lane
      if (t >= L) break;
      float d0 = 0.f, dx = 0.f, raw = 0.f;
#pragma unroll
      for (int q = 0; q < kPairs; ++q) {
        const int col = 2 * lane + 64 * q;
        if (col < P) {
          float dy[2] = {dv[u][q].x, dv[u][q].y};
          if (z) {
            const float2 zf = unpack_bf16(zw[u][q]);
            const float zv[2] = {zf.x, zf.y};
#pragma unroll
            for (int e = 0; e < 2; ++e) dy[e] = dy[e] * zv[e] * sigmoid_tc(zv[e]);
          }
          *reinterpret_cast<uint32_t*>(s.dys + t * ldP + col) = pack_bf16(dy[0], dy[1]);
          const float2 x0 = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.xa + col));
          const float2 xt = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.xa + (t + 1) * ldP + col));
          d0 = fmaf(dy[0], x0.x, d0);
          d0 = fmaf(dy[1], x0.y, d0);
          dx = fmaf(dy[0], xt.x, dx);
          dx = fmaf(dy[1], xt.y, dx);
        }
      }
      if (4 * lane < N) {  // 4 keys a lane (8-byte reads; N <= kMaxDim = 128)
        const int n = 4 * lane;
        const uint2 qv = *reinterpret_cast<const uint2*>(s.qs + t * ldN + n);
        const uint2 kv = *reinterpret_cast<const uint2*>(s.ka + n);
        const float2 q01 = unpack_bf16(qv.x), q23 = unpack_bf16(qv.y), k01 = unpack_bf16(kv.x), k23 = unpack_bf16(kv.y);
        raw = fmaf(q01.x, k01.x, raw);
        raw = fmaf(q01.y, k01.y, raw);
        raw = fmaf(q23.x, k23.x, raw);
        raw = fmaf(q23.y, k23.y, raw);
      }
      d0s[u] = warp_sum(d0);
      dxs[u] = warp_sum(dx);
      raws[u] = warp_sum(raw);
    }
    // Lane u finishes row tb + u warps of the batch (the rows' weights computed side by side).
    const int t = tb + lane * warps;
    if (lane < kRows && t < L) {
      float raw = raws[0], d0 = d0s[0], dx = dxs[0];
#pragma unroll
      for (int u = 1; u < kRows; ++u)
        if (lane == u) raw = raws[u], d0 = d0s[u], dx = dxs[u];
      const float w0 = weight(s.cum, s.bet, s.gam, L, t, 0);
      s.sc0[t] = raw * w0;
      s.db0p[t] = decay(s.cum, t, 0) * raw * d0;
      s.dx0[t] = d0 * w0;
      s.drow[t] = dx;
    }
  }
}

// a / d for a task number 0 <= a < 2^16 and a tile count 1 <= d <= 8 (inv_d = 1 / d): (a + 0.5) / d lies at
// least 1 / 16 from an integer, far beyond the float product's rounding, so its truncation is the
// quotient (an integer division by a run-time d is some twenty instructions).
__device__ __forceinline__ int small_div(int a, float inv_d) {
  return static_cast<int>((static_cast<float>(a) + 0.5f) * inv_d);
}

// The chunk kernel and the finish launch overlap (programmatic dependent launch, sm_90): at nam56r-small
// the chunk kernel's 8192 blocks run 264 at a time on an H100 (2 an SM), so its last wave holds 8 blocks
// and leaves the other SMs idle for a whole block's time; the finish launch's blocks run there instead.
// Every chunk block lets the finish grid launch when it starts (the finish grid launches once every
// chunk block has started, so a waiting finish block never keeps a chunk block off the GPU), and counts
// itself done per (b, h) when its writes are visible device-wide; a finish block waits for its (b, h)'s
// count, then reads the chunk kernel's outputs past L1 (__ldcg: L1 is not coherent, and an earlier
// finish block on the SM may have brought in a line of r or dD_part before this (b, h) wrote its part).
// Without the overlap (a launch that ignores the attribute), the counts are complete before the finish
// grid starts: the same results.
__device__ __forceinline__ void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void signal_chunk_done(const Params& p) {
  __threadfence();  // this thread's writes, device-wide, before the count says so
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(p.chunks_done + static_cast<int64_t>(blockIdx.z) * p.H + blockIdx.y, 1);
}
__device__ __forceinline__ void wait_for_chunks(const Params& p, int64_t bh) {
  const int* count = p.chunks_done + bh;
  int done;
  while (true) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(done) : "l"(count) : "memory");
    if (done >= p.nC) break;
    __nanosleep(500);
  }
}

// r_t over each 32-row half of chunk c (rows 0-31, 32-63; a half past the chunk's rows sums to 0), in
// fp64 by a fixed butterfly: the finish launch walks a chunk's rows from its own halves' and the later
// chunks' sums, so the reverse scan over T needs no sequential pass. Every thread of the chunk kernel
// calls it with its row's r_t (thread t has row t; 0 for threads past the rows).
constexpr int kRowHalves = kMaxChunk / 32;
static_assert(kThreads >= 32 * kRowHalves, "a thread per row of the chunk");
__device__ __forceinline__ void store_r_half_sums(const Params& p, int64_t bh, int c, float r_t) {
  const int half = threadIdx.x / 32;
  if (half >= kRowHalves) return;  // warp-uniform
  const double sum = warp_sum(static_cast<double>(r_t));
  if ((threadIdx.x & 31) == 0) p.r_half_sums[(bh * p.nC + c) * kRowHalves + half] = sum;
}

// The backward chunk on tensor cores: the SIMT path's phases (see ablate_ssm_scan_bwd_chunk) with every
// product on mma tiles and the column-0 position (x_prev / k_prev or the previous chunk's last) in fp32
// beside them. Phase A: scores and dgamma / dbeta's intra sums (and the column-0 gradients' intra parts,
// on the warps with one tile fewer); B: yscan (dz, r_t) and dq; C: the column-0 gradients' state parts
// (every thread), then dk, dx and e_j. Epilogues work per accumulator pair (adjacent columns: paired
// reads and writes) with what depends on the row only read once per row; phase B's reads of dout and z
// are issued before its products.
template <typename TQK>
__device__ __forceinline__ void bwd_chunk_tc(const Params& p, float* smem) {
  const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
  const int t0 = c * L, ldP = ld_tc(P), ldN = ld_tc(N), ldL = ld_tc(L);
  Carve carve{reinterpret_cast<char*>(smem)};
  const BwdChunkTc s(carve, L, P, N);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const bool last = c == p.nC - 1;
  const int rows = min(L, p.T - t0);  // real rows of this chunk
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32, lane = threadIdx.x & 31, nL = L / 16;
  const int g = lane >> 2, tq = lane & 3;  // accumulator rows g, g + 8; columns 2 tq + {0, 1} (+ 8)
  const bf16* dS = p.dstates_lo + (bh * p.nC + c) * P * N;  // adjoint at the end of this chunk

  load_chunk_tiles<TQK>(p, s, b, h, c);
  for (int i = threadIdx.x; i < L / 16 * L; i += blockDim.x) s.dgp[i] = s.dbp[i] = 0.f;  // tiles above the diagonal
  load_coefficients(p, b, h, t0, s.cum, s.bet, s.gam);  // ends with a barrier
  for (int j = threadIdx.x; j <= L; j += blockDim.x) s.wend[j] = weight(s.cum, s.bet, s.gam, L, L - 1, j);
  // dy (rounded into its tile; its fp32 dots with x_0 and x_t here) and column 0 of both score matrices.
  bwd_dy_column0(p, s, b, h, t0, ldP, ldN);
  __syncthreads();

  // Phase A: per lower tile, sc = q_t . k_j and dxm = dy_t . x_j (columns j = 1..L at j - 1) in fp32
  // registers: the intra-chunk dgamma_s = sum_t exp(cum_t - cum_s) sc dxm at column s + 1 and dbeta_s at
  // column s (their column sums per tile), then W o sc and W o dxm rounded into the bf16 tiles. The
  // tasks after the tiles: the intra-chunk parts of column 0's gradients, gk0[n] = sum_t dxm_t0 q_t[n]
  // and gx0[col] = sum_t sc_t0 dy_t[col] (32 outputs a task).
  const int nA = nL * (nL + 1) / 2, nk = (N + 31) / 32, nx = (P + 31) / 32;
  for (int task = warp; task < nA + nk + nx; task += warps) {
    if (task < nA) {
      int bi, bj;
      lower_tile(task, bi, bj);
      const int i0 = 16 * bi, j0 = 16 * bj;
      float sc[2][4] = {}, dm[2][4] = {}, cg[2][2] = {}, cb[2][2] = {};
      mma_block(sc, {s.qs, ldN, true}, {s.ka + ldN, ldN, true}, i0, j0, 0, N);
      mma_block(dm, {s.dys, ldP, true}, {s.xa + ldP, ldP, true}, i0, j0, 0, P);
      // Element (t, j) (accumulator e = 2 half + u of tile nt: t = i0 + g + 8 half, j = jb + u): position j
      // of the chunk, column j + 1. dd[k] = exp(cum_t - cum_{jb+k}) for jb + k <= t (0 otherwise): the
      // decays of this pair's columns j and j + 1 (k = u and u + 1), each exponent once.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = i0 + g + 8 * half;
        const float cum_t = s.cum[t];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int jb = j0 + 8 * nt + 2 * tq;
          float dd[3];
#pragma unroll
          for (int k = 0; k < 3; ++k) dd[k] = jb + k <= t ? exp_of<true>(cum_t - s.cum[jb + k]) : 0.f;
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int j = jb + u, e = 2 * half + u;
            const float prod = sc[nt][e] * dm[nt][e];
            if (t >= j) cg[nt][u] += dd[u] * prod;
            if (t > j) cb[nt][u] += dd[u + 1] * prod;
            float w = 0.f;  // W_{t, j+1}, as weight()
            if (j <= t) w += dd[u] * s.gam[j];
            if (j + 1 <= L - 1 && j + 1 <= t) w += dd[u + 1] * s.bet[j + 1];
            sc[nt][e] *= w;
            dm[nt][e] *= w;
          }
          *reinterpret_cast<uint32_t*>(s.scw + t * ldL + jb) = pack_bf16(sc[nt][2 * half], sc[nt][2 * half + 1]);
          *reinterpret_cast<uint32_t*>(s.dxw + t * ldL + jb) = pack_bf16(dm[nt][2 * half], dm[nt][2 * half + 1]);
        }
      }
      store_column_sums(cg, s.dgp + bi * L, j0, L);
      store_column_sums(cb, s.dbp + bi * L + 1, j0, L - 1);  // dbeta_{j+1}: none for j = L-1 (t > L-1)
    } else if (task < nA + nk) {
      const int n = 32 * (task - nA) + lane;
      if (n < N) {
        float v = 0.f;
#pragma unroll 8
        for (int t = 0; t < L; ++t) v = fmaf(s.dx0[t], __bfloat162float(s.qs[t * ldN + n]), v);
        s.gk0[n] = v;
      }
    } else {
      const int col = 32 * (task - nA - nk) + lane;
      if (col < P) {
        float v = 0.f;
#pragma unroll 8
        for (int t = 0; t < L; ++t) v = fmaf(s.sc0[t], __bfloat162float(s.dys[t * ldP + col]), v);
        s.gx0[col] = v;
      }
    }
  }
  __syncthreads();

  // Phase B: yscan_t = sum_j W_tj (q_t.k_j) x_j + exp(cum_t) S_c q_t (recomputed) -> dz, r1_t = dy_t .
  // yscan_t; dq_t = sum_j W_tj (dy_t.x_j) k_j + exp(cum_t) S_c^T dy_t. The adjoint dS is pulled into L2
  // meanwhile. dy for dz and r_t is recomputed in fp32 from dout and z (the tile holds it rounded).
  prefetch_l2(reinterpret_cast<const float*>(dS), P * N / 2);  // bf16: P N / 2 floats' bytes
  const float Dh = p.D[h];
  const bf16* z = static_cast<const bf16*>(p.z);
  bf16* dz = static_cast<bf16*>(p.dz);
  const bf16* dout = static_cast<const bf16*>(p.dout);
  // Paired (4-byte dout, z, dz) accesses when the pointers allow (every row offset is even).
  const bool paired = reinterpret_cast<uintptr_t>(dout) % 4 == 0 && reinterpret_cast<uintptr_t>(z) % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(dz) % 4 == 0;
  const int tP = P / 16, tN = N / 16;
  const float inv_tP = 1.f / tP, inv_tN = 1.f / tN;
  for (int task = warp; task < nL * (tP + tN); task += warps) {
    if (task < nL * tP) {
      const int bi = small_div(task, inv_tP), i0 = 16 * bi, j0 = 16 * (task - bi * tP);
      // This lane's dout and z pairs (rows i0 + g + 8 half, columns j0 + 8 nt + 2 tq + {0, 1}), read first.
      float2 dv[2][2];
      uint32_t zw[2][2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = i0 + g + 8 * half;
        const int64_t o = t < rows ? row_index(p, b, t0 + t, h) * P : 0;
        const int64_t zo = t < rows && z ? z_index(p, b, t0 + t, h, 0) : 0;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = j0 + 8 * nt + 2 * tq;
          dv[half][nt] = make_float2(0.f, 0.f);
          zw[half][nt] = 0u;
          if (t < rows) load_dout_z_pair(dout, o + col, z, zo + col, paired, dv[half][nt], zw[half][nt]);
        }
      }
      float intra[2][4] = {}, inter[2][4] = {}, rs[2] = {};
      mma_block(intra, {s.scw, ldL, true}, {s.xa + ldP, ldP, false}, i0, j0, 0, i0 + 16);
      mma_block(inter, {s.qs, ldN, true}, {s.state, ldN, true}, i0, j0, 0, N);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = i0 + g + 8 * half;
        if (t >= rows) continue;
        const float sc0_t = s.sc0[t], decay_in = exp_of<true>(s.cum[t]);
        const int64_t o = row_index(p, b, t0 + t, h) * P;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = j0 + 8 * nt + 2 * tq;
          const float2 x0 = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.xa + col));
          const float2 xt = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.xa + (t + 1) * ldP + col));
          const float2 zf = unpack_bf16(zw[half][nt]);
          const float x0v[2] = {x0.x, x0.y}, xtv[2] = {xt.x, xt.y}, zv[2] = {zf.x, zf.y};
          const float dov[2] = {dv[half][nt].x, dv[half][nt].y};
          float dzv[2];
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int e = 2 * half + u;
            const float yscan = intra[nt][e] + sc0_t * x0v[u] + decay_in * inter[nt][e];
            float dy = dov[u];
            if (z) {
              const float sg = sigmoid_tc(zv[u]);
              const float y = yscan + Dh * xtv[u];
              dzv[u] = dy * y * sg * (1.f + zv[u] * (1.f - sg));
              dy *= zv[u] * sg;
            }
            rs[half] += yscan * dy;
          }
          if (z) {
            if (paired) {
              *reinterpret_cast<__nv_bfloat162*>(dz + o + col) = __floats2bfloat162_rn(dzv[0], dzv[1]);
            } else {
              dz[o + col] = __float2bfloat16_rn(dzv[0]);
              dz[o + col + 1] = __float2bfloat16_rn(dzv[1]);
            }
          }
        }
      }
      store_row_sums(rs, s.r1p + (j0 / 16) * L, i0);
    } else {
      const int tk = task - nL * tP, bi = small_div(tk, inv_tN), i0 = 16 * bi, j0 = 16 * (tk - bi * tN);
      float intra[2][4] = {}, inter[2][4] = {};
      mma_block(intra, {s.dxw, ldL, true}, {s.ka + ldN, ldN, false}, i0, j0, 0, i0 + 16);
      mma_block(inter, {s.dys, ldP, true}, {s.state, ldN, false}, i0, j0, 0, P);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = i0 + g + 8 * half;
        if (t >= rows) continue;
        const float dx0_t = s.dx0[t], decay_in = exp_of<true>(s.cum[t]);
        TQK* dq = static_cast<TQK*>(p.dq) + row_index(p, b, t0 + t, h) * N;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int n = j0 + 8 * nt + 2 * tq, e = 2 * half;
          const float2 k0 = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.ka + n));
          store_pair(dq + n, intra[nt][e] + dx0_t * k0.x + decay_in * inter[nt][e],
                     intra[nt][e + 1] + dx0_t * k0.y + decay_in * inter[nt][e + 1]);
        }
      }
    }
  }
  __syncthreads();
  load_matrix_bf16(s.state, ldN, P, N, dS);
  cp_async_wait_all();
  __syncthreads();

  // Phase C, column 0 (j = 0: gprev_*), every thread: gprev_k[n] = gk0[n] + wend_0 (x_0^T dS)[n] (a thread
  // per key), e_0 = (x_0^T dS) . k_0 (per warp of 32 keys), gprev_x[col] = gx0[col] + wend_0 (dS k_0)[col]
  // (two threads per input, one per half of the keys, added by the first).
  for (int base = 0; base < N + 2 * P; base += blockDim.x) {  // uniform trip count: shuffles below
    const int i = base + threadIdx.x;
    float e_part = 0.f, xs = 0.f;
    if (i < N) {
      const int n = i;
      float state = 0.f;
#pragma unroll 8
      for (int col = 0; col < P; ++col)
        state = fmaf(__bfloat162float(s.xa[col]), __bfloat162float(s.state[col * ldN + n]), state);
      p.gprev_k[(bh * p.nC + c) * N + n] = s.gk0[n] + s.wend[0] * state;
      e_part = state * __bfloat162float(s.ka[n]);
    } else if (i < N + 2 * P) {
      const int col = (i - N) >> 1, n_begin = ((i - N) & 1) * (N / 2);
      for (int n = n_begin; n < n_begin + N / 2; n += 8) {  // 16-byte reads of the state row and of k_0
        const uint4 sv = *reinterpret_cast<const uint4*>(s.state + col * ldN + n);
        const uint4 kv = *reinterpret_cast<const uint4*>(s.ka + n);
        const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w}, kw[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float2 a = unpack_bf16(sw[u]), k2 = unpack_bf16(kw[u]);
          xs = fmaf(a.x, k2.x, fmaf(a.y, k2.y, xs));
        }
      }
    }
    xs += __shfl_xor_sync(0xffffffffu, xs, 1);  // the other half of the keys (thread i ^ 1: N, base even)
    if (i >= N && i < N + 2 * P && ((i - N) & 1) == 0) {
      const int col = (i - N) >> 1;
      p.gprev_x[(bh * p.nC + c) * P + col] = s.gx0[col] + s.wend[0] * xs;
    }
    e_part = warp_sum(e_part);
    if (lane == 0 && base + 32 * warp < N) s.e0p[(base + 32 * warp) / 32] = e_part;
  }

  // Phase C: dk_j = sum_t W_tj (dy_t.x_j) q_t + wend_j dS^T x_j, e_j = x_j^T dS k_j; dx_j = sum_t W_tj
  // (q_t.k_j) dy_t + wend_j dS k_j (+ D dy for the chunk's own rows). Rows j = 1..L are positions t0 + j - 1
  // (tile row i = j - 1).
  for (int task = warp; task < nL * (tN + tP); task += warps) {
    if (task < nL * tN) {
      const int bi = small_div(task, inv_tN), i0 = 16 * bi, j0 = 16 * (task - bi * tN);
      float intra[2][4] = {}, state[2][4] = {}, rs[2] = {};
      // A(i, t) = dxw[t][i] (t-major, .trans), nonzero for t >= i: k from the diagonal block on.
      mma_block(intra, {s.dxw, ldL, false}, {s.qs, ldN, false}, i0, j0, i0, L);
      mma_block(state, {s.xa + ldP, ldP, true}, {s.state, ldN, false}, i0, j0, 0, P);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = i0 + g + 8 * half, e = 2 * half;
        const float we = s.wend[i + 1];
        const bf16* k_row = s.ka + (i + 1) * ldN;
        const bool own = i < rows, to_last = i == L - 1 && !last;
        TQK* dk = static_cast<TQK*>(p.dk) + row_index(p, b, t0 + min(i, rows - 1), h) * N;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int n = j0 + 8 * nt + 2 * tq;
          const float2 kv = unpack_bf16(*reinterpret_cast<const uint32_t*>(k_row + n));
          rs[half] += state[nt][e] * kv.x;  // e_{i+1}'s terms (row sums)
          rs[half] += state[nt][e + 1] * kv.y;
          if (!own) continue;
          const float v0 = intra[nt][e] + we * state[nt][e], v1 = intra[nt][e + 1] + we * state[nt][e + 1];
          if (to_last)
            p.last_k[(bh * p.nC + c) * N + n] = v0, p.last_k[(bh * p.nC + c) * N + n + 1] = v1;
          else
            store_pair(dk + n, v0, v1);
        }
      }
      store_row_sums(rs, s.ep + (j0 / 16) * L, i0);
    } else {
      const int tk = task - nL * tN, bi = small_div(tk, inv_tP), i0 = 16 * bi, j0 = 16 * (tk - bi * tP);
      float intra[2][4] = {}, state[2][4] = {};
      mma_block(intra, {s.scw, ldL, false}, {s.dys, ldP, false}, i0, j0, i0, L);
      mma_block(state, {s.ka + ldN, ldN, true}, {s.state, ldN, true}, i0, j0, 0, N);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = i0 + g + 8 * half, e = 2 * half;
        if (i >= rows) continue;
        const float we = s.wend[i + 1];
        const bool to_last = i == L - 1 && !last;
        bf16* dx = static_cast<bf16*>(p.dx) + row_index(p, b, t0 + i, h) * P;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = j0 + 8 * nt + 2 * tq;
          const float2 dyv = unpack_bf16(*reinterpret_cast<const uint32_t*>(s.dys + i * ldP + col));
          const float v0 = intra[nt][e] + we * state[nt][e] + Dh * dyv.x;
          const float v1 = intra[nt][e + 1] + we * state[nt][e + 1] + Dh * dyv.y;
          if (to_last)
            p.last_x[(bh * p.nC + c) * P + col] = v0, p.last_x[(bh * p.nC + c) * P + col + 1] = v1;
          else
            store_pair(dx + col, v0, v1);
        }
      }
    }
  }
  __syncthreads();

  // State parts of dgamma / dbeta, and r_t for d log alpha, from the partial sums in a fixed order: a
  // thread per row (L <= 64 rows, kThreads threads).
  float r_t = 0.f;
  if (const int t = threadIdx.x; t < rows) {
    float dg = 0.f, db = 0.f, e_t = 0.f, e_next = 0.f, r1 = 0.f;
    for (int bi = 0; bi < nL; ++bi) dg += s.dgp[bi * L + t], db += s.dbp[bi * L + t];
    if (t == 0) {
      db = 0.f;
      for (int u = 0; u < L; ++u) db += s.db0p[u];
      for (int u = 0; u < nk; ++u) e_t += s.e0p[u];
    } else {
      for (int u = 0; u < tN; ++u) e_t += s.ep[u * L + t - 1];
    }
    for (int u = 0; u < tN; ++u) e_next += s.ep[u * L + t];
    for (int u = 0; u < tP; ++u) r1 += s.r1p[u * L + t];
    const float d = decay(s.cum, L - 1, t);
    const float g = fmaf(d, e_next, dg), be = fmaf(d, e_t, db);
    const int64_t i = row_index(p, b, t0 + t, h);
    p.dgamma[i] = g;
    p.dbeta[i] = be;
    r_t = r1 - s.bet[t] * be - s.gam[t] * g;
    p.r[i] = r_t;
  }
  store_r_half_sums(p, bh, c, r_t);
  if (warp == 0) {  // dD partial: sum over the chunk's rows of dy_t . x_t (0 past the end)
    float v = 0.f;
    for (int t = lane; t < L; t += 32) v += s.drow[t];
    v = warp_sum(v);
    if (lane == 0) p.dD_part[bh * p.nC + c] = v;
  }
}

template <typename TX, typename TQK>
__global__ void __launch_bounds__(kThreads, kMinBlocks<TX, TQK>) ablate_ssm_scan_bwd_chunk(Params p) {
  extern __shared__ float smem[];
  allow_dependent_launch();
  if constexpr (kTensorCores<TX, TQK>) {
    bwd_chunk_tc<TQK>(p, smem);
  } else {
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, L = p.L, P = p.P, N = p.N;
    const int t0 = c * L, ldP = ld_of(P), ldN = ld_of(N), ldS = ld_of(L);
    float *cum = smem, *bet = cum + L, *gam = bet + L, *wend = gam + L;
    float *r1 = wend + (L + 1), *dg = r1 + L, *db = dg + L, *ecol = db + L, *dsum = ecol + (L + 1);
    float *qs = dsum + 1, *ka = qs + L * ldN, *xa = ka + (L + 1) * ldN, *dys = xa + (L + 1) * ldP;
    float *sc = dys + L * ldP, *dxm = sc + L * ldS, *big = dxm + L * ldS;
    const int64_t bh = static_cast<int64_t>(b) * p.H + h;
    const bool first = c == 0, last = c == p.nC - 1;
    const int rows = min(L, p.T - t0);  // real rows of this chunk

    load_rows(qs, ldN, N, static_cast<const TQK*>(p.q), packed(p, N), p, b, h, t0, L, nullptr);
    load_rows(ka, ldN, N, static_cast<const TQK*>(p.k), packed(p, N), p, b, h, t0 - 1, L + 1,
              first && p.k_prev ? p.k_prev + bh * N : nullptr);
    load_rows(xa, ldP, P, static_cast<const TX*>(p.x), p.xs, p, b, h, t0 - 1, L + 1,
              first && p.x_prev ? p.x_prev + bh * P : nullptr);
    load_dy<TX>(dys, ldP, p, b, h, t0, nullptr);
    for (int t = threadIdx.x; t < L; t += blockDim.x) r1[t] = 0.f;
    if (threadIdx.x == 0) *dsum = 0.f;
    load_coefficients(p, b, h, t0, cum, bet, gam);  // ends with a barrier
    for (int j = threadIdx.x; j <= L; j += blockDim.x) {
      wend[j] = weight(cum, bet, gam, L, L - 1, j);
      ecol[j] = 0.f;
    }

    // Phase A: scores sc = q.k_j and dxm = dy.x_j over columns j = 0..L (column 0 per row).
    block_gemm(L, L, N, qs, ldN, 1, ka + ldN, 1, ldN, [&](int t, int j, float v) { sc[t * ldS + j + 1] = v; });
    block_gemm(L, L, P, dys, ldP, 1, xa + ldP, 1, ldP, [&](int t, int j, float v) { dxm[t * ldS + j + 1] = v; });
    // Column 0 and the sums below: a warp per row, lanes across the row (a thread per row would leave
    // most of the block idle on a serial chain).
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, warps = blockDim.x / 32;
    for (int t = warp; t < L; t += warps) {
      float v = 0.f, w = 0.f;
      for (int n = lane; n < N; n += 32) v = fmaf(qs[t * ldN + n], ka[n], v);
      for (int col = lane; col < P; col += 32) w = fmaf(dys[t * ldP + col], xa[col], w);
      v = warp_sum(v);
      w = warp_sum(w);
      if (lane == 0) sc[t * ldS] = v, dxm[t * ldS] = w;
    }
    __syncthreads();
    // Intra-chunk parts of dgamma_s and dbeta_s: sum_t exp(cum_t - cum_s) sc dxm at columns s+1 and s.
    for (int s = warp; s < L; s += warps) {
      float g = 0.f, be = 0.f;
      for (int t = s + lane; t < L; t += 32) {
        const float d = decay(cum, t, s);
        g = fmaf(d, sc[t * ldS + s + 1] * dxm[t * ldS + s + 1], g);
        be = fmaf(d, sc[t * ldS + s] * dxm[t * ldS + s], be);
      }
      g = warp_sum(g);
      be = warp_sum(be);
      if (lane == 0) dg[s] = g, db[s] = be;
    }
    __syncthreads();
    // Weighted: sc <- W o sc, dxm <- W o dxm (0 above the diagonal).
    for (int i = threadIdx.x; i < L * (L + 1); i += blockDim.x) {
      const int t = i / (L + 1), j = i - t * (L + 1);
      const float w = weight(cum, bet, gam, L, t, j);
      sc[t * ldS + j] *= w;
      dxm[t * ldS + j] *= w;
    }
    const float* S = p.states + (bh * p.nC + c) * P * N;
    load_matrix(big, ldN, P, N, S);
    __syncthreads();

    // Phase B: yscan_t = sum_j sc_tj x_j + exp(cum_t) S_c q_t (recomputed) -> dz, r1_t = dy_t . yscan_t;
    // dq_t = sum_j dxm_tj k_j + exp(cum_t) S_c^T dy_t.
    const float Dh = p.D[h];
    const TX* z = static_cast<const TX*>(p.z);
    block_gemm2(L, P, L + 1, sc, ldS, 1, xa, ldP, 1, N, qs, ldN, 1, big, 1, ldN,
                [&](int t, int col, float intra, float inter) {
                  if (t >= rows) return 0.f;
                  const float yscan = intra + expf(cum[t]) * inter;
                  if (z) {
                    const int64_t o = row_index(p, b, t0 + t, h) * P + col;
                    const float zv = to_float(z[z_index(p, b, t0 + t, h, col)]), sg = sigmoid(zv);
                    const float y = yscan + Dh * xa[(t + 1) * ldP + col];
                    const float dov = to_float(static_cast<const TX*>(p.dout)[o]);
                    static_cast<TX*>(p.dz)[o] = from_float<TX>(dov * y * sg * (1.f + zv * (1.f - sg)));
                  }
                  return yscan * dys[t * ldP + col];  // r1_t = dy_t . yscan_t
                },
                r1);
    block_gemm2(L, N, L + 1, dxm, ldS, 1, ka, ldN, 1, P, dys, ldP, 1, big, ldN, 1,
                [&](int t, int n, float intra, float inter) {
                  if (t >= rows) return;
                  static_cast<TQK*>(p.dq)[row_index(p, b, t0 + t, h) * N + n] =
                      from_float<TQK>(intra + expf(cum[t]) * inter);
                });
    {  // dD partial: sum over real rows of dy . x
      float v = 0.f;
      for (int i = threadIdx.x; i < rows * P; i += blockDim.x) {
        const int t = i / P, col = i - t * P;
        v = fmaf(dys[t * ldP + col], xa[(t + 1) * ldP + col], v);
      }
      v = warp_sum(v);
      if ((threadIdx.x & 31) == 0) atomicAdd(dsum, v);
    }
    __syncthreads();
    const float* dS = p.dstates + (bh * p.nC + c) * P * N;  // adjoint at the end of this chunk
    load_matrix(big, ldN, P, N, dS);
    __syncthreads();

    // Phase C: dk_j = sum_t dxm_tj q_t + wend_j dS^T x_j, e_j = x_j^T dS k_j;
    //          dx_j = sum_t sc_tj dy_t + wend_j dS k_j (+ D dy for the chunk's own rows).
    // Rows j = 1..L are positions t0 + j - 1; row 0 (column 0) goes to gprev_*.
    block_gemm2(L, N, L, dxm + 1, 1, ldS, qs, ldN, 1, P, xa + ldP, ldP, 1, big, ldN, 1,
                [&](int i, int n, float intra, float state) {
                  const int j = i + 1;
                  const float e_part = state * ka[j * ldN + n];  // e_j = sum_n of these (row sums into ecol + 1)
                  if (i >= rows) return e_part;
                  const float v = intra + wend[j] * state;
                  if (i == L - 1 && !last)
                    p.last_k[(bh * p.nC + c) * N + n] = v;
                  else
                    static_cast<TQK*>(p.dk)[row_index(p, b, t0 + i, h) * N + n] = from_float<TQK>(v);
                  return e_part;
                },
                ecol + 1);
    block_gemm2(L, P, L, sc + 1, 1, ldS, dys, ldP, 1, N, ka + ldN, ldN, 1, big, 1, ldN,
                [&](int i, int col, float intra, float state) {
                  if (i >= rows) return;
                  const float v = intra + wend[i + 1] * state + Dh * dys[i * ldP + col];
                  if (i == L - 1 && !last)
                    p.last_x[(bh * p.nC + c) * P + col] = v;
                  else
                    static_cast<TX*>(p.dx)[row_index(p, b, t0 + i, h) * P + col] = from_float<TX>(v);
                });
    // Column 0: the previous position's key and input.
    // (k entries on threads 0..N-1, x entries on the next P threads: both chains at once.)
    // e_0's terms are summed per warp first (all N threads on one address would serialise).
    for (int base = 0; base < N + P; base += blockDim.x) {  // uniform trip count: warp_sum below
      const int i = base + threadIdx.x;
      float intra = 0.f, state = 0.f, e_part = 0.f;
      if (i < N) {
        const int n = i;
        for (int t = 0; t < L; ++t) intra = fmaf(dxm[t * ldS], qs[t * ldN + n], intra);
        for (int col = 0; col < P; ++col) state = fmaf(xa[col], big[col * ldN + n], state);
        p.gprev_k[(bh * p.nC + c) * N + n] = intra + wend[0] * state;
        e_part = state * ka[n];
      } else if (i < N + P) {
        const int col = i - N;
        for (int t = 0; t < L; ++t) intra = fmaf(sc[t * ldS], dys[t * ldP + col], intra);
        for (int n = 0; n < N; ++n) state = fmaf(ka[n], big[col * ldN + n], state);
        p.gprev_x[(bh * p.nC + c) * P + col] = intra + wend[0] * state;
      }
      e_part = warp_sum(e_part);
      if ((threadIdx.x & 31) == 0 && base + (threadIdx.x & ~31) < N) atomicAdd(&ecol[0], e_part);
    }
    __syncthreads();
    // State parts of dgamma / dbeta, and r_t for d log alpha: a thread per row.
    float r_t = 0.f;
    if (const int s = threadIdx.x; s < rows) {
      const float d = decay(cum, L - 1, s);
      const float g = fmaf(d, ecol[s + 1], dg[s]), be = fmaf(d, ecol[s], db[s]);
      const int64_t i = row_index(p, b, t0 + s, h);
      p.dgamma[i] = g;
      p.dbeta[i] = be;
      r_t = r1[s] - bet[s] * be - gam[s] * g;
      p.r[i] = r_t;
    }
    store_r_half_sums(p, bh, c, r_t);
    if (threadIdx.x == 0) p.dD_part[bh * p.nC + c] = *dsum;
  }
  signal_chunk_done(p);
}

// The backward's last launch, after the chunk kernel (overlapping its last wave: see
// allow_dependent_launch): what needs other chunks' results, in one grid of kFinishThreads-thread
// blocks: a block per chunk (b, h, c) for its rows' d log alpha and its boundary rows, then dD's sums (a
// warp per head; last, as they wait for every b). (As three launches, d log alpha's walk over T, the
// boundary rows and torch's sum for dD took 24 + 10 + 5 us at nam56r-small on the H100; as one grid
// with a warp walking each (b, h)'s whole sequence, 27.7 us, the walks' latency chains the long pole.)
constexpr int kFinishThreads = 32 * kRowHalves;
__host__ __device__ inline int finish_sum_blocks(int H) { return (H * 32 + kFinishThreads - 1) / kFinishThreads; }
inline int64_t finish_blocks(int64_t B, int64_t H, int64_t nC) { return B * H * nC + finish_sum_blocks(static_cast<int>(H)); }

// d log alpha_t = sum_{t' >= t} r_t' per (b, h), in fp64, starting from <dh_last, h_last> (h_last is an
// output at T-1); 0 where log alpha was floored (the reference's clamp passes no gradient there). Warp
// `half` of chunk c's block takes the half's rows, a lane each: its start is the dot plus every later
// half's sum (the chunk kernel's r_half_sums: the later chunks' and, for half 0, its own chunk's half
// 1), lane l adding terms l, l + 32, ... and the butterfly the lanes (a fixed order: deterministic);
// then a suffix sum across the lanes. Every load is independent of the others: a chunk costs one load
// latency, where one warp walking a whole (b, h) sequence waited T / 256 of them.
__device__ __forceinline__ void dlog_alpha_rows(const Params& p, int b, int h, int c) {
  const int half = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int row = 32 * half + lane, rows = min(p.L, p.T - c * p.L);
  if (32 * half >= rows) return;  // warp-uniform: a half past the chunk's rows (L 48, or a short last chunk)
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int64_t i = row_index(p, b, c * p.L + min(row, rows - 1), h);
  const float r = row < rows ? __ldcg(p.r + i) : 0.f, log_alpha = p.log_alpha[i];
  double start = 0.0;
  const double* half_sums = p.r_half_sums + bh * p.nC * kRowHalves;
  for (int k = c * kRowHalves + half + 1 + lane; k < p.nC * kRowHalves; k += 32) start += __ldcg(half_sums + k);
  if (p.last_dot)
    for (int part = lane; part < p.dot_parts; part += 32) start += p.last_dot[bh * p.dot_parts + part];
  start = warp_sum(start);
  double v = r;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {  // suffix sum across the lanes
    const double o = __shfl_down_sync(0xffffffffu, v, off);
    if (lane + off < 32) v += o;
  }
  if (row < rows) p.dlog_alpha[i] = log_alpha < kLogAlphaFloor ? 0.f : static_cast<float>(v + start);
}

// dD[h] = sum over (b, c) of the chunk kernel's dD_part, a warp per head, each lane a fixed set of
// partial sums, then the butterfly: a fixed order (deterministic).
__device__ __forceinline__ void dD_sum(const Params& p, int block) {
  const int h = (block * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x & 31;
  if (h >= p.H) return;
  float v = 0.f;
  for (int i = lane; i < p.B * p.nC; i += 32) {
    const int b = i / p.nC, c = i - b * p.nC;
    v += __ldcg(p.dD_part + (static_cast<int64_t>(b) * p.H + h) * p.nC + c);
  }
  v = warp_sum(v);
  if (lane == 0) p.dD[h] = v;
}

// The last row of chunk c < nC-1: its own gradient plus chunk c+1's column 0, rounded once; chunk 0's
// column 0 is dx_prev / dk_prev.
template <typename TX, typename TQK>
__device__ __forceinline__ void boundary_rows(const Params& p, int b, int h, int c) {
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  if (c + 1 < p.nC) {
    const int t = (c + 1) * p.L - 1;
    for (int col = threadIdx.x; col < p.P; col += blockDim.x)
      static_cast<TX*>(p.dx)[row_index(p, b, t, h) * p.P + col] =
          from_float<TX>(__ldcg(p.last_x + (bh * p.nC + c) * p.P + col) + __ldcg(p.gprev_x + (bh * p.nC + c + 1) * p.P + col));
    for (int n = threadIdx.x; n < p.N; n += blockDim.x)
      static_cast<TQK*>(p.dk)[row_index(p, b, t, h) * p.N + n] =
          from_float<TQK>(__ldcg(p.last_k + (bh * p.nC + c) * p.N + n) + __ldcg(p.gprev_k + (bh * p.nC + c + 1) * p.N + n));
  }
  if (c == 0 && p.dx_prev) {
    for (int col = threadIdx.x; col < p.P; col += blockDim.x) p.dx_prev[bh * p.P + col] = __ldcg(p.gprev_x + bh * p.nC * p.P + col);
    for (int n = threadIdx.x; n < p.N; n += blockDim.x) p.dk_prev[bh * p.N + n] = __ldcg(p.gprev_k + bh * p.nC * p.N + n);
  }
}

template <typename TX, typename TQK>
__global__ void __launch_bounds__(kFinishThreads) ablate_ssm_scan_bwd_finish(Params p) {
  const int chunks = p.B * p.H * p.nC;
  if (static_cast<int>(blockIdx.x) >= chunks) {  // dD's sums: a warp per head, over every b
    const int first_head = (blockIdx.x - chunks) * (kFinishThreads / 32);
    if (threadIdx.x == 0)
      for (int h = first_head; h < min(first_head + kFinishThreads / 32, p.H); ++h)
        for (int b = 0; b < p.B; ++b) wait_for_chunks(p, static_cast<int64_t>(b) * p.H + h);
    __syncthreads();
    dD_sum(p, blockIdx.x - chunks);
    return;
  }
  const int c = blockIdx.x % p.nC, bh = blockIdx.x / p.nC, h = bh % p.H, b = bh / p.H;  // c fastest
  if (threadIdx.x == 0) wait_for_chunks(p, bh);
  __syncthreads();
  dlog_alpha_rows(p, b, h, c);
  boundary_rows<TX, TQK>(p, b, h, c);
}

// ---- host side ---------------------------------------------------------------------------------

// Raises a kernel's dynamic shared-memory limit to `bytes` and checks that the device allows it.
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what, const Params& p) {
  const size_t limit = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
  TORCH_CHECK(bytes <= limit, "ssm_scan fused_cuda: ", what, " needs ", bytes, " bytes of shared memory at chunk ",
              p.L, ", P ", p.P, ", N ", p.N, "; this device allows ", limit,
              ". Use a smaller chunk (16, 32 or 48) or the reference backend.");
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// Shared-memory bytes of a per-chunk kernel: its tensor-core layout (TcLayout, measured by a Carve from
// address 0) or the SIMT path's simt_floats fp32.
template <typename TX, typename TQK, class TcLayout>
size_t smem_bytes(int64_t L, int64_t P, int64_t N, size_t simt_floats) {
  if constexpr (kTensorCores<TX, TQK>) {
    Carve carve;
    const TcLayout layout(carve, L, P, N);
    (void)layout;
    return carve.used;
  } else {
    return simt_floats * sizeof(float);
  }
}

// One launch of a per-chunk kernel (grid = chunks x heads x batch, kThreads each) with `bytes` of shared memory.
template <class Kernel>
void launch_chunks(Kernel kernel, size_t bytes, const char* what, const Params& p, cudaStream_t stream) {
  allow_smem(kernel, bytes, what, p);
  kernel<<<dim3(p.nC, p.H, p.B), kThreads, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// A launch that may start while the kernel before it on the stream still runs (programmatic dependent
// launch: once every block of that kernel has run griddepcontrol.launch_dependents); the kernel itself
// waits for what it reads (the finish launch: wait_for_chunks). Capturable in a CUDA graph.
template <class Kernel>
void launch_overlapping_previous(Kernel kernel, int64_t blocks, int threads, const Params& p, cudaStream_t stream) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

// The state elements a thread of a SIMT state pass takes (a thread per state element (b, h, p, n) or
// four): 4 (16-byte accesses) when every state pointer it touches is 16-byte aligned (the buffers this
// file allocates are; h0, dh_last come from the caller), else 1.
int state_pass_width(const Params& p) {
  const void* pointers[] = {p.h0, p.h_last, p.states, p.dh_last, p.h_last_saved, p.dstates, p.dh0};
  const bool aligned = std::all_of(std::begin(pointers), std::end(pointers),
                                   [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; });
  return aligned ? 4 : 1;
}

// One launch of a state-passing kernel (forward or reverse).
void launch_state_pass(bool forward, const Params& p, cudaStream_t stream) {
  const int V = state_pass_width(p);
  const bool aligned = V == 4;
  const dim3 grid(ceil_div(int64_t(p.P) * p.N / V, kThreads), p.B * p.H);
  auto* kernel = forward ? (aligned ? ablate_ssm_scan_fwd_state_pass<4> : ablate_ssm_scan_fwd_state_pass<1>)
                         : (aligned ? ablate_ssm_scan_bwd_state_pass<4> : ablate_ssm_scan_bwd_state_pass<1>);
  kernel<<<grid, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One launch of a chunk-state scan (tensor-core path): a block per (slice of kScanRows rows of P, head, batch).
template <class Kernel>
void launch_state_scan(Kernel kernel, bool backward, const char* what, const Params& p, cudaStream_t stream) {
  Carve carve;
  const StateScanTc layout(carve, p.L, std::min<int>(kScanRows, p.P), p.N, backward);
  (void)layout;
  allow_smem(kernel, carve.used, what, p);
  kernel<<<dim3(ceil_div(p.P, kScanRows), p.H, p.B), kThreads, carve.used, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The states at chunk boundaries, forward (S_c) or backward (the adjoints dS_end(c)): one state scan on the
// tensor-core path; per-chunk products then a state pass on the SIMT path.
template <typename TX, typename TQK>
void launch_chunk_states(bool backward, const Params& p, cudaStream_t stream) {
  if constexpr (kTensorCores<TX, TQK>) {
    launch_state_scan(backward ? ablate_ssm_scan_bwd_state_scan<TQK> : ablate_ssm_scan_fwd_state_scan<TQK>, backward,
                      backward ? "the backward state scan" : "the forward state scan", p, stream);
  } else {
    const size_t floats = backward ? chunk_dstate_smem_floats(p.L, p.P, p.N) : chunk_state_smem_floats(p.L, p.P, p.N);
    const char* what = backward ? "the backward chunk-state kernel" : "the forward chunk-state kernel";
    launch_chunks(backward ? ablate_ssm_scan_bwd_chunk_dstate<TX, TQK> : ablate_ssm_scan_fwd_chunk_state<TX, TQK>,
                  floats * sizeof(float), what, p, stream);
    launch_state_pass(/*forward=*/!backward, p, stream);
  }
}

void check_supported(int64_t P, int64_t N, int64_t L) {
  TORCH_CHECK(P % 16 == 0 && P >= 16 && P <= kMaxDim && N % 16 == 0 && N >= 16 && N <= kMaxDim,
              "ssm_scan fused_cuda: head dim P and state N must be multiples of 16 in [16, 128], got P ", P, ", N ", N,
              "; use the reference backend for other shapes");
  TORCH_CHECK(L % 16 == 0 && L >= 16 && L <= kMaxChunk, "ssm_scan fused_cuda: chunk must be 16, 32, 48 or 64, got ", L,
              "; use the reference backend for other chunks");
}

template <class Fn>
void with_io_types(at::ScalarType tx, at::ScalarType tqk, Fn&& fn) {
  with_float_or_bf16(tx, "x", [&](auto xtag) {
    with_float_or_bf16(tqk, "q", [&](auto qtag) { fn(xtag, qtag); });
  });
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// A [B,T,H,P] tensor's batch and token strides (elements); rows_in_place has checked the rest.
RowStrides strides_of(const Tensor& t) { return t.defined() ? RowStrides{t.stride(0), t.stride(1)} : RowStrides{0, 0}; }

// Whether the kernels read a [B,T,H,P] view in place: heads P apart and elements adjacent (rows of H P
// contiguous elements), the pointer 16-byte aligned and the batch and token strides multiples of 8
// elements, so each access of a contiguous tensor's width stays aligned (RowStrides). The M block's x
// and z (slices of its input projection) qualify; anything else is copied once.
bool rows_in_place(const Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) == t.size(3) && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 &&
         t.stride(1) % 8 == 0 && t.stride(0) % 8 == 0;
}

// Params with the inputs and sizes filled in: in = {x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}.
Params input_params(const std::vector<Tensor>& in, int64_t L) {
  const Tensor &x = in[0], &q = in[1], &z = in[7];
  Params p{};
  p.x = x.data_ptr(), p.z = z.defined() ? z.data_ptr() : nullptr, p.q = q.data_ptr(), p.k = in[2].data_ptr();
  p.log_alpha = in[3].data_ptr<float>(), p.beta = in[4].data_ptr<float>(), p.gamma = in[5].data_ptr<float>();
  p.D = in[6].data_ptr<float>(), p.h0 = ptr_or_null(in[8]), p.x_prev = ptr_or_null(in[9]), p.k_prev = ptr_or_null(in[10]);
  p.B = x.size(0), p.T = x.size(1), p.H = x.size(2), p.P = x.size(3), p.N = q.size(3), p.L = L;
  p.xs = strides_of(x), p.zs = strides_of(z);
  p.nC = (p.T + L - 1) / L;
  return p;
}

class SsmScanFunction : public torch::autograd::Function<SsmScanFunction> {
 public:
  // Inputs already converted (by ssm_scan below): x, z one dtype; q, k one dtype; the rest fp32.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& q, const Tensor& k, const Tensor& log_alpha,
                                                const Tensor& beta, const Tensor& gamma, const Tensor& D,
                                                const Tensor& z_in, const Tensor& h0_in, const Tensor& x_prev_in,
                                                const Tensor& k_prev_in, int64_t chunk, bool has_z, bool has_h0,
                                                bool has_prev) {
    const Tensor z = has_z ? z_in : Tensor(), h0 = has_h0 ? h0_in : Tensor();
    const Tensor x_prev = has_prev ? x_prev_in : Tensor(), k_prev = has_prev ? k_prev_in : Tensor();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = q.size(3);
    const int64_t L = chunk, nC = (T + L - 1) / L;
    // An output without a gradient reaches the backward undefined, not as zeros: the model never uses
    // h_last, and autograd would otherwise fill a [B,H,P,N] fp32 zero gradient for it on every call.
    ctx->set_materialize_grads(false);
    const auto f32 = x.options().dtype(torch::kFloat);
    Tensor y = torch::empty({B, T, H, P}, x.options());  // in x's dtype, as the contract says
    Tensor h_last = torch::empty({B, H, P, N}, f32);
    // The tensor-core path keeps S_c in bf16 (Params::states_lo), written by the state scan; the SIMT path
    // carries Z_c, then S_c, in the fp32 buffer.
    const bool tensor_cores = x.scalar_type() == torch::kBFloat16;
    // Lam_c (the chunks' summed log alpha) only for the SIMT path's state passes: the state scans form it.
    Tensor states = tensor_cores ? Tensor() : torch::empty({B, H, nC, P, N}, f32);
    Tensor lam = tensor_cores ? Tensor() : torch::empty({B, H, nC}, f32);
    Tensor states_lo = tensor_cores ? torch::empty({B, H, nC, P, N}, x.options()) : Tensor();
    if (T == 0) {
      h_last = h0.defined() ? h0.clone() : torch::zeros({B, H, P, N}, f32);
    } else {
      Params p = input_params({x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}, L);
      p.states = tensor_cores ? nullptr : states.data_ptr<float>(), p.lam = const_cast<float*>(ptr_or_null(lam));
      p.states_lo = tensor_cores ? static_cast<bf16*>(states_lo.data_ptr()) : nullptr;
      p.y = y.data_ptr(), p.h_last = h_last.data_ptr<float>();
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_io_types(x.scalar_type(), q.scalar_type(), [&](auto xtag, auto qtag) {
        using TX = typename decltype(xtag)::type;
        using TQK = typename decltype(qtag)::type;
        launch_chunk_states<TX, TQK>(/*backward=*/false, p, stream);
        launch_chunks(ablate_ssm_scan_fwd_output<TX, TQK>,
                      smem_bytes<TX, TQK, OutputTc>(L, P, N, output_smem_floats(L, P, N)), "the forward output kernel",
                      p, stream);
      });
    }
    ctx->save_for_backward({x, q, k, log_alpha, beta, gamma, D, z_in, h0_in, x_prev_in, k_prev_in,
                            tensor_cores ? states_lo : states, lam, h_last});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["has_z"] = has_z;
    ctx->saved_data["has_h0"] = has_h0;
    ctx->saved_data["has_prev"] = has_prev;
    return {y, h_last};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &q = s[1], &k = s[2], &log_alpha = s[3], &beta = s[4], &gamma = s[5], &D = s[6];
    const bool has_prev = ctx->saved_data["has_prev"].toBool();
    const Tensor z = ctx->saved_data["has_z"].toBool() ? s[7] : Tensor();
    const Tensor h0 = ctx->saved_data["has_h0"].toBool() ? s[8] : Tensor();
    const Tensor x_prev = has_prev ? s[9] : Tensor(), k_prev = has_prev ? s[10] : Tensor();
    const Tensor &states = s[11], &lam = s[12], &h_last = s[13];
    const int64_t L = ctx->saved_data["chunk"].toInt();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = q.size(3);
    const int64_t nC = (T + L - 1) / L;
    const auto f32 = x.options().dtype(torch::kFloat);
    // The gradient of y in y's dtype (x's), as autograd hands it: the kernels read it so.
    Tensor dout = grads[0].defined() ? on_device(grads[0].to(x.scalar_type()), x, "grad of y")
                                     : torch::zeros({B, T, H, P}, x.options());
    Tensor dh_last = grads[1].defined() ? on_device(grads[1].to(torch::kFloat), x, "grad of h_last") : Tensor();
    // dx and dz contiguous whatever x's and z's layout (the kernels write them at row_index).
    Tensor dx = torch::empty(x.sizes(), x.options()), dq = torch::empty_like(q), dk = torch::empty_like(k);
    Tensor dz = z.defined() ? torch::empty(z.sizes(), z.options()) : Tensor();
    Tensor dla = torch::empty_like(log_alpha), dbeta = torch::empty_like(beta), dgamma = torch::empty_like(gamma);
    Tensor dh0 = h0.defined() ? torch::empty_like(h0) : Tensor();
    Tensor dx_prev = x_prev.defined() ? torch::empty_like(x_prev) : Tensor();
    Tensor dk_prev = k_prev.defined() ? torch::empty_like(k_prev) : Tensor();
    Tensor dD;
    if (T == 0) {
      if (h0.defined()) dh0 = dh_last.defined() ? dh_last.clone() : torch::zeros_like(h0);
      if (x_prev.defined()) dx_prev.zero_(), dk_prev.zero_();
      dD = torch::zeros_like(D);
    } else {
      const bool tensor_cores = states.scalar_type() == torch::kBFloat16;  // saved as S_c in bf16
      // dZ_c, then the adjoints, in fp32 on the SIMT path; the tensor-core path's state scan writes the
      // adjoints in bf16 (dstates_lo) only.
      Tensor dstates = tensor_cores ? Tensor() : torch::empty({B, H, nC, P, N}, f32), r = torch::empty({B, T, H}, f32);
      Tensor dstates_lo = tensor_cores ? torch::empty({B, H, nC, P, N}, states.options()) : Tensor();
      Tensor gprev_x = torch::empty({B, H, nC, P}, f32), gprev_k = torch::empty({B, H, nC, N}, f32);
      Tensor last_x = torch::empty({B, H, nC, P}, f32), last_k = torch::empty({B, H, nC, N}, f32);
      // <dh_last, h_last> (d log alpha's start) only when h_last has a gradient (below).
      Tensor dD_part = torch::empty({B, H, nC}, f32), last_dot;
      Tensor r_half_sums = torch::empty({B, H, nC, kRowHalves}, f32.dtype(torch::kDouble));
      Tensor chunks_done = torch::empty({B, H}, f32.dtype(torch::kInt));  // zeroed on the stream below
      dD = torch::empty_like(D);
      Params p = input_params({x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}, L);
      if (tensor_cores) {
        p.states_lo = static_cast<bf16*>(const_cast<void*>(states.data_ptr()));
        p.dstates_lo = static_cast<bf16*>(dstates_lo.data_ptr());
      } else {
        p.states = const_cast<float*>(states.data_ptr<float>());
      }
      p.lam = const_cast<float*>(ptr_or_null(lam));
      p.dout = dout.data_ptr(), p.dh_last = dh_last.defined() ? dh_last.data_ptr<float>() : nullptr;
      p.h_last_saved = h_last.data_ptr<float>();
      p.dstates = tensor_cores ? nullptr : dstates.data_ptr<float>();
      p.dh0 = dh0.defined() ? dh0.data_ptr<float>() : nullptr;
      p.dx = dx.data_ptr(), p.dz = dz.defined() ? dz.data_ptr() : nullptr, p.dq = dq.data_ptr(), p.dk = dk.data_ptr();
      p.dbeta = dbeta.data_ptr<float>(), p.dgamma = dgamma.data_ptr<float>(), p.r = r.data_ptr<float>();
      p.r_half_sums = r_half_sums.data_ptr<double>(), p.chunks_done = chunks_done.data_ptr<int>();
      p.dlog_alpha = dla.data_ptr<float>();
      p.gprev_x = gprev_x.data_ptr<float>(), p.gprev_k = gprev_k.data_ptr<float>();
      p.last_x = last_x.data_ptr<float>(), p.last_k = last_k.data_ptr<float>(), p.dD_part = dD_part.data_ptr<float>();
      p.dD = dD.data_ptr<float>();
      if (dh_last.defined()) {  // <dh_last, h_last> in parts, one per warp of the backward state scan or pass
        p.dot_parts = tensor_cores ? static_cast<int>(ceil_div(P, kScanRows)) * (kThreads / 32)
                                   : static_cast<int>(P * N / state_pass_width(p) / 32);
        last_dot = torch::empty({B, H, p.dot_parts}, f32);
        p.last_dot = last_dot.data_ptr<float>();
      }
      p.dx_prev = dx_prev.defined() ? dx_prev.data_ptr<float>() : nullptr;
      p.dk_prev = dk_prev.defined() ? dk_prev.data_ptr<float>() : nullptr;
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_io_types(x.scalar_type(), q.scalar_type(), [&](auto xtag, auto qtag) {
        using TX = typename decltype(xtag)::type;
        using TQK = typename decltype(qtag)::type;
        launch_chunk_states<TX, TQK>(/*backward=*/true, p, stream);
        C10_CUDA_CHECK(cudaMemsetAsync(p.chunks_done, 0, chunks_done.nbytes(), stream));
        launch_chunks(ablate_ssm_scan_bwd_chunk<TX, TQK>,
                      smem_bytes<TX, TQK, BwdChunkTc>(L, P, N, bwd_chunk_smem_floats(L, P, N)),
                      "the backward chunk kernel", p, stream);
        launch_overlapping_previous(ablate_ssm_scan_bwd_finish<TX, TQK>, finish_blocks(B, H, nC), kFinishThreads, p, stream);
      });
    }
    return {dx, dq, dk, dla, dbeta, dgamma, dD, dz, dh0, dx_prev, dk_prev, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

SsmScanOutputs ssm_scan(const SsmScanInputs& in) {
  const auto& x = in.x;
  TORCH_CHECK(x.defined() && x.dim() == 4, "ssm_scan fused_cuda: x must be [B,T,H,P]");
  TORCH_CHECK(in.q.defined() && in.q.dim() == 4 && in.k.defined() && in.k.sizes() == in.q.sizes() &&
                  in.q.size(0) == x.size(0) && in.q.size(1) == x.size(1) && in.q.size(2) == x.size(2),
              "ssm_scan fused_cuda: q and k must be [B,T,H,N] matching x ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = in.q.size(3);
  check_supported(P, N, in.chunk);
  for (const auto* t : {&in.log_alpha, &in.beta, &in.gamma})
    TORCH_CHECK(t->defined() && t->sizes() == at::IntArrayRef({B, T, H}),
                "ssm_scan fused_cuda: log_alpha, beta, gamma must be [B,T,H]");
  TORCH_CHECK(in.D.defined() && in.D.sizes() == at::IntArrayRef({H}), "ssm_scan fused_cuda: D must be [H]");
  TORCH_CHECK(!in.z.defined() || in.z.sizes() == x.sizes(), "ssm_scan fused_cuda: z must be [B,T,H,P] like x");
  TORCH_CHECK(!in.h0.defined() || in.h0.sizes() == at::IntArrayRef({B, H, P, N}),
              "ssm_scan fused_cuda: h0 must be [B,H,P,N]");
  TORCH_CHECK(in.x_prev.defined() == in.k_prev.defined(), "ssm_scan fused_cuda: x_prev and k_prev come together");
  if (in.x_prev.defined())
    TORCH_CHECK(in.x_prev.sizes() == at::IntArrayRef({B, H, P}) && in.k_prev.sizes() == at::IntArrayRef({B, H, N}),
                "ssm_scan fused_cuda: x_prev must be [B,H,P] and k_prev [B,H,N]");
  TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16,
              "ssm_scan fused_cuda: x must be fp32 or bf16, got ", x.scalar_type());
  TORCH_CHECK(in.q.scalar_type() == torch::kFloat || in.q.scalar_type() == torch::kBFloat16,
              "ssm_scan fused_cuda: q must be fp32 or bf16, got ", in.q.scalar_type());
  // Conversions happen here, under autograd, so their backward returns each gradient in its input's dtype.
  auto fp32 = [&](const Tensor& t, const char* what) {
    return t.defined() ? on_device(t.to(torch::kFloat), x, what) : Tensor();
  };
  // x and z as the M block hands them (views into its input projection) are read in place.
  auto rows_ready = [&](const Tensor& t, const char* what) {
    TORCH_CHECK(t.is_cuda(), "fused_cuda: ", what, " must be a CUDA tensor");
    TORCH_CHECK(t.device() == x.device(), "fused_cuda: ", what, " is on ", t.device(), ", expected ", x.device());
    return rows_in_place(t) ? t : t.contiguous();
  };
  const Tensor xc = rows_ready(x, "x");
  const Tensor zc = in.z.defined() ? rows_ready(in.z.to(x.scalar_type()), "z") : Tensor();
  const Tensor qc = on_device(in.q, x, "q"), kc = on_device(in.k.to(in.q.scalar_type()), x, "k");
  // Autograd functions take no undefined tensors: an absent optional input travels as an empty
  // placeholder, with a flag saying it is absent.
  const auto placeholder = torch::empty({0}, x.options().dtype(torch::kFloat));
  auto or_placeholder = [&](const Tensor& t) { return t.defined() ? t : placeholder; };
  auto out = SsmScanFunction::apply(xc, qc, kc, fp32(in.log_alpha, "log_alpha"), fp32(in.beta, "beta"),
                                    fp32(in.gamma, "gamma"), fp32(in.D, "D"), or_placeholder(zc),
                                    or_placeholder(fp32(in.h0, "h0")), or_placeholder(fp32(in.x_prev, "x_prev")),
                                    or_placeholder(fp32(in.k_prev, "k_prev")), in.chunk, in.z.defined(),
                                    in.h0.defined(), in.x_prev.defined());
  return {out[0], out[1]};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {
namespace {

// Hopper, fp32 or bf16, and the M blocks' shapes within check_supported's: P and N multiples of 16 in
// [16, 128], chunk 16, 32, 48 or 64; an fp32 run takes the SIMT path, whose backward chunk must fit the
// H100's 232,448 bytes of shared memory a block (P = N = 128 at chunk 64 does not).
std::string ssm_scan_fused_unavailable(const DeviceInfo& dev) {
  if (auto why = availability::hopper_fp32_or_bf16(dev); !why.empty()) return why;
#if defined(__CUDACC__)
  const auto& m = dev.model;
  if (m.ssm_head_dim == 0) return "";  // shapes not known: each call checks its own
  const auto multiple_of_16 = [](int64_t v, int64_t most) { return v % 16 == 0 && v >= 16 && v <= most; };
  const std::string use_reference = " (use ssm_scan = \"reference\" for this model)";
  if (!multiple_of_16(m.ssm_head_dim, fused::kMaxDim) || !multiple_of_16(m.ssm_state, fused::kMaxDim))
    return "model.mamba.head_dim = " + std::to_string(m.ssm_head_dim) + " and model.mamba.state = " +
           std::to_string(m.ssm_state) + " must be multiples of 16 in [16, 128] for this kernel" + use_reference;
  if (!multiple_of_16(m.ssm_chunk, fused::kMaxChunk))
    return "model.mamba.chunk = " + std::to_string(m.ssm_chunk) + " must be 16, 32, 48 or 64 for this kernel" +
           use_reference;
  constexpr size_t kHopperSmemPerBlock = 232448;
  const size_t simt_bytes = fused::bwd_chunk_smem_floats(static_cast<int>(m.ssm_chunk), static_cast<int>(m.ssm_head_dim),
                                                         static_cast<int>(m.ssm_state)) * sizeof(float);
  if (dev.dtype == "fp32" && simt_bytes > kHopperSmemPerBlock)
    return "an fp32 run's backward chunk needs " + std::to_string(simt_bytes) + " bytes of shared memory at chunk " +
           std::to_string(m.ssm_chunk) + ", P " + std::to_string(m.ssm_head_dim) + ", N " + std::to_string(m.ssm_state) +
           ", over the H100's " + std::to_string(kHopperSmemPerBlock) +
           " (set model.mamba.chunk = 48, run in bf16, or use ssm_scan = \"reference\")";
#endif
  return "";
}

}  // namespace

ABLATE_REGISTER_BACKENDS(ssm_scan_fused_cuda) {
  registry.ssm_scan({.name = "fused_cuda",
                     .role = Role::experimental,
                     .fallback = "reference",
                     .kernel_patterns = {"ablate_ssm_scan_"},
                     .description = "kernels/ssm_scan/fused_cuda.cu: chunked SSD-style scan, fp32 state; bf16: forward "
                                    "2 launches (a state scan over the chunks on tensor cores, outputs with D "
                                    "skip and silu(z) gate), backward 4 (the adjoint scan, then recomputes "
                                    "within a chunk); fp32: 3 and 5 (SIMT); P, N multiples of 16 up to 128, "
                                    "chunk 16-64",
                     .unavailable_reason = &ssm_scan_fused_unavailable},
                    ABLATE_CUDA_ONLY(&fused::ssm_scan));
}

}  // namespace ablate::kernels
