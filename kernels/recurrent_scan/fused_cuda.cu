// kernels/recurrent_scan/fused_cuda.cu: backend `fused_cuda` of the `recurrent_scan` seam, the RG-LRU of
// docs/model.md "R" with its gates fused into the scan (contract: RecurrentScanFn in kernels/dispatch.h):
//   r_t = sigmoid(gate_a_t), log a_t = -8 r_t softplus(-lambda), a_t = 1 + expm1(log a_t),
//   m_t = sqrt(1 - a_t^2) = sqrt(-e (2 + e)) with e = a_t - 1, i_t = sigmoid(gate_x_t),
//   h_t = a_t h_{t-1} + m_t i_t u_t,  h_{-1} = h0 or 0;  outputs h [B,T,W] and h_last [B,W], fp32.
// The reference (kernels/recurrent_scan/reference.cpp) materialises a, b and a per-channel L x L decay
// matrix in LibTorch ops; here nothing but h and per-chunk states touches memory.
//
// Parallel over time by chunks of kChunk = 16 steps (B*W = 8192 channels alone would fill 6 % of an
// H100). A thread owns VEC adjacent channels (2 when W is even and the pointers are aligned, else 1;
// 4 on request, see the rule in with_scan_args) of one chunk of one sequence:
//   forward  ablate_rglru_fwd_chunk: each chunk's scan from a zero state -> (sum of log a, end state);
//            ablate_rglru_carry: the states entering every chunk, a recurrence over the T/16 chunks per
//            channel (runs of chunks composed in parallel, then chained), starting from h0;
//            ablate_rglru_fwd_scan: each chunk again from its entry state, writes h (and h_last).
//   backward lambda_t = dLoss/dh_t obeys lambda_t = dh_t + a_{t+1} lambda_{t+1}: the same three steps
//            run backward in time (ablate_rglru_bwd_chunk, ablate_rglru_carry, then
//            ablate_rglru_bwd_scan, which holds its chunk's lambda in registers, recomputes h from the
//            saved chunk entry states and writes d gate_a, d gate_x, d u, a per-chunk partial of
//            d lambda and d h0); ablate_rglru_dlambda sums the partials over B and the chunks.
// Each step of a chunk scan is h = (h + e h) + b with e = expm1(log a): a = 1 + e rounded to fp32
// would lose the decay of a near 1 (a = 1 - 1e-5 is off by 0.6 % in fp32). Chunk decays are carried as
// sums of log a for the same reason. The second pass over a chunk walks the blocks in reverse order,
// so that the inputs read last by the first pass are still in L2 when it starts.
// Determinism: no atomics; d lambda is a fixed-order two-stage sum, so results are bitwise
// reproducible run to run. Graph-capturable: no host synchronisation, sizes from shapes only.
// Tests: kernels_tests --gtest_filter='*Parity*recurrent_scan*:RecurrentScanFused*'.
// Benchmark: bench/scans_bench --benchmark_filter=rglru.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "kernels/cuda_common.cuh"
#include "kernels/recurrent_scan/fused_cuda.h"
#include "kernels/recurrent_scan/reference.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kChunk = 16;     // time steps a thread scans; its lambda array in backward is kChunk * VEC floats
constexpr int kBatch = 4;      // time steps whose loads a thread issues together
static_assert(kChunk % kBatch == 0, "a chunk is whole batches");
constexpr int kThreads = 128;  // channel groups per block
constexpr float kDecayScale = float(kRecurrentDecayScale);

// ---- device side -------------------------------------------------------------------------------

template <int kBytes>
struct Packed;
template <>
struct Packed<2> {
  using type = unsigned short;
};
template <>
struct Packed<4> {
  using type = unsigned int;
};
template <>
struct Packed<8> {
  using type = uint2;
};
template <>
struct Packed<16> {
  using type = uint4;
};

// VEC consecutive elements as one access of VEC * sizeof(T) bytes (the caller guarantees alignment).
template <int VEC, typename T>
__device__ __forceinline__ void load_packed(const T* __restrict__ p, float (&out)[VEC]) {
  union {
    typename Packed<VEC * sizeof(T)>::type word;
    T elems[VEC];
  } u;
  u.word = *reinterpret_cast<const typename Packed<VEC * sizeof(T)>::type*>(p);
#pragma unroll
  for (int v = 0; v < VEC; ++v) out[v] = to_float(u.elems[v]);
}

