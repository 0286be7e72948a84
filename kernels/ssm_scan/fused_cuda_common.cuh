// kernels/ssm_scan/fused_cuda_common.cuh: what both paths of the ssm_scan fused_cuda backend (tensor-core
// and SIMT) share: the launch parameters (Params), row indexing, vector loads into fp32, the chunk's
// coefficients and cumulative log alpha, the decays and weights W_tj, and the r_t half sums.
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include <cmath>
#include <limits>

#include "kernels/cuda_common.cuh"
#include "kernels/ssm_scan/fused_cuda_config.cuh"

namespace ablate::kernels::fused {
namespace {

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

// The Params a kernel body runs with: with kFixed (the host launched the kernel at kFixedShape) a copy
// whose L, P, N are kFixedShape's constants, so every helper inlined below reads them as constants; else
// the launch's own, by reference (the general instantiation's code as it was).
template <bool kFixed>
__device__ __forceinline__ decltype(auto) params_at_shape(const Params& p) {
  if constexpr (kFixed) {
    Params fixed = p;
    fixed.L = kFixedShape.L, fixed.P = kFixedShape.P, fixed.N = kFixedShape.N;
    return fixed;
  } else {
    return (p);  // const Params&
  }
}

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
// sigmoid(v) on the tensor-core path: the fast exponential and the approximate reciprocal (MUFU.RCP, ~1 ulp,
// 0 once 1 + e^-v passes 2^126: sigmoid's own limit). The IEEE-rounded __frcp_rn refines it with a
// slow-path branch per element: 6.5 % of the backward chunk kernel's instructions (2026-11-29, H200).
__device__ __forceinline__ float sigmoid_tc(float v) { return __fdividef(1.f, 1.f + __expf(-v)); }

// exp(cum_t - cum_s) for s <= t: the decay from just after position s to position t.
template <bool kFast = false>
__device__ __forceinline__ float decay(const float* cum, int t, int s) { return exp_of<kFast>(cum[t] - cum[s]); }

// W_tj (column j = position j-1; 0 above the diagonal), see README.md.
template <bool kFast = false>
__device__ __forceinline__ float weight(const float* cum, const float* bet, const float* gam, int L, int t, int j) {
  float w = 0.f;
  if (j >= 1 && j - 1 <= t) w += decay<kFast>(cum, t, j - 1) * gam[j - 1];
  if (j <= L - 1 && j <= t) w += decay<kFast>(cum, t, j) * bet[j];
  return w;
}

// r_t over each 32-row half of chunk c (rows 0-31, 32-63; a half past the chunk's rows sums to 0), in
// fp64 by a fixed butterfly: the finish launch walks a chunk's rows from its own halves' and the later
// chunks' sums, so the reverse scan over T needs no sequential pass. Every thread of the chunk kernel
// calls it with its row's r_t (thread t has row t; 0 for threads past the rows).
__device__ __forceinline__ void store_r_half_sums(const Params& p, int64_t bh, int c, float r_t) {
  const int half = threadIdx.x / 32;
  if (half >= kRowHalves) return;  // warp-uniform
  const double sum = warp_sum(static_cast<double>(r_t));
  if ((threadIdx.x & 31) == 0) p.r_half_sums[(bh * p.nC + c) * kRowHalves + half] = sum;
}

}  // namespace
}  // namespace ablate::kernels::fused
