// kernels/causal_conv/fused_cuda.cu: backend `fused_cuda` of seam `causal_conv` (the R block's causal
// depthwise convolution over time; contract CausalConvFn in kernels/seams.h). The reference
// (reference.cpp) pads x, then per tap a shifted product and an add in fp32: 2K passes over [B,T,C]
// forward, more backward, each writing an fp32 intermediate. Here each direction is one pass:
//   ablate_causal_conv_fwd  out[t] = bias + sum_j x[t-K+1+j] w[j]: a thread owns 4 channels over a tile
//                           of time steps and keeps the last K-1 rows of x in registers (each row of x
//                           read once, plus K-1 rows of overlap a tile); bias rounded to x's dtype first,
//                           then the products added in tap order, each product and sum rounded to fp32
//                           once (no fused multiply-add): the reference's arithmetic, bit for bit.
//   ablate_causal_conv_bwd  walks the same tile forward: dx[s-K+1] = sum_j dout[s-j] w[j] once dout[s]
//                           is in (a window of the last K rows of dout), and the tile's partial
//                           dw[c,j] = sum dout[s] x[s-K+1+j], db[c] = sum dout[s] in fp32 registers,
//                           written per (batch, tile) and summed over them by LibTorch afterwards (a
//                           fixed order: deterministic, no atomics).
// x may be strided over batch and time (the block passes a slice of its input projection) with unit
// channel stride; fp32 or bf16 x, fp32 or bf16 weight and bias; out in the promoted dtype (fp32 unless
// both are bf16), dx in x's dtype, dw / db in the parameters' dtypes. K <= 4 taps (Griffin's width). Graph-capturable: no
// host synchronisation.
// Tests: kernels_tests --gtest_filter='*Parity*causal_conv*'. Benchmark: build/bench/kernels_bench
// --benchmark_filter=causal_conv.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/causal_conv/limits.h"
#include "kernels/causal_conv/reference.h"
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kTile = 32;      // time steps a thread walks
constexpr int kThreads = 128;  // channel groups a block

struct ConvShape {
  int64_t B, T, C, K;
  int64_t x_batch_stride, x_time_stride;  // in elements; channel stride 1
  int64_t tiles;                          // ceil(T / kTile)
};