template <int VEC, typename T>
__device__ __forceinline__ void store_packed(T* __restrict__ p, const float (&in)[VEC]) {
  union {
    typename Packed<VEC * sizeof(T)>::type word;
    T elems[VEC];
  } u;
#pragma unroll
  for (int v = 0; v < VEC; ++v) u.elems[v] = from_float<T>(in[v]);
  *reinterpret_cast<typename Packed<VEC * sizeof(T)>::type*>(p) = u.word;
}

// sigmoid(x) and 1 - sigmoid(x) = exp(-x) sigmoid(x), the latter without the cancellation of 1 - s
// near s = 1. exp(-x) = inf (x < -88) gives s = 0 and 1 - s = 1.
struct Sigmoid {
  float s, one_minus_s;
};
__device__ __forceinline__ Sigmoid sigmoid_pair(float x) {
  const float e = expf(-x);
  const float s = __fdividef(1.f, 1.f + e);
  return {s, s > 0.f ? e * s : 1.f};
}

// The decay gate at one position: r = sigmoid(gate_a), log a = r * neg_scale_sp (= -8 r softplus(-lambda)),
// e = a - 1 = expm1(log a) in [-1, 0].
struct Decay {
  float r, one_minus_r, log_a, e;
};
__device__ __forceinline__ Decay decay_gate(float gate_a, float neg_scale_sp) {
  const Sigmoid r = sigmoid_pair(gate_a);
  const float log_a = neg_scale_sp * r.s;
  return {r.s, r.one_minus_s, log_a, expm1f(log_a)};
}

// m = sqrt(1 - a^2) = sqrt(-e (2 + e)) and 1/m (0 where m = 0, i.e. a = 1: there log a = 0 and every
// gradient term that divides by m is multiplied by a factor that vanishes faster).
struct InputScale {
  float m, inv_m;
};
__device__ __forceinline__ InputScale input_scale(float e) {
  const float x = -e * (2.f + e);
  const float inv = rsqrtf(x);
  return x > 0.f ? InputScale{x * inv, inv} : InputScale{0.f, 0.f};
}

// One step of the recurrence, h_t = a h_{t-1} + b with a = 1 + e (see the header for why e).
__device__ __forceinline__ float recur(float e, float h, float b) { return fmaf(e, h, h) + b; }

// What every kernel is given; each reads and writes its own subset (the rest are null).
template <typename TG, typename TU>
struct ScanArgs {
  using Gate = TG;
  using Input = TU;
  const TG* gate_a;
  const TG* gate_x;
  const TU* u;
  const float* lambda;       // [W]
  const float* entry;        // [B,nC,W] state entering each chunk (forward h, backward lambda carry)
  float* chunk_log_decay;    // [B,nC,W] sum of log a over the chunk
  float* chunk_state;        // [B,nC,W] the chunk's scan from a zero state
  float* h;                  // [B,T,W]
  float* h_last;             // [B,W]
  const float* dh;           // [B,T,W]
  const float* fwd_entry;    // [B,nC,W] (backward) forward states entering each chunk
  TG* d_gate_a;
  TG* d_gate_x;
  TU* d_u;
  float* d_lambda_partial;   // [B,nC,W]
  float* d_h0;               // [B,W] or null
  int64_t B, T, W, chunks, groups, wblocks;
};

// The (batch, chunk, first channel) a thread owns; false for the idle threads past W. `reverse` walks
// the blocks in the opposite order.
struct Position {
  int64_t b, c, w0;
};
template <int VEC, typename A>
__device__ __forceinline__ bool position(const A& p, bool reverse, Position& pos) {
  const int64_t block = reverse ? int64_t(gridDim.x) - 1 - blockIdx.x : int64_t(blockIdx.x);
  const int64_t group = (block % p.wblocks) * kThreads + threadIdx.x;
  const int64_t rest = block / p.wblocks;
  pos = {rest / p.chunks, rest % p.chunks, group * VEC};
  return group < p.groups;
}

// Per-channel constants of lambda: neg_scale_sp = -8 softplus(-lambda) (softplus as LibTorch's, linear
// above 20) and dlog_dlambda = d(log a)/d(lambda) / r = 8 sigmoid(-lambda).
template <int VEC>
__device__ __forceinline__ void channel_constants(const float* __restrict__ lambda, int64_t w0,
                                                  float (&neg_scale_sp)[VEC], float (&dlog_dlambda)[VEC]) {
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const float x = -lambda[w0 + v];
    neg_scale_sp[v] = -kDecayScale * (x > 20.f ? x : log1pf(expf(x)));
    dlog_dlambda[v] = kDecayScale * __fdividef(1.f, 1.f + expf(-x));
  }
}

