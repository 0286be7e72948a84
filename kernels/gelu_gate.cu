// kernels/gelu_gate.cu: gelu_gate's CUDA passes (kernels/gelu_gate.h): out = gelu(g) * h rounded once to
// g's dtype, and its backward dh = d gelu(g), dg = (d h) gelu'(g), with LibTorch's formulas in fp32:
// gelu(x) = x * 0.5 * (1 + erf(x / sqrt 2)), gelu'(x) = cdf(x) + x pdf(x). g is read in place when it is
// a view of rows with a uniform row stride (the R block's g is the first half of the input projection's
// rows); h, the output and the gradients are contiguous. 8 elements a thread access when the widths,
// strides and pointers allow 16-byte accesses, else one. Deterministic: an element-wise map.
// Tests: kernels_tests --gtest_filter='GeluGate*'. Benchmark: kernels_bench --benchmark_filter=gelu_gate.
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/gelu_gate.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kThreads = 256;
constexpr float kAlpha = M_SQRT1_2;                      // LibTorch's GELU constants (ActivationGeluKernel.cu)
constexpr float kBeta = M_2_SQRTPI * M_SQRT1_2 * 0.5;

// Rows of `width` elements: g's row r starts at g + r * g_stride, every other tensor's at r * width.
struct GateShape {
  int64_t rows, width, g_stride;
};

template <int VEC>
__device__ __forceinline__ void unit_at(const GateShape& s, int64_t unit, int64_t& g_at, int64_t& at) {
  const int64_t units_per_row = s.width / VEC;
  const int64_t r = unit / units_per_row, c = (unit - r * units_per_row) * VEC;
  g_at = r * s.g_stride + c;
  at = r * s.width + c;
}

template <typename TG, int VEC>
__global__ void __launch_bounds__(kThreads)
    ablate_gelu_gate_fwd(const TG* __restrict__ g, const float* __restrict__ h, TG* __restrict__ out, GateShape s) {
  const int64_t units = s.rows * (s.width / VEC);
  for (int64_t unit = int64_t(blockIdx.x) * kThreads + threadIdx.x; unit < units; unit += int64_t(gridDim.x) * kThreads) {
    int64_t g_at, at;
    unit_at<VEC>(s, unit, g_at, at);
    float x[VEC], y[VEC];
    load_vec<VEC>(g + g_at, x);
    load_vec<VEC>(h + at, y);
#pragma unroll
    for (int i = 0; i < VEC; ++i) y[i] = x[i] * 0.5f * (1.f + erff(x[i] * kAlpha)) * y[i];
    store_vec<VEC>(out + at, y);
  }
}

template <typename TG, int VEC>
__global__ void __launch_bounds__(kThreads)
    ablate_gelu_gate_bwd(const TG* __restrict__ d, const TG* __restrict__ g, const float* __restrict__ h,
                         TG* __restrict__ dg, float* __restrict__ dh, GateShape s) {
  const int64_t units = s.rows * (s.width / VEC);
  for (int64_t unit = int64_t(blockIdx.x) * kThreads + threadIdx.x; unit < units; unit += int64_t(gridDim.x) * kThreads) {
    int64_t g_at, at;
    unit_at<VEC>(s, unit, g_at, at);
    float dv[VEC], x[VEC], hv[VEC], dx[VEC];
    load_vec<VEC>(d + at, dv);
    load_vec<VEC>(g + g_at, x);
    load_vec<VEC>(h + at, hv);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float cdf = 0.5f * (1.f + erff(x[i] * kAlpha));
      const float pdf = expf(-0.5f * x[i] * x[i]) * kBeta;
      const float gelu = x[i] * cdf;  // the forward's (x 0.5) (1 + erf): scaling by 0.5 is exact either way
      dx[i] = (dv[i] * hv[i]) * (cdf + x[i] * pdf);  // autograd's order: d(gelu) = d h, then gelu's backward
      hv[i] = dv[i] * gelu;
    }
    store_vec<VEC>(dg + at, dx);
    store_vec<VEC>(dh + at, hv);
  }
}

