// kernels/recurrent_scan/fused_cuda.cu: backend `fused_cuda` of the `recurrent_scan` seam, the RG-LRU of
// docs/model.md "R" with its gates fused into the scan (contract: RecurrentScanFn in kernels/dispatch.h):
//   r_t = sigmoid(gate_a_t), log a_t = -8 r_t softplus(-lambda), a_t = 1 + expm1(log a_t),
//   m_t = sqrt(1 - a_t^2) = sqrt(-e (2 + e)) with e = a_t - 1, i_t = sigmoid(gate_x_t),
//   h_t = a_t h_{t-1} + m_t i_t u_t,  h_{-1} = h0 or 0;  outputs h [B,T,W] and h_last [B,W], fp32.
// The reference (kernels/recurrent_scan/reference.cpp) materialises a, b and a per-channel L x L decay
// matrix in LibTorch ops; here nothing but h, the gradients and a state per chunk touches memory.
//
// One pass each way, parallel over time by chunks of kChunk = 16 steps (B*W = 8192 channels alone would
// fill 6 % of an H100). A warp owns 32 * VEC adjacent channels (VEC = 2 when W is even and the
// pointers are aligned, else 1) of one chunk; a block is kRun = 8 warps, the consecutive chunks of a run.
//   forward  ablate_rglru_fwd: each warp scans its chunk from a zero state, keeping each step's state
//            and summed log a in registers; warp 0 composes the run, takes the state entering it from
//            the previous run's block (a chain through memory, see RunChain), publishes the run's exit
//            and hands each chunk its entry state; then h_t = local_t + exp(sum of log a) * entry.
//   backward ablate_rglru_bwd: lambda_t = dLoss/dh_t obeys lambda_t = dh_t + a_{t+1} lambda_{t+1}: the
//            same chained scan backward in time, then forward over the chunk with h recomputed from
//            the saved chunk entry state: d gate_a, d gate_x, d u, a per-run partial of d lambda and
//            d h0; ablate_rglru_dlambda sums the partials over B and the runs.
// Inputs are read once each way (the former three passes a direction -- chunk scans, carry, rescan --
// read them twice and computed the gates twice; ~0.43 ms fwd+bwd on the H100 at nam56r-small's R shape).
// Each step of a chunk scan is h = (h + e h) + b with e = expm1(log a): a = 1 + e rounded to fp32
// would lose the decay of a near 1 (a = 1 - 1e-5 is off by 0.6 % in fp32). Chunk decays are carried as
// sums of log a for the same reason.
// Determinism: no atomics on values (one ticket counter orders the blocks); every association is
// fixed, d lambda is a fixed-order two-stage sum: bitwise reproducible run to run. Graph-capturable: no
// host synchronisation, sizes from shapes only; the chain's flags are zeroed on the stream each call.
// Tests: kernels_tests --gtest_filter='*Parity*recurrent_scan*:RecurrentScanFused*'.
// Benchmark: bench/kernels_bench --benchmark_filter=rglru (kernels/recurrent_scan/bench.cpp).
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

constexpr int kChunk = 16;  // time steps a thread scans; it keeps 2 x kChunk x VEC floats in registers each way
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
  float* h;                  // [B,T,W]
  float* h_last;             // [B,W]
  float* fwd_entry_out;      // [B,nC,W] (forward) the state entering each chunk, saved for the backward
  const float* dh;           // [B,T,W]
  const float* fwd_entry;    // [B,nC,W] (backward) the forward's states entering each chunk
  TG* d_gate_a;
  TG* d_gate_x;
  TU* d_u;
  float* d_lambda_partial;   // [B,runs,W]
  int64_t B, T, W, chunks, groups, wblocks;
  bool pieces;               // gate_a, gate_x and u rows are whole 16-byte pieces (stage_tile)
  bool dh_pieces;            // dh's rows are
};

// The (batch, chunk, first channel) a thread owns.
struct Position {
  int64_t b, c, w0;
};

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

// ---- the single pass: chunk scans chained by runs --------------------------------------------
// A block is kRun warps by 32 * VEC channels: warp k scans chunk g * kRun + k of run g, its lanes the
// channels. The runs of one (batch, channel block) are chained in order (forward in time for the
// forward, backward for the adjoints) through `RunChain`: each block publishes its run's exit state as
// soon as its predecessor's is known, and blocks take run-major tickets in the order they start, so the
// block a run waits for has started (no deadlock) and the chain moves with the wave of resident blocks.
// Every association is fixed (the run composed from zero, then chained; the chunks inside a run walked
// in order from the run's entry), so results do not depend on timing: bitwise reproducible.
constexpr int kRun = 8;