// Positions t_first .. t_first + kBatch - 1 (those before T) of `src` [B,T,W] for the thread's channels,
// every load issued before any is used: kBatch loads of each input in flight per thread.
template <int VEC, typename E>
__device__ __forceinline__ void load_steps(const E* __restrict__ src, const Position& pos, int64_t t_first, int64_t T,
                                           int64_t W, float (&out)[kBatch][VEC]) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j)
    if (t_first + j < T) load_packed<VEC>(src + (pos.b * T + t_first + j) * W + pos.w0, out[j]);
}

// Visits the thread's chunk forward in time: body(i, t, ga, gx, u) at each position t = chunk start + i
// before T, with that position's gate_a, gate_x and u (VEC channels each, fp32), loaded kBatch
// positions at a time (every load of a batch issued before the first use). Fully unrolled: i is a
// compile-time constant in body after inlining, so arrays indexed by it stay in registers.
template <int VEC, typename TG, typename TU, class Body>
__device__ __forceinline__ void forward_over_chunk(const ScanArgs<TG, TU>& p, const Position& pos, Body&& body) {
  const int64_t t0 = pos.c * kChunk;
#pragma unroll
  for (int i0 = 0; i0 < kChunk; i0 += kBatch) {
    float ga[kBatch][VEC], gx[kBatch][VEC], u[kBatch][VEC];
    load_steps<VEC>(p.gate_a, pos, t0 + i0, p.T, p.W, ga);
    load_steps<VEC>(p.gate_x, pos, t0 + i0, p.T, p.W, gx);
    load_steps<VEC>(p.u, pos, t0 + i0, p.T, p.W, u);
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (t0 + i0 + j < p.T) body(i0 + j, t0 + i0 + j, ga[j], gx[j], u[j]);
  }
}

// The same backward in time, with gate_a and dh: body(i, ga, dh).
template <int VEC, typename TG, typename TU, class Body>
__device__ __forceinline__ void backward_over_chunk(const ScanArgs<TG, TU>& p, const Position& pos, Body&& body) {
  const int64_t t0 = pos.c * kChunk;
#pragma unroll
  for (int i0 = kChunk - kBatch; i0 >= 0; i0 -= kBatch) {
    float ga[kBatch][VEC], dh[kBatch][VEC];
    load_steps<VEC>(p.gate_a, pos, t0 + i0, p.T, p.W, ga);
    load_steps<VEC>(p.dh, pos, t0 + i0, p.T, p.W, dh);
#pragma unroll
    for (int j = kBatch - 1; j >= 0; --j)
      if (t0 + i0 + j < p.T) body(i0 + j, ga[j], dh[j]);
  }
}

// h_t from h_{t-1} at one position, for the thread's channels; log a_t is added to log_decay.
template <int VEC>
__device__ __forceinline__ void forward_step(const float (&neg_scale_sp)[VEC], const float (&ga)[VEC],
                                             const float (&gx)[VEC], const float (&u)[VEC], float (&h)[VEC],
                                             float (&log_decay)[VEC]) {
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const Decay d = decay_gate(ga[v], neg_scale_sp[v]);
    h[v] = recur(d.e, h[v], input_scale(d.e).m * (sigmoid_pair(gx[v]).s * u[v]));
    log_decay[v] += d.log_a;
  }
}

// lambda_t = dh_t + carry, then carry = a_t lambda_t (what position t - 1 receives), at one position.
template <int VEC>
__device__ __forceinline__ void backward_step(const float (&neg_scale_sp)[VEC], const float (&ga)[VEC],
                                              const float (&dh)[VEC], float (&lambda)[VEC], float (&carry)[VEC]) {
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    lambda[v] = dh[v] + carry[v];
    carry[v] = fmaf(decay_gate(ga[v], neg_scale_sp[v]).e, lambda[v], lambda[v]);
  }
}

