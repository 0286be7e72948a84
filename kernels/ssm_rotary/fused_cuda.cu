// kernels/ssm_rotary/fused_cuda.cu: backend `fused_cuda` of the `ssm_rotary` seam (Mamba-3's rotary keys
// and queries, docs/model.md "M"). The reference (kernels/ssm_rotary/reference.cpp) builds the biased
// B^ + b_B and C^ + c_C per head, cos and sin, two products per component and their stack, each a
// [B,T,H,N] fp32 tensor through memory and most of them kept for backward: at nam56r-small (B 8, T 2048,
// H 32, N 128) that is ~268 MB a tensor and the largest share of the M block's glue time. Here:
//   forward  the angle steps delta pi tanh(theta) summed over time by this file's two-pass scan
//            (ablate_ssm_rotary_time_chunk_sums, ablate_ssm_rotary_time_scan: LibTorch's cumsum over
//            an outer dim took 0.78 ms a call at nam56r-small, forward and backward alike), each step
//            formed where the scan reads it (the reference's arithmetic; the [B,T,H,S] steps never
//            stored), then
//            ablate_ssm_rotary_fwd writes q and k in one pass (bias added, pairs turned by
//            sincosf(Phi), the tail dims passed through);
//   backward ablate_ssm_rotary_bwd, one pass over dq, dk: d Phi = (-g0 k1 + g1 k0) summed over q and
//            k, d b and d c = Rot^T g summed over a group of heads (in shared memory, a fixed order;
//            one partial a head group, added up in group order), and the bias gradients summed in
//            registers over the block's rows into one partial per block, added up by a LibTorch sum
//            (no atomics: the result is the same on every run on one GPU model). Phi's
//            gradient then goes through the reverse scan (the same kernels) into the steps, and one
//            pass a row (ablate_ssm_rotary_angle_grads) into delta and tanh(theta).
// Saved for backward: b, c [B,T,N], the biases and Phi [B,T,H,S] (q, k, cos and sin are recomputed).
// Arithmetic in fp32 (fp32 or bf16 inputs are converted); q and k written in fp32, or in bf16 when the
// caller asks (qk_dtype: the M block under autocast), rounded once at the store, and their gradients read
// in that dtype (no fp32 copy of a bf16 gradient).
// Layout: a block owns whole rows (b, t): thread x = pair index p < N/2, thread y = a lane of heads; each
// thread reads its pair of b and c once per row and walks its heads, so every q, k access is an 8-byte
// access and a warp covers consecutive pairs (coalesced).
// Tests: kernels_tests --gtest_filter='*Parity*ssm_rotary*'. Benchmark: build/bench/kernels_bench
// --benchmark_filter=ssm_rotary.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"
#include "kernels/ssm_rotary/reference.h"

#if defined(__CUDACC__)
#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "kernels/numerics.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

struct RotaryShape {
  int64_t rows;  // B * T
  int heads;     // H
  int half;      // N / 2: pairs a row
  int turned;    // S: the leading pairs that rotate
};

// Heads a thread loads before it computes any of them (both kernels walk a row's heads in lanes): one
// head at a time left the loads' latency exposed (Nsight Compute on the H100 before b5d73cb, 2026-11-26: the
// backward ~60 % stalled on it; experiments/results/2026-11-26-h100-scan-io/).
constexpr int kHeadsInFlight = 4;

__device__ __forceinline__ float2 turn(float2 v, float c, float s) { return {v.x * c - v.y * s, v.x * s + v.y * c}; }
__device__ __forceinline__ float2 add(float2 a, float2 b) { return {a.x + b.x, a.y + b.y}; }

// A pair of q or k (or of their gradients) as stored: float2 (fp32) or __nv_bfloat162 (bf16).
__device__ __forceinline__ float2 pair_to_float2(float2 v) { return v; }
__device__ __forceinline__ float2 pair_to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
template <typename Pair>
__device__ __forceinline__ Pair pair_from_float2(float2 v) {
  if constexpr (std::is_same_v<Pair, float2>) {
    return v;
  } else {
    return __float22bfloat162_rn(v);
  }
}