// V consecutive channels of row t (0 outside [0, T)) as fp32; one 8- or 16-byte access when `vector`.
template <int V, typename T>
__device__ __forceinline__ void load_channels(const T* row, bool vector, float (&out)[V]) {
  if constexpr (V == 4) {
    if (vector) {
      if constexpr (std::is_same_v<T, float>) {
        const float4 v = *reinterpret_cast<const float4*>(row);
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(row);
        const auto* h = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) out[i] = to_float(h[i]);
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_float(row[i]);
}

template <int V, typename T>
__device__ __forceinline__ void store_channels(T* row, bool vector, const float (&in)[V]) {
  if constexpr (V == 4) {
    if (vector) {
      if constexpr (std::is_same_v<T, float>) {
        *reinterpret_cast<float4*>(row) = make_float4(in[0], in[1], in[2], in[3]);
      } else {
        uint2 v;
        auto* h = reinterpret_cast<__nv_bfloat16*>(&v);
#pragma unroll
        for (int i = 0; i < 4; ++i) h[i] = from_float<__nv_bfloat16>(in[i]);
        *reinterpret_cast<uint2*>(row) = v;
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) row[i] = from_float<T>(in[i]);
}

// Rounds v to T's precision and back (the reference takes bias in x's dtype).
template <typename T>
__device__ __forceinline__ float rounded_to(float v) {
  return to_float(from_float<T>(v));
}

// The rows of x before a tile into win[0 .. kMaxTaps-2] (win[jj] = x at t0 - kMaxTaps + 1 + jj): zeros
// before t = 0 and in the slots before tap 0 (`first`).
template <int V, typename TX>
__device__ __forceinline__ void load_history(const TX* xb, int64_t time_stride, int64_t t0, int first, bool vector,
                                             float (&win)[kMaxTaps][V]) {
#pragma unroll
  for (int jj = 0; jj + 1 < kMaxTaps; ++jj) {
    const int64_t t = t0 - kMaxTaps + 1 + jj;
    if (jj >= first && t >= 0) {
      load_channels<V>(xb + t * time_stride, vector, win[jj]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) win[jj][i] = 0.f;
    }
  }
}

// Register windows hold kMaxTaps rows aligned to their newest one, so every index is a compile-time
// constant (a register array indexed at run time would live in local memory); tap j of K sits at
// kMaxTaps - K + j, and the slots before it are predicated off.
template <int V, typename TX, typename TW, typename TO>
__global__ void __launch_bounds__(kThreads) ablate_causal_conv_fwd(const TX* __restrict__ x, const TW* __restrict__ w,
                                                                   const TW* __restrict__ bias, TO* __restrict__ out,
                                                                   ConvShape s, bool vector) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= s.C) return;
  const int64_t b = blockIdx.z, t0 = int64_t(blockIdx.y) * kTile, t_end = min(t0 + kTile, s.T);
  const int first = kMaxTaps - static_cast<int>(s.K);  // the slot of tap 0
  float wv[kMaxTaps][V], bv[V], win[kMaxTaps][V];      // win[jj]: x at t - kMaxTaps + 1 + jj
#pragma unroll
  for (int i = 0; i < V; ++i) {
    bv[i] = rounded_to<TX>(to_float(bias[c0 + i]));
#pragma unroll
    for (int jj = 0; jj < kMaxTaps; ++jj) wv[jj][i] = jj >= first ? to_float(w[(c0 + i) * s.K + jj - first]) : 0.f;
  }
  const TX* xb = x + b * s.x_batch_stride + c0;
  load_history<V>(xb, s.x_time_stride, t0, first, vector, win);
  TO* ob = out + (b * s.T) * s.C + c0;
  for (int64_t t = t0; t < t_end; ++t) {
    load_channels<V>(xb + t * s.x_time_stride, vector, win[kMaxTaps - 1]);
    float o[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      float acc = bv[i];
#pragma unroll
      for (int jj = 0; jj < kMaxTaps; ++jj)
        if (jj >= first) acc = __fadd_rn(acc, __fmul_rn(win[jj][i], wv[jj][i]));
      o[i] = acc;
    }
    store_channels<V>(ob + t * s.C, vector, o);
#pragma unroll
    for (int jj = 0; jj + 1 < kMaxTaps; ++jj)
#pragma unroll
      for (int i = 0; i < V; ++i) win[jj][i] = win[jj + 1][i];
  }
}

// part [B * tiles, C, K + 1]: per (batch, tile) the partial dw (K columns) and db (the last column).
template <int V, typename TX, typename TW, typename TO>
__global__ void __launch_bounds__(kThreads) ablate_causal_conv_bwd(const TX* __restrict__ x, const TW* __restrict__ w,
                                                                   const TO* __restrict__ dout, TX* __restrict__ dx,
                                                                   float* __restrict__ part, ConvShape s, bool vector) {
  const int64_t c0 = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (c0 >= s.C) return;
  const int64_t b = blockIdx.z, tile = blockIdx.y, t0 = tile * kTile, t_end = min(t0 + kTile, s.T);
  const int K = static_cast<int>(s.K), first = kMaxTaps - K;
  // wv[j]: tap j (newest dout first: dx[t] = sum_j dout[t + K - 1 - j] w[j]); dwin[j]: dout at st - j;
  // xw[jj]: x at st - kMaxTaps + 1 + jj (aligned as in the forward); dw[jj]: the partial of tap jj - first.
  float wv[kMaxTaps][V], xw[kMaxTaps][V], dw[kMaxTaps][V], db[V], dwin[kMaxTaps][V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    db[i] = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j) {
      wv[j][i] = j < K ? to_float(w[(c0 + i) * s.K + j]) : 0.f;
      dw[j][i] = 0.f;
      dwin[j][i] = 0.f;  // dout before the tile never reaches a dx row of this tile
    }
  }
  const TX* xb = x + b * s.x_batch_stride + c0;
  const TO* dout_rows = dout + (b * s.T) * s.C + c0;
  TX* dxb = dx + (b * s.T) * s.C + c0;
  load_history<V>(xb, s.x_time_stride, t0, first, vector, xw);
  // st runs K-1 steps past the tile: the tile's last dx rows need dout up to t_end + K - 2.
  for (int64_t st = t0; st < t_end + K - 1; ++st) {
#pragma unroll
    for (int j = kMaxTaps - 1; j > 0; --j)
#pragma unroll
      for (int i = 0; i < V; ++i) dwin[j][i] = dwin[j - 1][i];
    if (st < s.T) {
      load_channels<V>(dout_rows + st * s.C, vector, dwin[0]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) dwin[0][i] = 0.f;
    }
    if (st < t_end) {  // the tile's own step: the parameter gradients
      load_channels<V>(xb + st * s.x_time_stride, vector, xw[kMaxTaps - 1]);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        db[i] += dwin[0][i];
#pragma unroll
        for (int jj = 0; jj < kMaxTaps; ++jj)
          if (jj >= first) dw[jj][i] = fmaf(dwin[0][i], xw[jj][i], dw[jj][i]);
      }
#pragma unroll
      for (int jj = 0; jj + 1 < kMaxTaps; ++jj)
#pragma unroll
        for (int i = 0; i < V; ++i) xw[jj][i] = xw[jj + 1][i];
    }
    const int64_t t = st - K + 1;  // the dx row complete now: it reads dout[t .. t + K - 1]
    if (t >= t0) {
      float g[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < kMaxTaps; ++j)
          if (j < K) acc = fmaf(dwin[j][i], wv[j][i], acc);
        g[i] = acc;
      }
      store_channels<V>(dxb + t * s.C, vector, g);
    }
  }
  float* pb = part + ((b * s.tiles + tile) * s.C + c0) * (s.K + 1);