// Forward, first pass: each chunk's scan from a zero state -> (its sum of log a, its end state).
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(kThreads) ablate_rglru_fwd_chunk(ScanArgs<TG, TU> p) {
  Position pos;
  if (!position<VEC>(p, false, pos)) return;
  float neg_scale_sp[VEC], unused[VEC], state[VEC] = {}, log_decay[VEC] = {};
  channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, unused);
  forward_over_chunk<VEC>(p, pos, [&](int, int64_t, const float(&ga)[VEC], const float(&gx)[VEC], const float(&u)[VEC]) {
    forward_step<VEC>(neg_scale_sp, ga, gx, u, state, log_decay);
  });
  const int64_t at = (pos.b * p.chunks + pos.c) * p.W + pos.w0;
  store_packed<VEC>(p.chunk_state + at, state);
  store_packed<VEC>(p.chunk_log_decay + at, log_decay);
}

// Forward, second pass: each chunk from its entry state; writes h (and h_last from the last chunk).
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(kThreads) ablate_rglru_fwd_scan(ScanArgs<TG, TU> p) {
  Position pos;
  if (!position<VEC>(p, true, pos)) return;
  float neg_scale_sp[VEC], unused[VEC], h[VEC], log_decay[VEC] = {};  // log_decay: not needed here
  channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, unused);
  load_packed<VEC>(p.entry + (pos.b * p.chunks + pos.c) * p.W + pos.w0, h);
  forward_over_chunk<VEC>(p, pos, [&](int, int64_t t, const float(&ga)[VEC], const float(&gx)[VEC], const float(&u)[VEC]) {
    forward_step<VEC>(neg_scale_sp, ga, gx, u, h, log_decay);
    store_packed<VEC>(p.h + (pos.b * p.T + t) * p.W + pos.w0, h);
  });
  if (pos.c == p.chunks - 1) store_packed<VEC>(p.h_last + pos.b * p.W + pos.w0, h);
}

// Backward, first pass: each chunk's adjoint scan from a zero carry, run backward in time; the chunk's
// state is a_{first} lambda_{first} (what it hands to the chunk before it).
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(kThreads) ablate_rglru_bwd_chunk(ScanArgs<TG, TU> p) {
  Position pos;
  if (!position<VEC>(p, false, pos)) return;
  float neg_scale_sp[VEC], unused[VEC], carry[VEC] = {};
  channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, unused);
  backward_over_chunk<VEC>(p, pos, [&](int, const float(&ga)[VEC], const float(&dh)[VEC]) {
    float lambda[VEC];
    backward_step<VEC>(neg_scale_sp, ga, dh, lambda, carry);
  });
  store_packed<VEC>(p.chunk_state + (pos.b * p.chunks + pos.c) * p.W + pos.w0, carry);
}

// Backward, second pass: lambda over the chunk from its carry (kept in registers), then forward in time
// with h recomputed from the chunk's saved entry state: every gradient at each position.
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(kThreads) ablate_rglru_bwd_scan(ScanArgs<TG, TU> p) {
  Position pos;
  if (!position<VEC>(p, true, pos)) return;
  float neg_scale_sp[VEC], dlog_dlambda[VEC], carry[VEC], h[VEC];
  channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, dlog_dlambda);
  const int64_t chunk_at = (pos.b * p.chunks + pos.c) * p.W + pos.w0;
  load_packed<VEC>(p.entry + chunk_at, carry);
  float lambda[kChunk][VEC];  // dLoss/dh_t of the chunk; compile-time indices only (registers)
  backward_over_chunk<VEC>(p, pos, [&](int i, const float(&ga)[VEC], const float(&dh)[VEC]) {
    backward_step<VEC>(neg_scale_sp, ga, dh, lambda[i], carry);
  });
  if (pos.c == 0 && p.d_h0 != nullptr) store_packed<VEC>(p.d_h0 + pos.b * p.W + pos.w0, carry);  // a_0 lambda_0

  load_packed<VEC>(p.fwd_entry + chunk_at, h);
  float d_lambda[VEC] = {};
  forward_over_chunk<VEC>(p, pos, [&](int i, int64_t t, const float(&ga)[VEC], const float(&gx)[VEC],
                                      const float(&u)[VEC]) {
    float dga[VEC], dgx[VEC], du[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const Decay d = decay_gate(ga[v], neg_scale_sp[v]);
      const InputScale s = input_scale(d.e);
      const Sigmoid in = sigmoid_pair(gx[v]);
      const float lam = lambda[i][v], a = 1.f + d.e;
      const float dm = lam * in.s * u[v];                          // dLoss/dm
      const float dlog_a = lam * h[v] * a - dm * a * a * s.inv_m;  // through a, and through m (dm/dlog a = -a^2/m)
      dga[v] = dlog_a * d.log_a * d.one_minus_r;                   // dlog a/dgate_a = log a (1 - r)
      dgx[v] = lam * s.m * u[v] * in.s * in.one_minus_s;
      du[v] = lam * s.m * in.s;
      d_lambda[v] += dlog_a * d.r;
      h[v] = recur(d.e, h[v], s.m * (in.s * u[v]));
    }
    const int64_t at = (pos.b * p.T + t) * p.W + pos.w0;
    store_packed<VEC>(p.d_gate_a + at, dga);
    store_packed<VEC>(p.d_gate_x + at, dgx);
    store_packed<VEC>(p.d_u + at, du);
  });