// What the chained kernels share: words [B, runs, W] hold each run's exit as (1 << 32) | float bits
// (0: not yet published; a 64-bit store is read whole, so value and flag arrive together), zeroed
// before the launch with the ticket counter.
struct RunChain {
  unsigned long long* words;
  unsigned int* ticket;
  const float* initial;  // [B,W] state entering the first run in chain order, or null (0)
  float* final_exit;     // [B,W] the last run's exit in chain order, or null
  int64_t runs;
};

// The block's run g, batch b and channel block wb, from the ticket it takes (every thread gets it).
struct RunTile {
  int64_t g, b, wb;
};
__device__ __forceinline__ RunTile take_ticket(const RunChain& chain, int64_t B, int64_t wblocks, bool reverse) {
  __shared__ unsigned int ticket;
  if (threadIdx.x == 0 && threadIdx.y == 0) ticket = atomicAdd(chain.ticket, 1u);
  __syncthreads();
  const int64_t per_run = B * wblocks, run = int64_t(ticket) / per_run, rest = int64_t(ticket) % per_run;
  return {reverse ? chain.runs - 1 - run : run, rest / wblocks, rest % wblocks};
}

__device__ __forceinline__ float wait_for_exit(const unsigned long long* word) {
  unsigned long long w;
  while (((w = *reinterpret_cast<const volatile unsigned long long*>(word)) >> 32) == 0) __nanosleep(32);
  return __uint_as_float(static_cast<unsigned int>(w));
}

// Warp 0 of a block, after every warp left its chunk's (sum of log a, end state from zero) in
// agg_log / agg_state: composes the run from zero, takes the run's entry (from `initial` for the first
// run in chain order, else from the previous run's published exit), publishes the run's exit, and
// replaces each chunk's agg_state with the state entering that chunk. Chunks past the sequence are
// (0, 0): the identity. state <- exp(L) state + S is computed as state + expm1(L) state.
template <int VEC>
__device__ __forceinline__ void chain_run(float (&agg_log)[kRun][32 * VEC], float (&agg_state)[kRun][32 * VEC],
                                          const RunChain& chain, const RunTile& tile, int64_t W, int64_t groups,
                                          bool reverse) {
  const int lane = threadIdx.x;
  const int64_t group = tile.wb * 32 + lane;
  if (group >= groups) return;
  const bool first = reverse ? tile.g == chain.runs - 1 : tile.g == 0;
  const bool last = reverse ? tile.g == 0 : tile.g == chain.runs - 1;
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const int j = lane * VEC + v;
    const int64_t w = group * VEC + v;
    float log_sum = 0.f, composed = 0.f;
#pragma unroll
    for (int kk = 0; kk < kRun; ++kk) {
      const int k = reverse ? kRun - 1 - kk : kk;
      composed = fmaf(expm1f(agg_log[k][j]), composed, composed) + agg_state[k][j];
      log_sum += agg_log[k][j];
    }
    float entry = 0.f;
    if (first)
      entry = chain.initial != nullptr ? chain.initial[tile.b * W + w] : 0.f;
    else
      entry = wait_for_exit(chain.words + (tile.b * chain.runs + (reverse ? tile.g + 1 : tile.g - 1)) * W + w);
    const float exit = fmaf(expm1f(log_sum), entry, entry) + composed;
    if (!last)
      *reinterpret_cast<volatile unsigned long long*>(chain.words + (tile.b * chain.runs + tile.g) * W + w) =
          (1ull << 32) | __float_as_uint(exit);
    else if (chain.final_exit != nullptr)
      chain.final_exit[tile.b * W + w] = exit;
#pragma unroll
    for (int kk = 0; kk < kRun; ++kk) {
      const int k = reverse ? kRun - 1 - kk : kk;
      const float l = agg_log[k][j], s = agg_state[k][j];
      agg_state[k][j] = entry;
      entry = fmaf(expm1f(l), entry, entry) + s;
    }
  }
}

