// kernels/ssm_scan/fused_cuda_state_scans.cuh: the chunk-state scans of the ssm_scan fused_cuda backend's
// tensor-core path (bf16 x): ablate_ssm_scan_fwd_state_scan (S_c) and ablate_ssm_scan_bwd_state_scan (the
// adjoints dS_end(c)), a block per (slice of P, head, batch) walking the chunks with its state in mma
// accumulators, three stages of cp.async copies in flight.
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include "kernels/ssm_scan/fused_cuda_tiles.cuh"

namespace ablate::kernels::fused {
namespace {

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
// Measured and not kept (2026-11-26, 48db02b, experiments/results/2026-11-26-h100-s16/, patches there): no
// scans, the states passed block to block by the output and backward chunk kernels (fwd+bwd 2.07 ms at best
// against 2.04: +58% instructions in the output kernel); 32-row slices at 4 blocks an SM (2.19 ms).
// The chunk loop is a serial chain (32 links at nam56r-small, 2 blocks of 8 warps an SM), so each link
// is kept short: two barriers a chunk; every warp scans log alpha itself (a few shuffles, no barrier for
// a shared copy) and weights its own rows of the operand; each warp's tiles share one column block, so
// a k step loads the B fragment once for all of them.

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
          v0 *= zv.x * sigmoid_tc(zv.x), v1 *= zv.y * sigmoid_tc(zv.y);
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

// kFixed: at kFixedShape, its sizes constants (the host launches it only there).
template <typename TQK, bool kFixed = false>
__global__ void __launch_bounds__(kThreads, 2) ablate_ssm_scan_fwd_state_scan(Params p) {
  extern __shared__ float smem[];
  state_scan_tc<false, TQK>(params_at_shape<kFixed>(p), smem);
}

template <typename TQK, bool kFixed = false>
__global__ void __launch_bounds__(kThreads, 2) ablate_ssm_scan_bwd_state_scan(Params p) {
  extern __shared__ float smem[];
  state_scan_tc<true, TQK>(params_at_shape<kFixed>(p), smem);
}

}  // namespace
}  // namespace ablate::kernels::fused