#pragma unroll
  for (int v = 0; v < VEC; ++v) d_lambda[v] *= dlog_dlambda[v];
  store_packed<VEC>(p.d_lambda_partial + chunk_at, d_lambda);
}

// The states entering each chunk, per channel: forward (reverse = false) from `initial` (h0, or 0 when
// null) in increasing chunk order, backward from `initial` (dLoss/dh_last) in decreasing order;
// state <- exp(L_c) state + S_c, as state + expm1(L_c) state. A block is 32 channels (x: coalesced rows)
// by kCarryGroups runs of consecutive chunks (y). Each thread composes its run from a zero state (the
// run's summed log decay and end state), row y = 0 chains the runs' entries in order, and each thread
// walks its run again from its entry, writing entry[]: a serial chain of 2 chunks / kCarryGroups +
// kCarryGroups steps instead of `chunks` (a thread a channel over all 128 chunks of nam56r-small ran
// 79 us forward and 96 us backward on the H100 for 12 MB: latency, on 64 SMs). The composed form is the
// same recurrence in another association: fp32 sums of log decays (exact to ~1e-7 of their size) and the
// same expm1 step.
constexpr int kCarryGroups = 16;
__global__ void __launch_bounds__(32 * kCarryGroups)
    ablate_rglru_carry(const float* __restrict__ chunk_log_decay, const float* __restrict__ chunk_state,
                       const float* __restrict__ initial, float* __restrict__ entry, int64_t B, int64_t chunks,
                       int64_t W, bool reverse) {
  __shared__ float run_log[kCarryGroups][32], run_state[kCarryGroups][32];
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t channel = int64_t(blockIdx.x) * 32 + x;
  const bool active = channel < B * W;
  const int64_t b = active ? channel / W : 0, w = active ? channel % W : 0;
  const int64_t per = (chunks + kCarryGroups - 1) / kCarryGroups;
  const int64_t k_begin = min(chunks, y * per), k_end = min(chunks, k_begin + per);
  auto at = [&](int64_t k) { return (b * chunks + (reverse ? chunks - 1 - k : k)) * W + w; };
  float log_sum = 0.f, state = 0.f;
  if (active)
#pragma unroll 4
    for (int64_t k = k_begin; k < k_end; ++k) {
      const float l = chunk_log_decay[at(k)];
      state = fmaf(expm1f(l), state, state) + chunk_state[at(k)];
      log_sum += l;
    }
  run_log[y][x] = log_sum;
  run_state[y][x] = state;
  __syncthreads();
  if (y == 0) {  // run g's entry replaces its composed end state
    float carried = active && initial != nullptr ? initial[channel] : 0.f;
    for (int g = 0; g < kCarryGroups; ++g) {
      const float l = run_log[g][x], s = run_state[g][x];
      run_state[g][x] = carried;
      carried = fmaf(expm1f(l), carried, carried) + s;
    }
  }
  __syncthreads();
  state = run_state[y][x];
  if (active)
#pragma unroll 4
    for (int64_t k = k_begin; k < k_end; ++k) {
      entry[at(k)] = state;
      state = fmaf(expm1f(chunk_log_decay[at(k)]), state, state) + chunk_state[at(k)];
    }
}