// q, k [rows, H, N] (pairs of type QK: fp32 or bf16) from b, c [rows, N], biases [H, N], phi [rows, H, S]
// in fp32; all contiguous and aligned to a pair (float2 = one fp32 pair).
template <typename QK>
__global__ void ablate_ssm_rotary_fwd(const float2* __restrict__ b, const float2* __restrict__ c,
                                      const float2* __restrict__ b_bias, const float2* __restrict__ c_bias,
                                      const float* __restrict__ phi, QK* __restrict__ q, QK* __restrict__ k,
                                      RotaryShape shape) {
  const int p = threadIdx.x;  // blockDim.x == half
  const int lanes = blockDim.y;
  for (int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    const float2 bv = b[row * shape.half + p], cv = c[row * shape.half + p];
    for (int h0 = threadIdx.y; h0 < shape.heads; h0 += lanes * kHeadsInFlight) {
      float angle[kHeadsInFlight];  // the angles of kHeadsInFlight heads loaded before any is used
#pragma unroll
      for (int u = 0; u < kHeadsInFlight; ++u) {
        const int h = h0 + u * lanes;
        angle[u] = h < shape.heads && p < shape.turned ? phi[(row * shape.heads + h) * shape.turned + p] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kHeadsInFlight; ++u) {
        const int h = h0 + u * lanes;
        if (h >= shape.heads) break;
        float2 ku = add(bv, b_bias[h * shape.half + p]), qu = add(cv, c_bias[h * shape.half + p]);
        const int64_t head_row = row * shape.heads + h;
        if (p < shape.turned) {
          float sn, cs;
          sincosf(angle[u], &sn, &cs);
          ku = turn(ku, cs, sn);
          qu = turn(qu, cs, sn);
        }
        k[head_row * shape.half + p] = pair_from_float2<QK>(ku);
        q[head_row * shape.half + p] = pair_from_float2<QK>(qu);
      }
    }
  }
}

// Backward tiling. A block is the N/2 pairs of a row (x) by `lanes` head lanes (y), at most
// kBackwardThreads threads, and owns one group of lanes * kHeadsInFlight heads (blockIdx.y): thread
// (p, lane) of group g owns heads g * lanes * kHeadsInFlight + lane + u * lanes, u < kHeadsInFlight, and
// sums their bias gradients over its rows in registers. Keeping every head's bias sums in shared memory
// instead (H x N x 16 bytes: 128 KB at nam56r-large's 128 heads) left one block of 8 warps an SM and
// the pass ~10x off the memory floor (H200, 2026-11-28, bed6d4b: 1.6 ms a call at nam56r-large).
constexpr int kBackwardThreads = 512;
constexpr int kForwardThreads = 256;

// Threads a block, about `threads` in all: x = the N/2 pairs of a row, y = head lanes.
dim3 block_for(const RotaryShape& shape, int threads) {
  const int lanes = std::max(1, std::min(shape.heads, threads / shape.half));
  return dim3(static_cast<unsigned>(shape.half), static_cast<unsigned>(lanes));
}

// Head groups (blockIdx.y): each writes its own partial d b, d c [rows, N/2] pairs, summed over the groups
// afterwards in group order.
int head_groups(const RotaryShape& shape, const dim3& block) {
  return static_cast<int>(ceil_div(int64_t{shape.heads}, int64_t(block.y) * kHeadsInFlight));
}

