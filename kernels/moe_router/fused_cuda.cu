// kernels/moe_router/fused_cuda.cu: backend `fused_cuda` of seam `moe_router` (the E block's fp32 router;
// contract MoeRouterFn in kernels/seams.h). The reference (reference.cpp) copies x into fp32 (a [T,d]
// fp32 tensor written and read again), runs an fp32 GEMM with 16 output columns, then softmax, top-k
// and the renormalisation as separate launches; backward writes dx in fp32 and casts it. Here:
//   ablate_moe_router_fwd     a warp takes 64 / EMAX tokens (EMAX = E rounded up to 16, 32 or 64: 64 fp32
//                             accumulators a lane), reads each x row once in its own dtype (16-byte loads)
//                             and the fp32 weight through L1, sums the lanes' partial dots by recursive
//                             halving (each lane ends with 2 of the warp's 64 logits), then softmax, the
//                             top-k (largest first, ties to the lower index) and the renormalised weights
//                             within each token's lanes: probs, top_w, top_idx in one pass.
//   ablate_moe_router_bwd_dx  per token: d top_p from d top_w through the renormalisation, into dprobs,
//                             dlogits = p o (g - <p, g>) (written for the next kernel), then dx = dlogits W
//                             in fp32 registers, stored in x's dtype.
//   ablate_moe_router_bwd_dw  dW = dlogits^T x: a block sums 512 tokens for 32 x 64 / EMAX columns (warps
//                             reduced in shared memory in a fixed order), one partial per token block,
//                             summed over the blocks by LibTorch (deterministic, no atomics).
// Arithmetic in fp32 (x taken exactly into fp32, as the reference's copy); the sums run in another order
// than cuBLAS's, so logits agree to fp32 rounding, not bit for bit. x fp32 or bf16 (contiguous rows),
// weight fp32, E <= 64 experts (a clear error above: use the reference). Graph-capturable: no host
// synchronisation.
// Tests: kernels_tests --gtest_filter='*Parity*moe_router*'. Benchmark: build/bench/kernels_bench
// --benchmark_filter=moe_router.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/moe_router/limits.h"
#include "kernels/moe_router/reference.h"
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <cmath>

#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kWarps = 8;             // warps a block
constexpr int kDwTokensPerBlock = 512;  // tokens one dW block sums

// Sums NV values a lane holds over the warp by recursive halving: at offset S a lane keeps one half of
// its live values (the upper one when lane & S) plus its partner's copy of that half. After the offsets
// 16 .. 1, lane l holds the totals of values l * NV / 32 .. l * NV / 32 + NV / 32 - 1 in v[0 .. NV / 32).
// NV / 2 + NV / 4 + ... shuffles instead of 5 a value; the same order on every run.
template <int S, int NV>
__device__ __forceinline__ void halve_sums(float (&v)[64], int lane) {
  if constexpr (S >= 1) {
    const bool upper = (lane & S) != 0;
#pragma unroll
    for (int i = 0; i < NV / 2; ++i) {
      const float send = upper ? v[i] : v[i + NV / 2];
      const float keep = upper ? v[i + NV / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, S);
    }
    halve_sums<S / 2, NV / 2>(v, lane);
  }
}