#pragma unroll
  for (int i = 0; i < V; ++i) {
#pragma unroll
    for (int jj = 0; jj < kMaxTaps; ++jj)
      if (jj >= first) pb[i * (s.K + 1) + jj - first] = dw[jj][i];
    pb[i * (s.K + 1) + K] = db[i];
  }
}

ConvShape shape_of(const Tensor& x, const Tensor& weight) {
  ConvShape s{x.size(0), x.size(1), x.size(2), weight.size(1), x.stride(0), x.stride(1), 0};
  s.tiles = ceil_div(s.T, kTile);
  return s;
}

// 4 channels a thread with 8-byte (bf16) or 16-byte (fp32) accesses when C, the strides and the pointers
// allow it.
bool vector_ok(const ConvShape& s, std::initializer_list<const void*> ptrs) {
  if (s.C % 4 != 0 || s.x_time_stride % 4 != 0 || s.x_batch_stride % 4 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

// Calls fn(TypeTag<TX>, TypeTag<TW>, TypeTag<TO>) for x's and the weight's dtypes (TO: the promoted one).
template <class Fn>
void with_conv_types(const Tensor& x, const Tensor& weight, Fn&& fn) {
  with_float_or_bf16(x.scalar_type(), "causal_conv x", [&](auto xtag) {
    with_float_or_bf16(weight.scalar_type(), "causal_conv weight", [&](auto wtag) {
      using TX = typename decltype(xtag)::type;
      using TW = typename decltype(wtag)::type;
      using TO = std::conditional_t<std::is_same_v<TX, float> || std::is_same_v<TW, float>, float, __nv_bfloat16>;
      fn(xtag, wtag, TypeTag<TO>{});
    });
  });
}

template <class Kernel, class... Args>
void launch(Kernel kernel4, Kernel kernel1, bool vector, const ConvShape& s, Args... args) {
  const int64_t groups = vector ? s.C / 4 : s.C;
  const dim3 grid(static_cast<unsigned>(ceil_div(groups, kThreads)), static_cast<unsigned>(s.tiles),
                  static_cast<unsigned>(s.B));
  (vector ? kernel4 : kernel1)<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(args..., s, vector);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

class CausalConvFunction : public torch::autograd::Function<CausalConvFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    const auto s = shape_of(x, weight);
    const auto out_dtype = at::promote_types(x.scalar_type(), weight.scalar_type());
    Tensor out = torch::empty({s.B, s.T, s.C}, x.options().dtype(out_dtype));
    if (s.B * s.T * s.C > 0) {
      with_conv_types(x, weight, [&](auto xtag, auto wtag, auto otag) {
        using TX = typename decltype(xtag)::type;
        using TW = typename decltype(wtag)::type;
        using TO = typename decltype(otag)::type;
        const bool vector = vector_ok(s, {x.data_ptr(), out.data_ptr()});
        launch(ablate_causal_conv_fwd<4, TX, TW, TO>, ablate_causal_conv_fwd<1, TX, TW, TO>, vector, s,
               static_cast<const TX*>(x.data_ptr()), static_cast<const TW*>(weight.data_ptr()),
               static_cast<const TW*>(bias.data_ptr()), static_cast<TO*>(out.data_ptr()));
      });
    }
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1];
    const auto s = shape_of(x, weight);
    const auto out_dtype = at::promote_types(x.scalar_type(), weight.scalar_type());
    const Tensor dout = grads[0].defined() ? on_device(grads[0].to(out_dtype), x, "causal_conv grad")
                                           : torch::zeros({s.B, s.T, s.C}, x.options().dtype(out_dtype));
    Tensor dx = torch::empty({s.B, s.T, s.C}, x.options());
    Tensor part = torch::empty({s.B * s.tiles, s.C, s.K + 1}, x.options().dtype(torch::kFloat));
    if (s.B * s.T * s.C > 0) {
      with_conv_types(x, weight, [&](auto xtag, auto wtag, auto otag) {
        using TX = typename decltype(xtag)::type;
        using TW = typename decltype(wtag)::type;
        using TO = typename decltype(otag)::type;
        const bool vector = vector_ok(s, {x.data_ptr(), dout.data_ptr(), dx.data_ptr()});
        launch(ablate_causal_conv_bwd<4, TX, TW, TO>, ablate_causal_conv_bwd<1, TX, TW, TO>, vector, s,
               static_cast<const TX*>(x.data_ptr()), static_cast<const TW*>(weight.data_ptr()),
               static_cast<const TO*>(dout.data_ptr()), static_cast<TX*>(dx.data_ptr()), part.data_ptr<float>());
      });
    } else {
      part.zero_();
    }
    const auto sums = part.sum(0);  // [C, K+1], over (batch, tile) in a fixed order
    const auto bias_dtype = static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    return {dx, sums.narrow(1, 0, s.K).to(weight.scalar_type()), sums.select(1, s.K).to(bias_dtype)};
  }
};

Tensor causal_conv(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  reference::check_causal_conv_args(x, weight, bias);
  TORCH_CHECK(x.is_cuda(), "causal_conv fused_cuda: x must be a CUDA tensor");
  TORCH_CHECK(weight.size(1) <= kMaxTaps, "causal_conv fused_cuda: at most ", kMaxTaps, " taps, got ", weight.size(1),
              "; use the reference backend for wider kernels");
  TORCH_CHECK(weight.scalar_type() == bias.scalar_type(), "causal_conv fused_cuda: weight and bias must share a dtype, got ",
              weight.scalar_type(), " and ", bias.scalar_type());
  // Unit channel stride: the slice of a projection has it; anything else is made contiguous.
  const Tensor xs = x.stride(2) == 1 ? x : x.contiguous();
  return CausalConvFunction::apply(xs, weight.contiguous(), bias.contiguous());
}

}  // namespace
}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {
ABLATE_REGISTER_BACKENDS(causal_conv_fused_cuda) {
  registry.causal_conv("fused_cuda", ABLATE_CUDA_ONLY(&fused::causal_conv));
}

}  // namespace ablate::kernels