// Dynamic shared memory: one row's per-lane sums [blockDim.y][half] for b and for c. dq or dk may be null
// (an output without a gradient: zeros); their pairs are of type QK, like q and k. Writes d b and d c of
// head group blockIdx.y at db_part / dc_part + blockIdx.y * rows * half, the bias partials of block
// (blockIdx.x, its heads) at [blockIdx.x, h, p], and d Phi.
template <typename QK>
__global__ void __launch_bounds__(1024)
    ablate_ssm_rotary_bwd(const QK* __restrict__ dq, const QK* __restrict__ dk, const float2* __restrict__ b,
                          const float2* __restrict__ c, const float2* __restrict__ b_bias,
                          const float2* __restrict__ c_bias, const float* __restrict__ phi,
                          float2* __restrict__ db_part, float2* __restrict__ dc_part, float* __restrict__ dphi,
                          float2* __restrict__ db_bias_part, float2* __restrict__ dc_bias_part, RotaryShape shape) {
  extern __shared__ float2 smem[];
  const int p = threadIdx.x, lane = threadIdx.y, lanes = blockDim.y, half = shape.half;
  const int first_head = blockIdx.y * lanes * kHeadsInFlight + lane;
  float2* row_b = smem;
  float2* row_c = row_b + lanes * half;
  db_part += int64_t(blockIdx.y) * shape.rows * half;
  dc_part += int64_t(blockIdx.y) * shape.rows * half;
  const float2 zero{0.f, 0.f};
  float2 bias_b[kHeadsInFlight], bias_c[kHeadsInFlight];
#pragma unroll
  for (int u = 0; u < kHeadsInFlight; ++u) bias_b[u] = bias_c[u] = zero;
  for (int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {  // the same trip count in every thread
    const float2 bv = b[row * half + p], cv = c[row * half + p];
    // The thread's heads' gradients and angles loaded before any is used.
    float2 gk[kHeadsInFlight], gq[kHeadsInFlight];
    float angle[kHeadsInFlight];
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u) {
      const int h = first_head + u * lanes;
      const bool in = h < shape.heads;
      const int64_t head_row = row * shape.heads + h, at = head_row * half + p;
      gk[u] = in && dk != nullptr ? pair_to_float2(dk[at]) : zero;
      gq[u] = in && dq != nullptr ? pair_to_float2(dq[at]) : zero;
      angle[u] = in && p < shape.turned ? phi[head_row * shape.turned + p] : 0.f;
    }
    float2 sum_b = zero, sum_c = zero;
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u) {
      const int h = first_head + u * lanes;
      if (h >= shape.heads) break;
      float2 du_k = gk[u], du_q = gq[u];  // d(b + bias), d(c + bias): Rot^T g on turned pairs, g on the rest
      if (p < shape.turned) {
        float sn, cs;
        sincosf(angle[u], &sn, &cs);
        const float2 kr = turn(add(bv, b_bias[h * half + p]), cs, sn);
        const float2 qr = turn(add(cv, c_bias[h * half + p]), cs, sn);
        // d/dPhi of (u c - v s, u s + v c) is (-(u s + v c), u c - v s) = (-k1, k0).
        dphi[(row * shape.heads + h) * shape.turned + p] =
            (gk[u].y * kr.x - gk[u].x * kr.y) + (gq[u].y * qr.x - gq[u].x * qr.y);
        du_k = turn(gk[u], cs, -sn);
        du_q = turn(gq[u], cs, -sn);
      }
      sum_b = add(sum_b, du_k);
      sum_c = add(sum_c, du_q);
      bias_b[u] = add(bias_b[u], du_k);
      bias_c[u] = add(bias_c[u], du_q);
    }
    row_b[lane * half + p] = sum_b;
    row_c[lane * half + p] = sum_c;
    __syncthreads();
    if (lane == 0) {
      float2 total_b = row_b[p], total_c = row_c[p];
      for (int l = 1; l < lanes; ++l) {
        total_b = add(total_b, row_b[l * half + p]);
        total_c = add(total_c, row_c[l * half + p]);
      }
      db_part[row * half + p] = total_b;
      dc_part[row * half + p] = total_c;
    }
    __syncthreads();  // row_b / row_c are rewritten by the next row
  }