// The block's tiles in shared memory: its run's kRunSteps time steps (rows) by its 32 * VEC channels
// (columns) of each input it reads, row-major, staged once at the start: every load of the block in
// flight together (loads issued a few steps at a time from the scan loop left the SMs waiting on
// memory at half an instruction a cycle) and no per-step address arithmetic.
constexpr int kRunSteps = kRun * kChunk;

template <int VEC, typename E>
__device__ __forceinline__ E* carve_tile(unsigned char*& at) {
  E* tile = reinterpret_cast<E*>(at);
  at += kRunSteps * 32 * VEC * sizeof(E);
  return tile;
}

// Rows t_first .. (kRunSteps of them, those before T) and the block's channels (those before W) of `src`
// [B,T,W] into `tile`; the rest of the tile is left as it was (nothing reads it). `pieces`: every row of
// `src` is whole 16-byte pieces (W * sizeof(E) a multiple of 16, the pointer 16-byte aligned; decided
// per launch), copied by cp.async; else element by element. The caller waits (cp_async_wait_all) and
// syncs before reading.
template <int VEC, typename E>
__device__ __forceinline__ void stage_tile(E* tile, const E* __restrict__ src, const Position& first, int64_t T,
                                           int64_t W, bool pieces) {
  constexpr int kCols = 32 * VEC;
  const int thread = threadIdx.y * 32 + threadIdx.x;
  const int64_t t_first = first.c * kChunk, w_first = first.w0;
  const E* base = src + (first.b * T + t_first) * W + w_first;
  if (pieces) {
    constexpr int kPer = 16 / sizeof(E), kPieces = kCols / kPer;  // pieces a row
    static_assert(kCols % kPer == 0, "a tile row is whole 16-byte pieces");
    for (int i = thread; i < kRunSteps * kPieces; i += 32 * kRun) {
      const int r = i / kPieces, col = i % kPieces * kPer;
      if (t_first + r < T && w_first + col < W) cp_async16(tile + r * kCols + col, base + r * W + col, true);
    }
  } else {
    for (int i = thread; i < kRunSteps * kCols; i += 32 * kRun) {
      const int r = i / kCols, col = i % kCols;
      if (t_first + r < T && w_first + col < W) tile[r * kCols + col] = base[r * W + col];
    }
  }
}

// The thread's VEC channels at row i of its warp's chunk in a tile.
template <int VEC, typename E>
__device__ __forceinline__ void tile_at(const E* tile, int i, float (&out)[VEC]) {
  load_packed<VEC>(tile + (threadIdx.y * kChunk + i) * 32 * VEC + threadIdx.x * VEC, out);
}

// The thread's chunk and channels inside its block's run (c = the chunk, w0 = its first channel), and
// the block's first (warp 0 lane 0's); false for the idle threads (past W or past the last chunk), which
// still take part in the block's barriers.
template <int VEC, typename A>
__device__ __forceinline__ bool run_position(const A& p, const RunTile& tile, Position& pos, Position& first) {
  first = {tile.b, tile.g * kRun, tile.wb * 32 * VEC};
  pos = {tile.b, first.c + threadIdx.y, first.w0 + threadIdx.x * VEC};
  return pos.w0 < p.groups * VEC && pos.c < p.chunks;
}

// The block's step through the chain, every thread: leaves its chunk's (summed log a, end state from
// zero) for warp 0, which runs chain_run, and returns the state entering its chunk (forward h, backward
// the carry from the chunk after it).
template <int VEC>
__device__ __forceinline__ void chunk_entry(float (&agg_log)[kRun][32 * VEC], float (&agg_state)[kRun][32 * VEC],
                                            const float (&log_sum)[VEC], const float (&state)[VEC],
                                            const RunChain& chain, const RunTile& tile, int64_t W, int64_t groups,
                                            bool reverse, float (&entry)[VEC]) {
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    agg_log[threadIdx.y][threadIdx.x * VEC + v] = log_sum[v];
    agg_state[threadIdx.y][threadIdx.x * VEC + v] = state[v];
  }
  __syncthreads();
  if (threadIdx.y == 0) chain_run<VEC>(agg_log, agg_state, chain, tile, W, groups, reverse);
  __syncthreads();
#pragma unroll
  for (int v = 0; v < VEC; ++v) entry[v] = agg_state[threadIdx.y][threadIdx.x * VEC + v];
}

