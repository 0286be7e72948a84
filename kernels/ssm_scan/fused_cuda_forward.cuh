// kernels/ssm_scan/fused_cuda_forward.cuh: the forward output kernel of the ssm_scan fused_cuda backend,
// ablate_ssm_scan_fwd_output: y_t = sum_j W_tj (q_t.k_j) x_j + exp(cum_t) S_c q_t + D x_t, times silu(z_t)
// when z is given; on tensor cores (output_tc) with bf16 x, else on the SIMT path (fp32 tiles, the
// helpers of fused_cuda_simt.cuh).
// Part of fused_cuda.cu's one translation unit (it includes every fused_cuda_*.cuh, all names in an
// unnamed namespace as before the split: no -rdc, kernel names unchanged for the catalog's CUPTI patterns).
// File map, derivation, tests and timings: kernels/ssm_scan/README.md.
#pragma once
#include "kernels/ssm_scan/fused_cuda_simt.cuh"
#include "kernels/ssm_scan/fused_cuda_tiles.cuh"

namespace ablate::kernels::fused {
namespace {

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

// The fp32-x branch (the SIMT path) is written in the kernel, not as a function of its own: as one (the
// Params by reference) the fp32 instantiations compile to other SASS (same registers, other integer
// scheduling; checked with cuobjdump 2026-11-27).
// kFixed: the tensor-core body at kFixedShape, its sizes constants (the host launches it only there).
template <typename TX, typename TQK, bool kFixed = false>
__global__ void __launch_bounds__(kThreads, kMinBlocks<TX, TQK>) ablate_ssm_scan_fwd_output(Params p) {
  extern __shared__ float smem[];
  if constexpr (kTensorCores<TX, TQK>) {
    output_tc<TQK>(params_at_shape<kFixed>(p), smem);
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

}  // namespace
}  // namespace ablate::kernels::fused