#pragma unroll
  for (int u = 0; u < kHeadsInFlight; ++u) {
    const int h = first_head + u * lanes;
    if (h >= shape.heads) break;
    const int64_t at = (int64_t(blockIdx.x) * shape.heads + h) * half + p;
    db_bias_part[at] = bias_b[u];
    dc_bias_part[at] = bias_c[u];
  }
}

// ---- the sum over time: y[b, t, c] = sum of x[b, t', c] over t' <= t (t' >= t reversed) ------------
// x, y [B, T, C] fp32 contiguous. Pass 1: each (b, chunk of T, c) sums its chunk. Pass 2: each starts
// from the sums of the chunks before it (after it, reversed), added in chunk order, and runs through
// its chunk. A thread per (b, chunk, c), c fastest, so a warp reads and writes consecutive c; every
// sum is in a fixed order (the same result on every run).
struct TimeScanShape {
  int64_t B, T, C;
  int64_t chunk, chunks;  // chunk length and count: chunks * chunk >= T
};

__device__ __forceinline__ bool time_scan_thread(const TimeScanShape& s, int64_t& b, int64_t& k, int64_t& c) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.B * s.chunks * s.C) return false;
  c = i % s.C;
  k = (i / s.C) % s.chunks;
  b = i / (s.C * s.chunks);
  return true;
}

// What the scan sums: a stored [B, T, C] tensor (the reverse sum of dPhi), or the angle steps
// delta[b, t, h] pi tanh(theta)[b, t, s] at c = h S + s, formed where they are read (never stored; the
// same two fp32 roundings as LibTorch's delta * pi * tanh(theta): delta * pi first).
constexpr float kPi = 3.14159265358979323846f;  // std::numbers::pi rounded to fp32, as LibTorch's scalar

struct StoredRows {
  const float* x;
  __device__ __forceinline__ float operator()(const TimeScanShape& s, int64_t b, int64_t t, int64_t c) const {
    return x[(b * s.T + t) * s.C + c];
  }
};
struct AngleSteps {
  const float* delta;       // [B, T, H]
  const float* tanh_theta;  // [B, T, S]
  int64_t H, S;
  __device__ __forceinline__ float operator()(const TimeScanShape& s, int64_t b, int64_t t, int64_t c) const {
    const int64_t row = b * s.T + t, h = c / S;
    return __fmul_rn(__fmul_rn(delta[row * H + h], kPi), tanh_theta[row * S + (c - h * S)]);
  }
};

template <class Source>
__global__ void ablate_ssm_rotary_time_chunk_sums(Source x, float* __restrict__ sums, TimeScanShape s) {
  int64_t b, k, c;
  if (!time_scan_thread(s, b, k, c)) return;
  const int64_t t_end = (k + 1) * s.chunk < s.T ? (k + 1) * s.chunk : s.T;
  float sum = 0.f;
  for (int64_t t = k * s.chunk; t < t_end; ++t) sum += x(s, b, t, c);
  sums[(b * s.chunks + k) * s.C + c] = sum;
}

template <bool kReverse, class Source>
__global__ void ablate_ssm_rotary_time_scan(Source x, const float* __restrict__ sums, float* __restrict__ y,
                                            TimeScanShape s) {
  int64_t b, k, c;
  if (!time_scan_thread(s, b, k, c)) return;
  float run = 0.f;
  if (kReverse) {
    for (int64_t j = s.chunks - 1; j > k; --j) run += sums[(b * s.chunks + j) * s.C + c];
  } else {
    for (int64_t j = 0; j < k; ++j) run += sums[(b * s.chunks + j) * s.C + c];
  }
  const int64_t t_begin = k * s.chunk, t_end = (k + 1) * s.chunk < s.T ? (k + 1) * s.chunk : s.T;
  for (int64_t n = 0; n < t_end - t_begin; ++n) {
    const int64_t t = kReverse ? t_end - 1 - n : t_begin + n;
    run += x(s, b, t, c);
    y[(b * s.T + t) * s.C + c] = run;
  }
}