// Shared-memory bytes of a chained kernel: its tiles (gate_a, gate_x, u; the backward also dh).
template <int VEC, typename TG, typename TU>
constexpr size_t tile_bytes(bool backward) {
  return size_t(kRunSteps) * 32 * VEC * (2 * sizeof(TG) + sizeof(TU) + (backward ? sizeof(float) : 0));
}

// What both chained kernels start with: the block's ticket (its run, batch and channel block), the
// thread's position in it, and the block's input tiles staged (gate_a, gate_x, u; dh for the backward),
// complete and visible to the block once constructed.
template <int VEC, typename TG, typename TU>
struct BlockRun {
  RunTile tile;
  Position pos;
  bool active;  // the thread has channels and a chunk (run_position)
  int steps;    // time steps of its chunk before T (<= 0 for an idle chunk)
  TG *ga, *gx;
  TU* u;
  float* dh;
  __device__ __forceinline__ BlockRun(const ScanArgs<TG, TU>& p, const RunChain& chain, bool backward)
      : tile(take_ticket(chain, p.B, p.wblocks, /*reverse=*/backward)) {
    extern __shared__ __align__(16) unsigned char smem[];
    Position first;
    active = run_position<VEC>(p, tile, pos, first);
    const int64_t t0 = pos.c * kChunk;
    steps = int(p.T - t0 < kChunk ? p.T - t0 : kChunk);
    unsigned char* at = smem;
    ga = carve_tile<VEC, TG>(at);
    gx = carve_tile<VEC, TG>(at);
    u = carve_tile<VEC, TU>(at);
    dh = backward ? carve_tile<VEC, float>(at) : nullptr;
    stage_tile<VEC>(ga, p.gate_a, first, p.T, p.W, p.pieces);
    if (backward) stage_tile<VEC>(dh, p.dh, first, p.T, p.W, p.dh_pieces);
    stage_tile<VEC>(gx, p.gate_x, first, p.T, p.W, p.pieces);
    stage_tile<VEC>(u, p.u, first, p.T, p.W, p.pieces);
    cp_async_wait_all();
    __syncthreads();
  }
};

// Forward: each warp scans its chunk from a zero state, keeping every step's state and summed log a;
// with the chunk's entry state from the chain, h_t = local_t + exp(sum of log a through t) * entry.
// Writes h, h_last and each chunk's entry state (for the backward).
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(32 * kRun) ablate_rglru_fwd(ScanArgs<TG, TU> p, RunChain chain) {
  __shared__ float agg_log[kRun][32 * VEC], agg_state[kRun][32 * VEC];
  const BlockRun<VEC, TG, TU> run(p, chain, /*backward=*/false);
  const RunTile& tile = run.tile;
  const Position& pos = run.pos;
  const bool active = run.active;
  const int64_t t0 = pos.c * kChunk;
  const int steps = run.steps;
  float local[kChunk][VEC], log_through[kChunk][VEC];      // compile-time indices only (registers)
  float state[VEC] = {}, log_sum[VEC] = {};
  if (active) {
    float neg_scale_sp[VEC], unused[VEC];
    channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, unused);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i >= steps) break;
      float ga[VEC], gx[VEC], u[VEC];
      tile_at<VEC>(run.ga, i, ga);
      tile_at<VEC>(run.gx, i, gx);
      tile_at<VEC>(run.u, i, u);
      forward_step<VEC>(neg_scale_sp, ga, gx, u, state, log_sum);
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        local[i][v] = state[v];
        log_through[i][v] = log_sum[v];
      }
    }
  }
  float entry[VEC];
  chunk_entry<VEC>(agg_log, agg_state, log_sum, state, chain, tile, p.W, p.groups, /*reverse=*/false, entry);
  if (!active) return;
  store_packed<VEC>(p.fwd_entry_out + (pos.b * p.chunks + pos.c) * p.W + pos.w0, entry);
  float* h = p.h + (pos.b * p.T + t0) * p.W + pos.w0;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    if (i >= steps) break;
    float out[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) out[v] = fmaf(expf(log_through[i][v]), entry[v], local[i][v]);
    store_packed<VEC>(h + i * p.W, out);
    if (t0 + i == p.T - 1) store_packed<VEC>(p.h_last + pos.b * p.W + pos.w0, out);
  }
}