// d lambda[w] = sum over rows (batch x chunk) of the partials, in a fixed order: each of 32 row lanes
// sums rows y, y + 32, ..., then lane 0 adds the 32 sums in order.
__global__ void __launch_bounds__(1024)
    ablate_rglru_dlambda(const float* __restrict__ partial, float* __restrict__ d_lambda, int64_t rows, int64_t W) {
  __shared__ float sums[32][33];
  const int64_t w = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.f;
  if (w < W)
    for (int64_t r = threadIdx.y; r < rows; r += 32) sum += partial[r * W + w];
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || w >= W) return;
  float total = 0.f;
  for (int y = 0; y < 32; ++y) total += sums[y][threadIdx.x];
  d_lambda[w] = total;
}

// ---- host side ---------------------------------------------------------------------------------

// tuning::recurrent_scan_channels_per_thread's choice (0: the built-in rule).
int g_forced_vec = 0;

template <typename TG, typename TU>
ScanArgs<TG, TU> make_args(const Tensor& gate_a, const Tensor& gate_x, const Tensor& u, const Tensor& lambda, int vec) {
  ScanArgs<TG, TU> p{};
  p.gate_a = static_cast<const TG*>(gate_a.data_ptr());
  p.gate_x = static_cast<const TG*>(gate_x.data_ptr());
  p.u = static_cast<const TU*>(u.data_ptr());
  p.lambda = lambda.data_ptr<float>();
  p.B = gate_a.size(0);
  p.T = gate_a.size(1);
  p.W = gate_a.size(2);
  p.chunks = ceil_div(p.T, kChunk);
  p.groups = p.W / vec;
  p.wblocks = ceil_div(p.groups, kThreads);
  return p;
}

// Calls fn(args, integral_constant<VEC>, grid) with the ScanArgs of the gate and u dtypes (inputs set,
// outputs null) and the launch's block count. VEC = the widest of 4 and 2 channels a thread that
// divides W, when every pointer is 16-byte aligned, else 1 (or the tuning override, where W and the
// pointers allow it).
template <class Fn>
void with_scan_args(const Tensor& gate_a, const Tensor& gate_x, const Tensor& u, const Tensor& lambda,
                    std::initializer_list<const Tensor*> pointers, Fn&& fn) {
  const int64_t W = gate_a.size(2);
  bool aligned = true;
  for (const Tensor* t : pointers) aligned = aligned && (!t->defined() || aligned16(t->data_ptr()));
  int vec = 1;
  // 2 by default: at nam56r-small's R shape on an H100, 4 ties in the forward (0.254 vs 0.248 ms) but its
  // backward holds kChunk * 4 lambdas per thread and runs 1.67x slower (fwd+bwd 0.98 vs 0.59 ms); 4 stays
  // selectable (tuning::recurrent_scan_channels_per_thread) for the tests and the benchmark.
  for (const int candidate : {4, 2})
    if (vec == 1 && aligned && W % candidate == 0 && (g_forced_vec == candidate || (g_forced_vec == 0 && candidate == 2)))
      vec = candidate;
  with_float_or_bf16(gate_a.scalar_type(), "gate_a", [&](auto tg) {
    with_float_or_bf16(u.scalar_type(), "u", [&](auto tu) {
      auto run = [&](auto vec_tag) {
        auto p = make_args<typename decltype(tg)::type, typename decltype(tu)::type>(gate_a, gate_x, u, lambda,
                                                                                   decltype(vec_tag)::value);
        const int64_t blocks = p.wblocks * p.chunks * p.B;
        TORCH_CHECK(blocks <= int64_t(std::numeric_limits<int32_t>::max()), "recurrent_scan fused_cuda: B*T*W = ",
                    p.B, "*", p.T, "*", p.W, " is too large for one launch");
        fn(p, vec_tag, blocks);
      };
      if (vec == 4)
        run(std::integral_constant<int, 4>{});
      else if (vec == 2)
        run(std::integral_constant<int, 2>{});
      else
        run(std::integral_constant<int, 1>{});
    });
  });
}