// The angle steps' gradients from theirs, dsteps [B, T, H, S]: d delta[b,t,h] = pi sum_s dsteps
// tanh(theta)[b,t,s] and d tanh(theta)[b,t,s] = sum_h dsteps delta[b,t,h] pi, one block per row (b, t),
// the row staged in shared memory, each sum in a fixed order. (Autograd's form: two broadcast products
// of [B,T,H,S] and two reductions of them, ~0.35 ms an M layer at nam56r-small.) The staged row's lines
// are S + 1 floats apart: the d delta sums read down a column (thread h at h * stride + s), and with a
// stride of S = 64 all 32 lanes of a warp hit one bank (109 us an M layer on the H100 before 5a7a8d2,
// 2026-11-26, experiments/results/2026-11-26-h100-cudnn/).
__global__ void ablate_ssm_rotary_angle_grads(const float* __restrict__ dsteps, const float* __restrict__ delta,
                                              const float* __restrict__ tanh_theta, float* __restrict__ ddelta,
                                              float* __restrict__ dtanh, int64_t rows, int H, int S) {
  extern __shared__ float row_grads[];  // [H][S + 1]
  const int stride = S + 1;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* g = dsteps + row * H * S;
    for (int i = threadIdx.x; i < H * S; i += blockDim.x) {
      const int h = i / S;
      row_grads[h * stride + (i - h * S)] = g[i];
    }
    __syncthreads();
    for (int h = threadIdx.x; h < H; h += blockDim.x) {
      float sum = 0.f;
      for (int s = 0; s < S; ++s) sum = fmaf(row_grads[h * stride + s], tanh_theta[row * S + s], sum);
      ddelta[row * H + h] = sum * kPi;
    }
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
      float sum = 0.f;
      for (int h = 0; h < H; ++h) sum = fmaf(row_grads[h * stride + s], __fmul_rn(delta[row * H + h], kPi), sum);
      dtanh[row * S + s] = sum;
    }
    __syncthreads();
  }
}

// Chunks of at least 32 steps, at most 64 of them (pass 2's serial prefix), and enough threads to
// fill the device where the shape allows.
TimeScanShape time_scan_shape(int64_t B, int64_t T, int64_t C) {
  TimeScanShape s{B, T, C, 1, 1};
  const int64_t columns = std::max<int64_t>(1, s.B * s.C), wanted = int64_t(sm_count()) * 2048;
  const int64_t chunks_for_device = std::max<int64_t>(1, wanted / columns);
  s.chunks = std::clamp<int64_t>(std::min(chunks_for_device, (s.T + 31) / 32), 1, 64);
  s.chunk = std::max<int64_t>(1, (s.T + s.chunks - 1) / s.chunks);
  s.chunks = std::max<int64_t>(1, (s.T + s.chunk - 1) / s.chunk);
  return s;
}