// Backward: lambda_t = dLoss/dh_t obeys lambda_t = dh_t + a_{t+1} lambda_{t+1}. Each warp runs its chunk's
// adjoint backward in time from a zero carry, keeping every step's lambda and the summed log a after
// it; with the carry entering the chunk from the chain (a_{t+1} lambda_{t+1} of the chunk after it),
// lambda_t = local_t + exp(sum of log a after t) * carry. Then forward in time with h recomputed from
// the chunk's saved entry state: every gradient at each position, d h0 (the carry out of chunk 0) and
// the run's d lambda partial (its chunks summed in order).
template <int VEC, typename TG, typename TU>
__global__ void __launch_bounds__(32 * kRun) ablate_rglru_bwd(ScanArgs<TG, TU> p, RunChain chain) {
  __shared__ float agg_log[kRun][32 * VEC], agg_state[kRun][32 * VEC];
  const BlockRun<VEC, TG, TU> run(p, chain, /*backward=*/true);
  const RunTile& tile = run.tile;
  const Position& pos = run.pos;
  const bool active = run.active;
  const int64_t t0 = pos.c * kChunk;
  const int steps = run.steps;
  float lambda[kChunk][VEC], log_after[kChunk][VEC];       // compile-time indices only (registers)
  float carry[VEC] = {}, log_sum[VEC] = {}, neg_scale_sp[VEC], dlog_dlambda[VEC];
  if (active) {
    channel_constants<VEC>(p.lambda, pos.w0, neg_scale_sp, dlog_dlambda);
#pragma unroll
    for (int i = kChunk - 1; i >= 0; --i) {
      if (i >= steps) continue;
      float ga[VEC], dh[VEC];
      tile_at<VEC>(run.ga, i, ga);
      tile_at<VEC>(run.dh, i, dh);
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const Decay d = decay_gate(ga[v], neg_scale_sp[v]);
        log_after[i][v] = log_sum[v];
        lambda[i][v] = dh[v] + carry[v];
        carry[v] = fmaf(d.e, lambda[i][v], lambda[i][v]);
        log_sum[v] += d.log_a;
      }
    }
  }
  float entering[VEC];
  chunk_entry<VEC>(agg_log, agg_state, log_sum, carry, chain, tile, p.W, p.groups, /*reverse=*/true, entering);
  float d_lambda[VEC] = {};
  if (active) {
    float h[VEC];
    load_packed<VEC>(p.fwd_entry + (pos.b * p.chunks + pos.c) * p.W + pos.w0, h);
    const int64_t row0 = (pos.b * p.T + t0) * p.W + pos.w0;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      if (i >= steps) break;
      float ga[VEC], gx[VEC], u[VEC], dga[VEC], dgx[VEC], du[VEC];
      tile_at<VEC>(run.ga, i, ga);
      tile_at<VEC>(run.gx, i, gx);
      tile_at<VEC>(run.u, i, u);
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const Decay d = decay_gate(ga[v], neg_scale_sp[v]);
        const InputScale s = input_scale(d.e);
        const Sigmoid in = sigmoid_pair(gx[v]);
        const float lam = fmaf(expf(log_after[i][v]), entering[v], lambda[i][v]), a = 1.f + d.e;
        const float dm = lam * in.s * u[v];                          // dLoss/dm
        const float dlog_a = lam * h[v] * a - dm * a * a * s.inv_m;  // through a, and through m (dm/dlog a = -a^2/m)
        dga[v] = dlog_a * d.log_a * d.one_minus_r;                   // dlog a/dgate_a = log a (1 - r)
        dgx[v] = lam * s.m * u[v] * in.s * in.one_minus_s;
        du[v] = lam * s.m * in.s;
        d_lambda[v] += dlog_a * d.r;
        h[v] = recur(d.e, h[v], s.m * (in.s * u[v]));
      }
      const int64_t at_row = row0 + i * p.W;
      store_packed<VEC>(p.d_gate_a + at_row, dga);
      store_packed<VEC>(p.d_gate_x + at_row, dgx);
      store_packed<VEC>(p.d_u + at_row, du);
    }
#pragma unroll
    for (int v = 0; v < VEC; ++v) d_lambda[v] *= dlog_dlambda[v];
  }
  // The run's d lambda partial: its chunks' sums added in chunk order.
  __syncthreads();