void launch_carry(const Tensor& log_decay, const Tensor& state, const Tensor& initial, Tensor& entry, bool reverse) {
  const int64_t B = entry.size(0), chunks = entry.size(1), W = entry.size(2);
  ablate_rglru_carry<<<ceil_div(B * W, 32), dim3(32, kCarryGroups), 0, at::cuda::getCurrentCUDAStream()>>>(
      log_decay.data_ptr<float>(), state.data_ptr<float>(), initial.defined() ? initial.data_ptr<float>() : nullptr,
      entry.data_ptr<float>(), B, chunks, W, reverse);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

class RecurrentScanFunction : public torch::autograd::Function<RecurrentScanFunction> {
 public:
  // gate_a and gate_x of one dtype, lambda and h0 fp32, all contiguous on one device. h0_in is a 0-element
  // placeholder when has_h0 is false: autograd records every Tensor input's device, and an undefined
  // one has none (it throws in VariableInfo).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& gate_a,
                                                const Tensor& gate_x, const Tensor& u, const Tensor& lambda,
                                                const Tensor& h0_in, bool has_h0) {
    const Tensor h0 = has_h0 ? h0_in : Tensor();
    const int64_t B = gate_a.size(0), T = gate_a.size(1), W = gate_a.size(2), chunks = ceil_div(T, kChunk);
    const auto f32 = gate_a.options().dtype(torch::kFloat);
    Tensor h = torch::empty({B, T, W}, f32), h_last = torch::empty({B, W}, f32);
    Tensor log_decay = torch::empty({B, chunks, W}, f32), state = torch::empty({B, chunks, W}, f32);
    Tensor entry = torch::empty({B, chunks, W}, f32);
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_scan_args(gate_a, gate_x, u, lambda, {&gate_a, &gate_x, &u, &h, &h_last}, [&](auto p, auto vec, int64_t grid) {
      constexpr int VEC = decltype(vec)::value;
      p.chunk_log_decay = log_decay.data_ptr<float>();
      p.chunk_state = state.data_ptr<float>();
      ablate_rglru_fwd_chunk<VEC><<<grid, kThreads, 0, stream>>>(p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      launch_carry(log_decay, state, h0, entry, /*reverse=*/false);
      p.entry = entry.data_ptr<float>();
      p.h = h.data_ptr<float>();
      p.h_last = h_last.data_ptr<float>();
      ablate_rglru_fwd_scan<VEC><<<grid, kThreads, 0, stream>>>(p);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    ctx->save_for_backward({gate_a, gate_x, u, lambda, log_decay, entry});
    ctx->saved_data["has_h0"] = has_h0;
    return {h, h_last};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(), "recurrent_scan fused_cuda: double backward is not implemented");
    const auto saved = ctx->get_saved_variables();
    const Tensor &gate_a = saved[0], &gate_x = saved[1], &u = saved[2], &lambda = saved[3];
    const Tensor &log_decay = saved[4], &fwd_entry = saved[5];
    const int64_t B = gate_a.size(0), T = gate_a.size(1), W = gate_a.size(2), chunks = log_decay.size(1);
    const auto f32 = gate_a.options().dtype(torch::kFloat);
    const Tensor dh = grads[0].defined() ? on_device(grads[0].to(torch::kFloat), gate_a, "dh")
                                         : torch::zeros({B, T, W}, f32);
    const Tensor dh_last = grads[1].defined() ? on_device(grads[1].to(torch::kFloat), gate_a, "dh_last") : Tensor();
    Tensor d_gate_a = torch::empty_like(gate_a), d_gate_x = torch::empty_like(gate_x), d_u = torch::empty_like(u);
    Tensor state = torch::empty({B, chunks, W}, f32), entry = torch::empty({B, chunks, W}, f32);
    Tensor partial = torch::empty({B, chunks, W}, f32), d_lambda = torch::empty({W}, f32);
    const bool has_h0 = ctx->saved_data["has_h0"].toBool();
    Tensor d_h0 = has_h0 ? torch::empty({B, W}, f32) : Tensor();
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_scan_args(gate_a, gate_x, u, lambda, {&gate_a, &gate_x, &u, &dh, &d_gate_a, &d_gate_x, &d_u, &d_h0},
                   [&](auto p, auto vec, int64_t grid) {
                     using Args = decltype(p);
                     constexpr int VEC = decltype(vec)::value;
                     p.dh = dh.data_ptr<float>();
                     p.chunk_state = state.data_ptr<float>();
                     ablate_rglru_bwd_chunk<VEC><<<grid, kThreads, 0, stream>>>(p);
                     C10_CUDA_KERNEL_LAUNCH_CHECK();
                     launch_carry(log_decay, state, dh_last, entry, /*reverse=*/true);
                     p.entry = entry.data_ptr<float>();
                     p.fwd_entry = fwd_entry.data_ptr<float>();
                     p.d_gate_a = static_cast<typename Args::Gate*>(d_gate_a.data_ptr());
                     p.d_gate_x = static_cast<typename Args::Gate*>(d_gate_x.data_ptr());
                     p.d_u = static_cast<typename Args::Input*>(d_u.data_ptr());
                     p.d_lambda_partial = partial.data_ptr<float>();
                     p.d_h0 = has_h0 ? d_h0.data_ptr<float>() : nullptr;
                     ablate_rglru_bwd_scan<VEC><<<grid, kThreads, 0, stream>>>(p);
                     C10_CUDA_KERNEL_LAUNCH_CHECK();
                   });
    ablate_rglru_dlambda<<<ceil_div(W, 32), dim3(32, 32), 0, stream>>>(partial.data_ptr<float>(),
                                                                       d_lambda.data_ptr<float>(), B * chunks, W);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {d_gate_a, d_gate_x, d_u, d_lambda, d_h0, Tensor()};
  }
};

// fp32 or bf16 only: what the kernels read (anything else is a caller bug, reported with its name).
void check_float_or_bf16(const Tensor& t, const char* what) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, "recurrent_scan fused_cuda: ", what,
              " must be fp32 or bf16, got ", t.scalar_type());
}

}  // namespace