// The inclusive sum over time of `x` (a Source over [B, T, C]) into a new fp32 [B, T, C] tensor on the
// device of `like`, forward or reversed.
template <bool kReverse, class Source>
Tensor time_scan(const Source& x, const TimeScanShape& s, const Tensor& like) {
  Tensor y = torch::empty({s.B, s.T, s.C}, like.options().dtype(torch::kFloat));
  const int64_t threads = s.B * s.chunks * s.C;
  if (threads == 0 || s.T == 0) return y;
  Tensor sums = torch::empty({s.B, s.chunks, s.C}, y.options());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto blocks = static_cast<unsigned>((threads + 255) / 256);
  ablate_ssm_rotary_time_chunk_sums<<<blocks, 256, 0, stream>>>(x, sums.data_ptr<float>(), s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  ablate_ssm_rotary_time_scan<kReverse><<<blocks, 256, 0, stream>>>(x, sums.data_ptr<float>(), y.data_ptr<float>(), s);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

// Phi [B,T,H,S] = the angle steps delta pi tanh(theta) summed over time, from delta [B,T,H] and
// tanh(theta) [B,T,S] (fp32): the steps are formed inside the scan and never stored. Backward: the
// reverse sum of dPhi gives the steps' gradient, and one pass per row turns it into d delta and
// d tanh(theta) (tanh's own backward stays with autograd).
class AngleScanFunction : public torch::autograd::Function<AngleScanFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& delta_in, const Tensor& tanh_in) {
    const Tensor delta = delta_in.contiguous(), tanh_theta = tanh_in.contiguous();
    const int64_t B = delta.size(0), T = delta.size(1), H = delta.size(2), S = tanh_theta.size(2);
    const auto s = time_scan_shape(B, T, H * S);
    ctx->save_for_backward({delta, tanh_theta});
    return time_scan<false>(AngleSteps{delta.data_ptr<float>(), tanh_theta.data_ptr<float>(), H, S}, s, delta)
        .view({B, T, H, S});
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &delta = saved[0], &tanh_theta = saved[1];
    const int64_t B = delta.size(0), T = delta.size(1), H = delta.size(2), S = tanh_theta.size(2);
    if (!grads[0].defined()) return {torch::zeros_like(delta), torch::zeros_like(tanh_theta)};
    const Tensor dphi = grads[0].to(torch::kFloat).contiguous();
    const auto s = time_scan_shape(B, T, H * S);
    const Tensor dsteps = time_scan<true>(StoredRows{dphi.data_ptr<float>()}, s, delta);
    Tensor ddelta = torch::empty_like(delta), dtanh = torch::empty_like(tanh_theta);
    const int64_t rows = B * T;
    if (rows > 0 && H * S > 0) {
      const size_t smem = sizeof(float) * static_cast<size_t>(H * (S + 1));
      TORCH_CHECK(smem <= 48 * 1024, "ssm_rotary fused_cuda: H x S = ", H, " x ", S,
                  " angles a row need more than 48 KB of shared memory; use backend ssm_rotary = \"reference\"");
      const auto grid = static_cast<unsigned>(std::min<int64_t>(rows, int64_t(sm_count()) * 16));
      ablate_ssm_rotary_angle_grads<<<grid, 128, smem, at::cuda::getCurrentCUDAStream()>>>(
          dsteps.data_ptr<float>(), delta.data_ptr<float>(), tanh_theta.data_ptr<float>(), ddelta.data_ptr<float>(),
          dtanh.data_ptr<float>(), rows, static_cast<int>(H), static_cast<int>(S));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
      ddelta.zero_(), dtanh.zero_();
    }
    return {ddelta, dtanh};
  }
};

size_t backward_smem_bytes(const RotaryShape& shape, const dim3& block) {
  return sizeof(float2) * static_cast<size_t>(shape.half) * 2 * block.y;
}

// Blocks along the rows: every group's blocks resident at once (one wave; each walks its rows).
template <typename QK>
int64_t backward_row_blocks(const RotaryShape& shape, const dim3& block, int groups, size_t smem) {
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, ablate_ssm_rotary_bwd<QK>, static_cast<int>(block.x * block.y), smem));
  const int64_t resident = int64_t(std::max(per_sm, 1)) * sm_count();
  return std::max<int64_t>(1, std::min<int64_t>(shape.rows, ceil_div(resident, int64_t{groups})));
}

// In `dtype` (fp32 by default), contiguous, on the device of `like`, and aligned to a pair (8 bytes
// fp32, 4 bf16: a view starting at an odd element is copied).
Tensor pairs_ready(const Tensor& t, const Tensor& like, const char* what, at::ScalarType dtype = torch::kFloat) {
  Tensor out = on_device(t.to(dtype), like, what);
  if (reinterpret_cast<std::uintptr_t>(out.data_ptr()) % (2 * out.element_size()) != 0) out = out.clone();
  return out;
}