#pragma unroll
  for (int v = 0; v < VEC; ++v) agg_log[threadIdx.y][threadIdx.x * VEC + v] = d_lambda[v];
  __syncthreads();
  if (threadIdx.y != 0 || pos.w0 >= p.groups * VEC) return;
  float partial[VEC] = {};
#pragma unroll
  for (int k = 0; k < kRun; ++k)
#pragma unroll
    for (int v = 0; v < VEC; ++v) partial[v] += agg_log[k][threadIdx.x * VEC + v];
  store_packed<VEC>(p.d_lambda_partial + (tile.b * chain.runs + tile.g) * p.W + pos.w0, partial);
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

// tuning::recurrent_scan_channels_per_thread's choice (0: kDefaultVec). 1 by default: a thread keeps
// 2 x kChunk floats a channel in registers each way, and with 2 channels the backward needs ~170
// registers (one block of 8 warps an SM), with 1 about 100.
int g_forced_vec = 0;
constexpr int kDefaultVec = 1;

// Whether stage_tile may copy t's rows ([B,T,W], contiguous) as 16-byte pieces.
bool rows_in_pieces(const Tensor& t) { return aligned16(t.data_ptr()) && t.size(2) * t.element_size() % 16 == 0; }

// Dynamic shared memory of a chained launch (its tiles), allowed above the default 48 KB where needed.
template <class Kernel>
size_t allow_tiles(Kernel kernel, size_t bytes) {
  allow_dynamic_smem(kernel, bytes, "recurrent_scan fused_cuda: the chained scan's tiles");
  return bytes;
}

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
  p.wblocks = ceil_div(p.groups, 32);
  p.pieces = rows_in_pieces(gate_a) && rows_in_pieces(gate_x) && rows_in_pieces(u);
  return p;
}

int64_t runs_of(int64_t T) { return ceil_div(ceil_div(T, kChunk), kRun); }

// Calls fn(args, integral_constant<VEC>, grid) with the ScanArgs of the gate and u dtypes (inputs set,
// outputs null) and the launch's block count. VEC = kDefaultVec channels a thread (or the tuning
// override's), 2 only where W is even and every pointer is 16-byte aligned.
template <class Fn>
void with_scan_args(const Tensor& gate_a, const Tensor& gate_x, const Tensor& u, const Tensor& lambda,
                    std::initializer_list<const Tensor*> pointers, Fn&& fn) {
  const int64_t W = gate_a.size(2);
  bool aligned = true;
  for (const Tensor* t : pointers) aligned = aligned && (!t->defined() || aligned16(t->data_ptr()));
  const int wanted = g_forced_vec != 0 ? g_forced_vec : kDefaultVec;
  const int vec = wanted == 2 && aligned && W % 2 == 0 ? 2 : 1;
  with_float_or_bf16(gate_a.scalar_type(), "gate_a", [&](auto tg) {
    with_float_or_bf16(u.scalar_type(), "u", [&](auto tu) {
      auto run = [&](auto vec_tag) {
        auto p = make_args<typename decltype(tg)::type, typename decltype(tu)::type>(gate_a, gate_x, u, lambda,
                                                                                   decltype(vec_tag)::value);
        const int64_t blocks = p.wblocks * runs_of(p.T) * p.B;
        TORCH_CHECK(blocks <= int64_t(std::numeric_limits<int32_t>::max()), "recurrent_scan fused_cuda: B*T*W = ",
                    p.B, "*", p.T, "*", p.W, " is too large for one launch");
        fn(p, vec_tag, blocks);
      };
      if (vec == 2)
        run(std::integral_constant<int, 2>{});
      else
        run(std::integral_constant<int, 1>{});
    });
  });
}

