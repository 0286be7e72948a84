// kernels/ssm_scan/fused_cuda_backward.cuh: the backward chunk and finish kernels of the ssm_scan fused_cuda
// backend: ablate_ssm_scan_bwd_chunk (per chunk: dx, dk, dq, dz, dbeta, dgamma, the column-0 gradients, dD
// partial sums and r_t; on tensor cores with bf16 x, else on the SIMT path with fused_cuda_simt.cuh's
// helpers) and ablate_ssm_scan_bwd_finish (what needs other chunks: d log alpha, the chunks' boundary
// rows, dD), which overlaps the chunk kernel's last wave (programmatic dependent launch).
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include "kernels/ssm_scan/fused_cuda_simt.cuh"
#include "kernels/ssm_scan/fused_cuda_tiles.cuh"

namespace ablate::kernels::fused {
namespace {

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
// kept (2026-11-27, 32cf80a, experiments/results/2026-11-27-h100-s17/): dout and z staged in shared memory
// by cp.async with the tiles, 1.35 ms for the kernel against 1.23 where the benchmark runs it.
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

// The fp32-x branch (the SIMT path) is written in the kernel, not as a function of its own: as one (the
// Params by reference) the fp32 instantiations compile to other SASS (same registers, other integer
// scheduling; checked with cuobjdump 2026-11-27).
// kFixed: the tensor-core body at kFixedShape, its sizes constants (the host launches it only there).
template <typename TX, typename TQK, bool kFixed = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks<TX, TQK>) ablate_ssm_scan_bwd_chunk(Params p) {
  extern __shared__ float smem[];
  allow_dependent_launch();
  if constexpr (kTensorCores<TX, TQK>) {
    bwd_chunk_tc<TQK>(params_at_shape<kFixed>(p), smem);
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

}  // namespace
}  // namespace ablate::kernels::fused