namespace tuning {
void recurrent_scan_channels_per_thread(int vec) {
  TORCH_CHECK(vec == 0 || vec == 1 || vec == 2 || vec == 4, "recurrent_scan_channels_per_thread: 0, 1, 2 or 4, got ",
              vec);
  g_forced_vec = vec;
}
}  // namespace tuning

RecurrentScanOutputs recurrent_scan(const RecurrentScanInputs& in) {
  reference::check_recurrent_scan_args(in);
  for (const auto& [t, what] : {std::pair{&in.gate_a, "gate_a"}, std::pair{&in.gate_x, "gate_x"},
                                std::pair{&in.u, "u"}, std::pair{&in.lambda, "lambda"}, std::pair{&in.h0, "h0"}}) {
    if (!t->defined()) continue;
    check_float_or_bf16(*t, what);
    TORCH_CHECK(t->is_cuda(), "recurrent_scan fused_cuda: ", what, " must be a CUDA tensor (got ", t->device(),
                "); use the reference backend on the CPU");
    TORCH_CHECK(t->device() == in.gate_a.device(), "recurrent_scan fused_cuda: ", what, " is on ", t->device(),
                ", gate_a on ", in.gate_a.device());
  }
  const int64_t B = in.gate_a.size(0), T = in.gate_a.size(1), W = in.gate_a.size(2);
  const auto f32 = in.gate_a.options().dtype(torch::kFloat);
  // Casts outside the Function: autograd casts the gradients back to the callers' dtypes.
  const Tensor h0 = in.h0.defined() ? in.h0.to(torch::kFloat) : Tensor();
  if (T == 0 || B == 0 || W == 0) {  // nothing to scan: h is empty, h_last is the entry state
    return RecurrentScanOutputs{torch::zeros({B, T, W}, f32), h0.defined() ? h0.clone() : torch::zeros({B, W}, f32)};
  }
  const c10::cuda::CUDAGuard device_guard(in.gate_a.device());
  // The kernels read both gates in one dtype: when they differ, both in fp32 (exact; one extra pass).
  const auto gates = in.gate_a.scalar_type() == in.gate_x.scalar_type() ? in.gate_a.scalar_type() : at::kFloat;
  const auto outputs = RecurrentScanFunction::apply(
      in.gate_a.to(gates).contiguous(), in.gate_x.to(gates).contiguous(), in.u.contiguous(),
      in.lambda.to(torch::kFloat).contiguous(), h0.defined() ? h0.contiguous() : torch::empty({0}, f32),
      h0.defined());
  return RecurrentScanOutputs{outputs[0], outputs[1]};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(recurrent_scan_fused_cuda) {
  registry.recurrent_scan({.name = "fused_cuda",
                           .role = Role::experimental,
                           .fallback = "reference",
                           .kernel_patterns = {"ablate_rglru_"},
                           .description = "kernels/recurrent_scan/fused_cuda.cu: gates and recurrence fused, "
                                          "chunked over time (chunk scans, carry, rescan) forward and "
                                          "backward; deterministic d lambda",
                           .unavailable_reason = &availability::hopper_fp32_or_bf16},
                          ABLATE_CUDA_ONLY(&fused::recurrent_scan));
}

}  // namespace ablate::kernels