// Calls fn(pair type) for q and k's dtype: float2 (fp32) or __nv_bfloat162 (bf16).
template <class Fn>
void with_pair_type(at::ScalarType qk_dtype, Fn&& fn) {
  if (qk_dtype == torch::kBFloat16) {
    fn(__nv_bfloat162{});
  } else {
    fn(float2{});
  }
}

template <typename T>
const T* as(const Tensor& t) {
  return reinterpret_cast<const T*>(t.data_ptr());
}
template <typename T>
T* as_mut(Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

class SsmRotaryFunction : public torch::autograd::Function<SsmRotaryFunction> {
 public:
  // b, c [B,T,N]; b_bias, c_bias [H,N]; phi [B,T,H,S] (fp32) -> q, k [B,T,H,N] in qk_dtype (fp32 or bf16).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& b_in,
                                                const Tensor& c_in, const Tensor& b_bias_in, const Tensor& c_bias_in,
                                                const Tensor& phi_in, at::ScalarType qk_dtype) {
    const Tensor b = pairs_ready(b_in, b_in, "b"), c = pairs_ready(c_in, b_in, "c");
    const Tensor b_bias = pairs_ready(b_bias_in, b_in, "b_bias"), c_bias = pairs_ready(c_bias_in, b_in, "c_bias");
    const Tensor phi = on_device(phi_in, b_in, "phi");
    const int64_t B = b.size(0), T = b.size(1), N = b.size(2), H = b_bias.size(0), S = phi.size(3);
    TORCH_CHECK(N % 2 == 0 && N / 2 <= 1024, "ssm_rotary fused_cuda: N must be even and at most 2048, got ", N);
    const RotaryShape shape{B * T, static_cast<int>(H), static_cast<int>(N / 2), static_cast<int>(S)};
    const auto qk_options = b.options().dtype(qk_dtype);
    Tensor q = torch::empty({B, T, H, N}, qk_options), k = torch::empty({B, T, H, N}, qk_options);
    if (shape.rows > 0 && H > 0) {
      const dim3 block = block_for(shape, kForwardThreads);
      const auto grid = static_cast<unsigned>(std::min<int64_t>(shape.rows, int64_t(sm_count()) * 16));
      with_pair_type(qk_dtype, [&](auto pair) {
        using QK = decltype(pair);
        ablate_ssm_rotary_fwd<QK><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
            as<float2>(b), as<float2>(c), as<float2>(b_bias), as<float2>(c_bias), phi.data_ptr<float>(),
            as_mut<QK>(q), as_mut<QK>(k), shape);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
    ctx->save_for_backward({b, c, b_bias, c_bias, phi});
    ctx->saved_data["qk_dtype"] = qk_dtype;
    return {q, k};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &b = saved[0], &c = saved[1], &b_bias = saved[2], &c_bias = saved[3], &phi = saved[4];
    const int64_t B = b.size(0), T = b.size(1), N = b.size(2), H = b_bias.size(0), S = phi.size(3);
    const RotaryShape shape{B * T, static_cast<int>(H), static_cast<int>(N / 2), static_cast<int>(S)};
    // An output without a gradient is read as zeros (a null pointer), not materialised. Gradients are
    // read in q and k's dtype (autograd hands them in it).
    const auto qk_dtype = ctx->saved_data["qk_dtype"].toScalarType();
    const Tensor dq = grads[0].defined() ? pairs_ready(grads[0], b, "dq", qk_dtype) : Tensor();
    const Tensor dk = grads[1].defined() ? pairs_ready(grads[1], b, "dk", qk_dtype) : Tensor();
    if (shape.rows == 0 || H == 0 || (!dq.defined() && !dk.defined()))
      return {torch::zeros_like(b), torch::zeros_like(c), torch::zeros_like(b_bias), torch::zeros_like(c_bias),
              torch::zeros_like(phi), Tensor()};
    // Every element of these is written by the kernel: d b and d c a head group, d Phi, the bias partials.
    const dim3 block = block_for(shape, kBackwardThreads);
    const int groups = head_groups(shape, block);
    const size_t smem = backward_smem_bytes(shape, block);
    Tensor db_part = torch::empty({groups, B, T, N}, b.options()), dc_part = torch::empty({groups, B, T, N}, b.options());
    Tensor dphi = torch::empty_like(phi);
    Tensor db_bias_part, dc_bias_part;
    with_pair_type(qk_dtype, [&](auto pair) {
      using QK = decltype(pair);
      const int64_t row_blocks = backward_row_blocks<QK>(shape, block, groups, smem);
      db_bias_part = torch::empty({row_blocks, H, N}, b.options());
      dc_bias_part = torch::empty({row_blocks, H, N}, b.options());
      const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(groups));
      ablate_ssm_rotary_bwd<QK><<<grid, block, smem, at::cuda::getCurrentCUDAStream()>>>(
          dq.defined() ? as<QK>(dq) : nullptr, dk.defined() ? as<QK>(dk) : nullptr, as<float2>(b), as<float2>(c),
          as<float2>(b_bias), as<float2>(c_bias), phi.data_ptr<float>(), as_mut<float2>(db_part),
          as_mut<float2>(dc_part), dphi.data_ptr<float>(), as_mut<float2>(db_bias_part), as_mut<float2>(dc_bias_part),
          shape);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    const Tensor db = groups == 1 ? db_part[0] : db_part.sum(0), dc = groups == 1 ? dc_part[0] : dc_part.sum(0);
    return {db, dc, db_bias_part.sum(0), dc_bias_part.sum(0), dphi, Tensor()};
  }
};

reference::SsmRotaryDims check_fused_args(const SsmRotaryInputs& in) {
  const auto d = reference::check_ssm_rotary_args(in);
  for (const auto* t : {&in.b, &in.c, &in.b_bias, &in.c_bias, &in.delta, &in.theta, &in.phi0})
    TORCH_CHECK(!t->defined() || t->is_cuda(), "ssm_rotary fused_cuda: every input must be a CUDA tensor");
  return d;
}

SsmRotaryOutputs ssm_rotary(const SsmRotaryInputs& in) {
  const auto d = check_fused_args(in);
  NoAutocastScope no_autocast;
  const Tensor phi = reference::with_initial_angle(
      in, AngleScanFunction::apply(in.delta.to(torch::kFloat), torch::tanh(in.theta.to(torch::kFloat))));
  const auto qk_dtype = in.qk_dtype.value_or(torch::kFloat);
  TORCH_CHECK(qk_dtype == torch::kFloat || qk_dtype == torch::kBFloat16,
              "ssm_rotary fused_cuda: q and k are written in fp32 or bf16, not ", qk_dtype,
              "; use backend ssm_rotary = \"reference\" for other dtypes");
  // The conversions stay outside the Function, so autograd casts each gradient back to its input's dtype.
  auto qk = SsmRotaryFunction::apply(in.b.to(torch::kFloat), in.c.to(torch::kFloat), in.b_bias.to(torch::kFloat),
                                     in.c_bias.to(torch::kFloat), phi, qk_dtype);
  return {.q = qk[0], .k = qk[1], .phi_last = reference::ssm_rotary_last_angle(in, phi, d)};
}

}  // namespace
}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {
ABLATE_REGISTER_BACKENDS(ssm_rotary_fused_cuda) {
  registry.ssm_rotary("fused_cuda", ABLATE_CUDA_ONLY(&fused::ssm_rotary));
}

}  // namespace ablate::kernels