// Reductions within a token's SEG lanes (SEG a power of two; the token's lanes are aligned to SEG).
template <int SEG>
__device__ __forceinline__ float segment_max(float v) {
#pragma unroll
  for (int off = 1; off < SEG; off <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
template <int SEG>
__device__ __forceinline__ float segment_sum(float v) {
#pragma unroll
  for (int off = 1; off < SEG; off <<= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// V consecutive elements at p into fp32: 16-byte words when VEC (the caller checked the alignment).
template <bool VEC, int V, typename T>
__device__ __forceinline__ void load_run(const T* p, float (&out)[V]) {
  if constexpr (VEC) {
    load_vec<V>(p, out);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_float(p[i]);
  }
}

// Elements a lane reads at a time: a 16-byte word of x (8 bf16 or 4 fp32), else 1.
template <typename TX, bool VEC>
constexpr int kRun = VEC ? 16 / static_cast<int>(sizeof(TX)) : 1;

// Lane l's two logits after halve_sums: token (2 l) / EMAX of the warp's, experts e0 = (2 l) % EMAX and
// e0 + 1; a token's EMAX / 2 lanes are consecutive.
template <typename TX, int EMAX, bool VEC>
__global__ void __launch_bounds__(kWarps * 32)
    ablate_moe_router_fwd(const TX* __restrict__ x, const float* __restrict__ w, int64_t T, int d, int E, int k,
                          float* __restrict__ probs, float* __restrict__ top_w, int64_t* __restrict__ top_idx) {
  constexpr int TOK = 64 / EMAX, SEG = EMAX / 2, V = kRun<TX, VEC>;
  const int lane = threadIdx.x & 31;
  const int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * TOK;
  if (t0 >= T) return;  // the whole warp
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  for (int c = lane * V; c < d; c += 32 * V) {
    float xv[TOK][V];
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      if (t0 + t < T) {
        load_run<VEC>(x + (t0 + t) * d + c, xv[t]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) xv[t][i] = 0.f;
      }
    }
#pragma unroll
    for (int e = 0; e < EMAX; ++e) {
      if (e < E) {
        float wv[V];
        load_run<VEC>(w + static_cast<int64_t>(e) * d + c, wv);
#pragma unroll
        for (int t = 0; t < TOK; ++t)
#pragma unroll
          for (int i = 0; i < V; ++i) acc[t * EMAX + e] = fmaf(xv[t][i], wv[i], acc[t * EMAX + e]);
      }
    }
  }
  halve_sums<16, 64>(acc, lane);

  const int tl = (2 * lane) / EMAX, e0 = (2 * lane) % EMAX;
  const int64_t t = t0 + tl;
  const float lg0 = e0 < E ? acc[0] : -INFINITY, lg1 = e0 + 1 < E ? acc[1] : -INFINITY;
  const float m = segment_max<SEG>(fmaxf(lg0, lg1));
  const float x0 = e0 < E ? expf(lg0 - m) : 0.f, x1 = e0 + 1 < E ? expf(lg1 - m) : 0.f;
  const float inv = 1.f / segment_sum<SEG>(x0 + x1);
  const float p0 = x0 * inv, p1 = x1 * inv;
  if (t < T) {
    if (e0 < E) probs[t * E + e0] = p0;
    if (e0 + 1 < E) probs[t * E + e0 + 1] = p1;
  }
  // Top-k: k rounds of a segment argmax (probabilities are >= 0: -1 marks padding and picks).
  float c0 = e0 < E ? p0 : -1.f, c1 = e0 + 1 < E ? p1 : -1.f, picked_sum = 0.f;
  const bool writer = lane % SEG == 0 && t < T;
  for (int j = 0; j < k; ++j) {
    float bv = c1 > c0 ? c1 : c0;
    int bi = c1 > c0 ? e0 + 1 : e0;
#pragma unroll
    for (int off = 1; off < SEG; off <<= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (bi == e0) c0 = -1.f;
    if (bi == e0 + 1) c1 = -1.f;
    picked_sum += bv;
    if (writer) top_idx[t * k + j] = bi, top_w[t * k + j] = bv;
  }
  if (writer)
    for (int j = 0; j < k; ++j) top_w[t * k + j] /= picked_sum;
}

template <typename TX, int EMAX, bool VEC>
__global__ void __launch_bounds__(kWarps * 32)
    ablate_moe_router_bwd_dx(const float* __restrict__ w, const float* __restrict__ probs,
                             const float* __restrict__ top_w, const int64_t* __restrict__ top_idx,
                             const float* __restrict__ dprobs, const float* __restrict__ dtop_w, int64_t T, int d,
                             int E, int k, float* __restrict__ dlogits, TX* __restrict__ dx) {
  constexpr int TOK = 64 / EMAX, SEG = EMAX / 2, V = kRun<TX, VEC>;
  const int lane = threadIdx.x & 31;
  const int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * TOK;
  if (t0 >= T) return;
  const int tl = (2 * lane) / EMAX, e0 = (2 * lane) % EMAX;
  const int64_t t = t0 + tl;
  const bool real = t < T;
  float p[2], g[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const bool on = real && e0 + i < E;
    p[i] = on ? probs[t * E + e0 + i] : 0.f;
    g[i] = on && dprobs != nullptr ? dprobs[t * E + e0 + i] : 0.f;
  }
  // top_w_j = top_p_j / S with S = sum_j top_p_j: d top_p_j = (d top_w_j - sum_i d top_w_i top_w_i) / S,
  // added to the picked experts' dprobs.
  if (real && dtop_w != nullptr) {
    float dot = 0.f, S = 0.f;
    for (int j = 0; j < k; ++j) {
      dot = fmaf(dtop_w[t * k + j], top_w[t * k + j], dot);
      S += probs[t * E + top_idx[t * k + j]];
    }
    for (int j = 0; j < k; ++j) {
      const int64_t e = top_idx[t * k + j];
      const float dp = (dtop_w[t * k + j] - dot) / S;
      if (e == e0) g[0] += dp;
      if (e == e0 + 1) g[1] += dp;
    }
  }
  const float pg = segment_sum<SEG>(p[0] * g[0] + p[1] * g[1]);
  float dl[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    dl[i] = p[i] * (g[i] - pg);
    if (real && e0 + i < E) dlogits[t * E + e0 + i] = dl[i];
  }
  // Every lane needs every dlogit of the warp's tokens: value (tl, e) sits on lane (tl EMAX + e) / 2.
  float all[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) all[i] = __shfl_sync(0xffffffffu, dl[i & 1], i >> 1);
  for (int c = lane * V; c < d; c += 32 * V) {
    float out[TOK][V] = {};
#pragma unroll
    for (int e = 0; e < EMAX; ++e) {
      if (e < E) {
        float wv[V];
        load_run<VEC>(w + static_cast<int64_t>(e) * d + c, wv);
#pragma unroll
        for (int tt = 0; tt < TOK; ++tt)
#pragma unroll
          for (int i = 0; i < V; ++i) out[tt][i] = fmaf(all[tt * EMAX + e], wv[i], out[tt][i]);
      }
    }
#pragma unroll
    for (int tt = 0; tt < TOK; ++tt) {
      if (t0 + tt >= T) continue;
      TX* dst = dx + (t0 + tt) * d + c;
      if constexpr (VEC) {
        store_vec<V>(dst, out[tt]);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) dst[i] = from_float<TX>(out[tt][i]);
      }
    }
  }
}

// dW partial of token block blockIdx.y for columns blockIdx.x * 32 COLS + lane COLS + (0 .. COLS-1):
// part[blockIdx.y][e][c] = sum over the block's tokens of dlogits[t][e] x[t][c].
template <typename TX, int EMAX>
__global__ void __launch_bounds__(kWarps * 32)
    ablate_moe_router_bwd_dw(const TX* __restrict__ x, const float* __restrict__ dlogits, int64_t T, int d, int E,
                             float* __restrict__ part) {
  constexpr int COLS = 64 / EMAX;
  extern __shared__ float red[];  // [kWarps][EMAX][32 COLS]
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int c0 = (blockIdx.x * 32 + lane) * COLS;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kDwTokensPerBlock;
  const int64_t end = first + kDwTokensPerBlock < T ? first + kDwTokensPerBlock : T;
  float acc[EMAX][COLS] = {};
  for (int64_t t = first + warp; t < end; t += kWarps) {
    float xv[COLS];
#pragma unroll
    for (int cc = 0; cc < COLS; ++cc) xv[cc] = c0 + cc < d ? to_float(x[t * d + c0 + cc]) : 0.f;
#pragma unroll
    for (int e = 0; e < EMAX; ++e) {
      if (e < E) {
        const float gl = dlogits[t * E + e];
#pragma unroll
        for (int cc = 0; cc < COLS; ++cc) acc[e][cc] = fmaf(gl, xv[cc], acc[e][cc]);
      }
    }
  }
  constexpr int kSlice = EMAX * 32 * COLS;  // = 2048 floats a warp
#pragma unroll
  for (int e = 0; e < EMAX; ++e)
#pragma unroll
    for (int cc = 0; cc < COLS; ++cc) red[warp * kSlice + e * 32 * COLS + lane * COLS + cc] = acc[e][cc];
  __syncthreads();
  for (int i = threadIdx.x; i < kSlice; i += blockDim.x) {
    const int e = i / (32 * COLS), c = blockIdx.x * 32 * COLS + i % (32 * COLS);
    float s = 0.f;
#pragma unroll
    for (int wp = 0; wp < kWarps; ++wp) s += red[wp * kSlice + i];
    if (e < E && c < d) part[(static_cast<int64_t>(blockIdx.y) * E + e) * d + c] = s;
  }
}

// Calls fn(TypeTag<TX>, integral_constant<EMAX>) for x's dtype and E.
template <class Fn>
void with_router_types(const Tensor& x, int64_t experts, Fn&& fn) {
  with_float_or_bf16(x.scalar_type(), "moe_router x", [&](auto xtag) {
    if (experts <= 16)
      fn(xtag, std::integral_constant<int, 16>{});
    else if (experts <= 32)
      fn(xtag, std::integral_constant<int, 32>{});
    else
      fn(xtag, std::integral_constant<int, 64>{});
  });
}

// 16-byte words of x and of the weight rows: d a multiple of the run, and every pointer aligned.
bool vector_ok(int64_t d, int run, std::initializer_list<const void*> ptrs) {
  if (d % run != 0 || d % 4 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

unsigned token_blocks(int64_t T, int tokens_per_warp) {
  return static_cast<unsigned>(ceil_div(ceil_div(T, tokens_per_warp), kWarps));
}

class MoeRouterFunction : public torch::autograd::Function<MoeRouterFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& weight, int64_t top_k) {
    const int64_t T = x.size(0), d = x.size(1), E = weight.size(0);
    const auto f32 = x.options().dtype(torch::kFloat);
    Tensor probs = torch::empty({T, E}, f32), top_w = torch::empty({T, top_k}, f32);
    Tensor top_idx = torch::empty({T, top_k}, x.options().dtype(torch::kLong));
    if (T > 0) {
      with_router_types(x, E, [&](auto xtag, auto emax) {
        using TX = typename decltype(xtag)::type;
        constexpr int EMAX = decltype(emax)::value;
        const bool vec = vector_ok(d, 16 / static_cast<int>(sizeof(TX)), {x.data_ptr(), weight.data_ptr()});
        auto kernel = vec ? ablate_moe_router_fwd<TX, EMAX, true> : ablate_moe_router_fwd<TX, EMAX, false>;
        kernel<<<token_blocks(T, 64 / EMAX), kWarps * 32, 0, at::cuda::getCurrentCUDAStream()>>>(
            static_cast<const TX*>(x.data_ptr()), weight.data_ptr<float>(), T, static_cast<int>(d),
            static_cast<int>(E), static_cast<int>(top_k), probs.data_ptr<float>(), top_w.data_ptr<float>(),
            top_idx.data_ptr<int64_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    }
    ctx->save_for_backward({x, weight, probs, top_w, top_idx});
    ctx->mark_non_differentiable({top_idx});
    return {probs, top_w, top_idx};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &probs = saved[2], &top_w = saved[3], &top_idx = saved[4];
    const int64_t T = x.size(0), d = x.size(1), E = weight.size(0), k = top_w.size(1);
    const Tensor dprobs = grads[0].defined() ? on_device(grads[0].to(torch::kFloat), x, "moe_router dprobs") : Tensor();
    const Tensor dtop_w = grads[1].defined() ? on_device(grads[1].to(torch::kFloat), x, "moe_router dtop_w") : Tensor();
    Tensor dx = torch::empty_like(x);
    const int64_t blocks_t = ceil_div(T, kDwTokensPerBlock);
    Tensor dlogits = torch::empty({T, E}, x.options().dtype(torch::kFloat));
    Tensor part = torch::empty({blocks_t, E, d}, x.options().dtype(torch::kFloat));
    if (T > 0) {
      with_router_types(x, E, [&](auto xtag, auto emax) {
        using TX = typename decltype(xtag)::type;
        constexpr int EMAX = decltype(emax)::value;
        const auto stream = at::cuda::getCurrentCUDAStream();
        const bool vec = vector_ok(d, 16 / static_cast<int>(sizeof(TX)), {x.data_ptr(), weight.data_ptr(), dx.data_ptr()});
        auto dx_kernel = vec ? ablate_moe_router_bwd_dx<TX, EMAX, true> : ablate_moe_router_bwd_dx<TX, EMAX, false>;
        dx_kernel<<<token_blocks(T, 64 / EMAX), kWarps * 32, 0, stream>>>(
            weight.data_ptr<float>(), probs.data_ptr<float>(), top_w.data_ptr<float>(), top_idx.data_ptr<int64_t>(),
            dprobs.defined() ? dprobs.data_ptr<float>() : nullptr, dtop_w.defined() ? dtop_w.data_ptr<float>() : nullptr,
            T, static_cast<int>(d), static_cast<int>(E), static_cast<int>(k), dlogits.data_ptr<float>(),
            static_cast<TX*>(dx.data_ptr()));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        constexpr int kCols = 64 / EMAX;
        constexpr int kSmem = kWarps * EMAX * 32 * kCols * static_cast<int>(sizeof(float));  // 64 KB
        static const bool attribute_set = [] {
          allow_dynamic_smem(ablate_moe_router_bwd_dw<TX, EMAX>, kSmem, "moe_router fused_cuda: the weight-gradient kernel");
          return true;
        }();
        (void)attribute_set;
        const dim3 grid(static_cast<unsigned>(ceil_div(d, 32 * kCols)), static_cast<unsigned>(blocks_t));
        ablate_moe_router_bwd_dw<TX, EMAX><<<grid, kWarps * 32, kSmem, stream>>>(
            static_cast<const TX*>(x.data_ptr()), dlogits.data_ptr<float>(), T, static_cast<int>(d),
            static_cast<int>(E), part.data_ptr<float>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {
      part.zero_();
    }
    return {dx, part.sum(0).to(weight.scalar_type()), Tensor()};
  }
};

MoeRouterOutputs moe_router(const Tensor& x, const Tensor& weight, int64_t top_k) {
  reference::check_moe_router_args(x, weight, top_k);
  TORCH_CHECK(x.is_cuda(), "moe_router fused_cuda: x must be a CUDA tensor");
  TORCH_CHECK(weight.size(0) <= kMaxExperts, "moe_router fused_cuda: at most ", kMaxExperts, " experts, got ",
              weight.size(0), "; use the reference backend for more");
  TORCH_CHECK(weight.scalar_type() == torch::kFloat, "moe_router fused_cuda: the router weight must be fp32, got ",
              weight.scalar_type());
  const auto out = MoeRouterFunction::apply(x.contiguous(), weight.contiguous(), top_k);
  return {.probs = out[0], .top_w = out[1], .top_idx = out[2]};
}

}  // namespace
}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {
ABLATE_REGISTER_BACKENDS(moe_router_fused_cuda) {
  registry.moe_router("fused_cuda", ABLATE_CUDA_ONLY(&fused::moe_router));
}

}  // namespace ablate::kernels