// The zeroed words and ticket of one chained launch (`storage` keeps them alive until the launch is
// queued; the caching allocator orders their reuse on the stream).
RunChain make_chain(Tensor& storage, const Tensor& like, const Tensor& initial, float* final_exit) {
  const int64_t B = like.size(0), runs = runs_of(like.size(1)), W = like.size(2);
  storage = torch::zeros({B * runs * W + 1}, like.options().dtype(torch::kLong));
  auto* words = reinterpret_cast<unsigned long long*>(storage.data_ptr<int64_t>());
  return {words, reinterpret_cast<unsigned int*>(words + B * runs * W),
          initial.defined() ? initial.data_ptr<float>() : nullptr, final_exit, runs};
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
    Tensor entry = torch::empty({B, chunks, W}, f32), chain_storage;
    const RunChain chain = make_chain(chain_storage, gate_a, h0, nullptr);
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_scan_args(gate_a, gate_x, u, lambda, {&gate_a, &gate_x, &u, &h, &h_last}, [&](auto p, auto vec, int64_t grid) {
      constexpr int VEC = decltype(vec)::value;
      p.h = h.data_ptr<float>();
      p.h_last = h_last.data_ptr<float>();
      p.fwd_entry_out = entry.data_ptr<float>();
      using Args = decltype(p);
      auto* kernel = ablate_rglru_fwd<VEC, typename Args::Gate, typename Args::Input>;
      const size_t bytes = allow_tiles(kernel, tile_bytes<VEC, typename Args::Gate, typename Args::Input>(false));
      kernel<<<grid, dim3(32, kRun), bytes, stream>>>(p, chain);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    ctx->save_for_backward({gate_a, gate_x, u, lambda, entry});
    ctx->saved_data["has_h0"] = has_h0;
    return {h, h_last};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(), "recurrent_scan fused_cuda: double backward is not implemented");
    const auto saved = ctx->get_saved_variables();
    const Tensor &gate_a = saved[0], &gate_x = saved[1], &u = saved[2], &lambda = saved[3], &fwd_entry = saved[4];
    const int64_t B = gate_a.size(0), T = gate_a.size(1), W = gate_a.size(2), runs = runs_of(T);
    const auto f32 = gate_a.options().dtype(torch::kFloat);
    const Tensor dh = grads[0].defined() ? on_device(grads[0].to(torch::kFloat), gate_a, "dh")
                                         : torch::zeros({B, T, W}, f32);
    const Tensor dh_last = grads[1].defined() ? on_device(grads[1].to(torch::kFloat), gate_a, "dh_last") : Tensor();
    Tensor d_gate_a = torch::empty_like(gate_a), d_gate_x = torch::empty_like(gate_x), d_u = torch::empty_like(u);
    Tensor partial = torch::empty({B, runs, W}, f32), d_lambda = torch::empty({W}, f32);
    const bool has_h0 = ctx->saved_data["has_h0"].toBool();
    Tensor d_h0 = has_h0 ? torch::empty({B, W}, f32) : Tensor(), chain_storage;
    const RunChain chain = make_chain(chain_storage, gate_a, dh_last, has_h0 ? d_h0.data_ptr<float>() : nullptr);
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_scan_args(gate_a, gate_x, u, lambda, {&gate_a, &gate_x, &u, &dh, &d_gate_a, &d_gate_x, &d_u, &d_h0},
                   [&](auto p, auto vec, int64_t grid) {
                     using Args = decltype(p);
                     constexpr int VEC = decltype(vec)::value;
                     p.dh = dh.data_ptr<float>();
                     p.fwd_entry = fwd_entry.data_ptr<float>();
                     p.d_gate_a = static_cast<typename Args::Gate*>(d_gate_a.data_ptr());
                     p.d_gate_x = static_cast<typename Args::Gate*>(d_gate_x.data_ptr());
                     p.d_u = static_cast<typename Args::Input*>(d_u.data_ptr());
                     p.d_lambda_partial = partial.data_ptr<float>();
                     p.dh_pieces = rows_in_pieces(dh);
                     using TG = typename Args::Gate;
                     using TU = typename Args::Input;
                     auto* kernel = ablate_rglru_bwd<VEC, TG, TU>;
                     const size_t bytes = allow_tiles(kernel, tile_bytes<VEC, TG, TU>(true));
                     kernel<<<grid, dim3(32, kRun), bytes, stream>>>(p, chain);
                     C10_CUDA_KERNEL_LAUNCH_CHECK();
                   });
    ablate_rglru_dlambda<<<ceil_div(W, 32), dim3(32, 32), 0, stream>>>(partial.data_ptr<float>(),
                                                                       d_lambda.data_ptr<float>(), B * runs, W);
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
  TORCH_CHECK(vec == 0 || vec == 1 || vec == 2, "recurrent_scan_channels_per_thread: 0, 1 or 2, got ", vec);
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
  registry.recurrent_scan("fused_cuda", ABLATE_CUDA_ONLY(&fused::recurrent_scan));
}

}  // namespace ablate::kernels