// g as rows: its last dim contiguous and every leading dim's stride the next one's extent times its
// stride (rows of one stride, as a narrow of a wider last dim gives).
bool rows_of_one_stride(const Tensor& g) {
  if (g.dim() == 0 || g.stride(-1) != 1) return false;
  for (int64_t i = 0; i + 2 < g.dim(); ++i)
    if (g.size(i) > 1 && g.stride(i) != g.size(i + 1) * g.stride(i + 1)) return false;
  return true;
}

GateShape shape_of(const Tensor& g) {
  const int64_t width = g.size(-1), rows = width == 0 ? 0 : g.numel() / width;
  return {rows, width, g.dim() >= 2 ? g.stride(-2) : width};
}

template <class Launch>
void by_units(const GateShape& s, std::initializer_list<const void*> pointers, Launch&& launch) {
  bool vectorised = s.width % 8 == 0 && s.g_stride % 8 == 0;
  for (const void* p : pointers) vectorised = vectorised && aligned16(p);
  const int64_t units = s.rows * (vectorised ? s.width / 8 : s.width);
  const auto grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(units, kThreads), int64_t(sm_count()) * 16)));
  if (vectorised)
    launch(std::integral_constant<int, 8>{}, grid);
  else
    launch(std::integral_constant<int, 1>{}, grid);
}

}  // namespace

bool gelu_gate_cuda_supports(const Tensor& g, const Tensor& h) {
  return g.is_cuda() && h.is_cuda() && g.device() == h.device() && g.sizes() == h.sizes() &&
         (g.scalar_type() == torch::kBFloat16 || g.scalar_type() == torch::kFloat) &&
         h.scalar_type() == torch::kFloat && rows_of_one_stride(g);
}

Tensor gelu_gate_cuda(const Tensor& g, const Tensor& h_in) {
  TORCH_CHECK(gelu_gate_cuda_supports(g, h_in), "gelu_gate: the CUDA pass takes g (bf16 or fp32, rows of one stride) and "
              "fp32 h of one shape on one CUDA device; got ", g.scalar_type(), " ", g.sizes(), " and ", h_in.scalar_type(),
              " ", h_in.sizes());
  const c10::cuda::CUDAGuard guard(g.device());
  const Tensor h = h_in.contiguous();
  Tensor out = torch::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));
  const GateShape s = shape_of(g);
  if (out.numel() == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(g.scalar_type(), "gelu_gate g", [&](auto tag) {
    using TG = typename decltype(tag)::type;
    by_units(s, {g.data_ptr(), h.data_ptr(), out.data_ptr()}, [&](auto vec, unsigned grid) {
      ablate_gelu_gate_fwd<TG, decltype(vec)::value><<<grid, kThreads, 0, stream>>>(
          static_cast<const TG*>(g.data_ptr()), h.data_ptr<float>(), static_cast<TG*>(out.data_ptr()), s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

std::pair<Tensor, Tensor> gelu_gate_backward_cuda(const Tensor& d_in, const Tensor& g, const Tensor& h_in) {
  TORCH_CHECK(gelu_gate_cuda_supports(g, h_in) && d_in.sizes() == g.sizes() && d_in.device() == g.device(),
              "gelu_gate: backward wants d, g, h of one shape on one CUDA device");
  const c10::cuda::CUDAGuard guard(g.device());
  const Tensor h = h_in.contiguous(), d = d_in.to(g.scalar_type()).contiguous();
  Tensor dg = torch::empty(g.sizes(), g.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor dh = torch::empty(h.sizes(), h.options());
  const GateShape s = shape_of(g);
  if (dg.numel() == 0) return {dg, dh};
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(g.scalar_type(), "gelu_gate g", [&](auto tag) {
    using TG = typename decltype(tag)::type;
    by_units(s, {d.data_ptr(), g.data_ptr(), h.data_ptr(), dg.data_ptr(), dh.data_ptr()}, [&](auto vec, unsigned grid) {
      ablate_gelu_gate_bwd<TG, decltype(vec)::value><<<grid, kThreads, 0, stream>>>(
          static_cast<const TG*>(d.data_ptr()), static_cast<const TG*>(g.data_ptr()), h.data_ptr<float>(),
          static_cast<TG*>(dg.data_ptr()), dh.data_ptr<float>(), s);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {dg, dh};
}

}  // namespace ablate::kernels::fused
