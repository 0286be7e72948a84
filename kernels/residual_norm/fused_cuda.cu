// kernels/residual_norm/fused_cuda.cu: backend `fused_cuda` of the `residual_norm` seam. The reference
// (kernels/residual_norm/reference.cpp) runs add, square, mean, rsqrt, two multiplies and
// casts as separate LibTorch ops, each a trip through memory, and autograd adds as many again. Here:
//   forward  ablate_residual_norm_fwd: one pass, s = x + residual and y = s * rstd * w, rstd saved;
//   backward ablate_residual_norm_bwd: one pass, d(residual) = d(x) = rstd*g - s*rstd^3*<g,s>/d + ds
//            with g = dy * w, plus this block's rows of dw = sum_rows dy * s * rstd into a partial;
//            ablate_residual_norm_dw: the partials summed in a fixed order (deterministic dw, no atomics).
// All arithmetic is fp32; x, residual and weight may each be fp32 or bf16 (the model's autocast mix is
// x bf16, residual and weight fp32). Rows of width d are held in registers: blockDim.x threads a row,
// each with ITERS vectors of VEC columns, so a row is read once and written once.
// Tests: kernels_tests --gtest_filter='*Parity*residual_norm*:FusedCuda*'. Benchmark: build/bench/kernels_bench --benchmark_filter=residual_norm.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include "kernels/cuda_common.cuh"
#include "kernels/residual_norm/fused_cuda.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

// How rows map to threads. Vectorised: 8 columns per access (16 bytes of bf16, two 16-byte words of
// fp32); backward: 2 accesses per thread up to d = 8192 (d = 1024: two warps a row; fewer registers a
// thread, so more warps resident to hide memory latency), 4 beyond (d = 16384: 512 threads a row);
// forward: 1 access per thread up to d = 2048, then as backward.
// Element-wise (widths that are not a multiple of 8, or rows not 16-byte aligned): 32 columns a thread.
// Small rows share a block (rows_per_block) so that a block has at least 128 threads. At most 512
// threads a row, so that __launch_bounds__ leaves 128 registers a thread: backward keeps three
// ITERS x VEC arrays (dy * w, s, dw) live, 96 floats, which must not spill.
struct RowLayout {
  int vec, iters, threads_per_row, rows_per_block;
};
constexpr int kMaxThreadsPerRow = 512;

int forced_forward_iters = 0;  // tuning::residual_norm_forward_iters; 0 = the rule below

enum class Pass { forward, backward };

RowLayout row_layout(int64_t d, bool vectorised, Pass pass, int forced_iters = 0) {
  RowLayout l{};
  l.vec = vectorised ? 8 : 1;
  // One vector a thread up to d = 2048 (256 threads a row), two up to 8192, four beyond. Measured on
  // an H100 at d = 1024 (kernels_bench, residual_norm/fused_cuda/fwd/*/iters:N): 1 -> 92.0 % of
  // the copy ceiling with the autocast mix, 2 -> 89.5 %, 4 -> 90.3 %; all bf16 ~ 89.6 % for 1 and 2.
  l.iters = !vectorised ? 32 : d / 8 <= 2 * kMaxThreadsPerRow ? 2 : 4;
  if (vectorised && pass == Pass::forward && d <= 2048) l.iters = 1;
  if (vectorised && forced_iters > 0 && d / 8 <= int64_t(forced_iters) * kMaxThreadsPerRow) l.iters = forced_iters;
  const int64_t threads = ceil_div(ceil_div(d, l.vec), l.iters);  // threads that hold data
  l.threads_per_row = static_cast<int>(ceil_div(threads, 32) * 32);
  TORCH_CHECK(l.threads_per_row <= kMaxThreadsPerRow, "residual_norm fused_cuda: width ", d, " exceeds the ",
              int64_t(kMaxThreadsPerRow) * l.vec * l.iters, " columns a row this kernel holds in registers",
              vectorised ? "" : " (widths not a multiple of 8 take the element-wise path)");
  l.rows_per_block = std::max(1, 128 / l.threads_per_row);
  return l;
}

// Calls fn(integral_constant VEC, integral_constant ITERS) for the layout's compile-time shape.
template <class Fn>
void with_layout(const RowLayout& l, Fn&& fn) {
  if (l.vec == 8 && l.iters == 1)
    fn(std::integral_constant<int, 8>{}, std::integral_constant<int, 1>{});
  else if (l.vec == 8 && l.iters == 2)
    fn(std::integral_constant<int, 8>{}, std::integral_constant<int, 2>{});
  else if (l.vec == 8)
    fn(std::integral_constant<int, 8>{}, std::integral_constant<int, 4>{});
  else
    fn(std::integral_constant<int, 1>{}, std::integral_constant<int, 32>{});
}

// The sum of v over the blockDim.x threads of this row (blockDim.y rows per block), every thread
// gets it. A row wider than a warp goes through shared memory (at most 4 rows x 16 warps of slots).
__device__ __forceinline__ float row_sum(float v) {
  __shared__ float warp_sums[4][kMaxThreadsPerRow / 32];
  v = warp_sum(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[threadIdx.y][warp] = v;
  __syncthreads();
  v = warp_sum(lane < blockDim.x / 32 ? warp_sums[threadIdx.y][lane] : 0.f);
  __syncthreads();  // the slots are reused by the next call
  return v;
}

// The weight is fp32 or bf16 (a run-time flag, uniform over the grid, rather than one more template
// dimension: it is a d-element vector that stays in L1/L2).
template <int VEC>
__device__ __forceinline__ void load_weight(const void* w, bool w_bf16, int col, float (&out)[VEC]) {
  if (w_bf16)
    load_vec<VEC>(static_cast<const __nv_bfloat16*>(w) + col, out);
  else
    load_vec<VEC>(static_cast<const float*>(w) + col, out);
}

// x == nullptr: the first layer (s = residual, s is not written: the caller returns residual itself).
template <typename Tx, typename Tr, int VEC, int ITERS>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    ablate_residual_norm_fwd(const Tx* __restrict__ x, const Tr* __restrict__ residual, const void* __restrict__ w,
                             bool w_bf16, Tx* __restrict__ y, Tr* __restrict__ s, float* __restrict__ rstd,
                             int64_t rows, int d, float eps) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;  // no early return: row_sum below synchronises the block
  const int64_t base = row * d;
  float sum[ITERS][VEC];
  float squares = 0.f;
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int col = (it * blockDim.x + threadIdx.x) * VEC;
    if (valid && col < d) {
      load_vec<VEC>(residual + base + col, sum[it]);
      if (x != nullptr) {
        float xv[VEC];
        load_vec<VEC>(x + base + col, xv);
#pragma unroll
        for (int i = 0; i < VEC; ++i) sum[it][i] += xv[i];
        store_vec<VEC>(s + base + col, sum[it]);
      }
#pragma unroll
      for (int i = 0; i < VEC; ++i) squares += sum[it][i] * sum[it][i];
    }
  }
  // y uses the fp32 sum, not s rounded to residual's dtype: the reference does the same.
  const float inv_rms = rsqrtf(row_sum(squares) / d + eps);
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int col = (it * blockDim.x + threadIdx.x) * VEC;
    if (valid && col < d) {
      float wv[VEC], out[VEC];
      load_weight<VEC>(w, w_bf16, col, wv);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] = sum[it][i] * inv_rms * wv[i];
      store_vec<VEC>(y + base + col, out);
    }
  }
  if (valid && threadIdx.x == 0) rstd[row] = inv_rms;
}

// Rows are strided over a grid sized to the device (not to the rows), so each block accumulates dw for
// many rows in registers and writes one partial row: the partials stay small (grid x d fp32).
// ds == nullptr: s had no gradient. dx == nullptr: x is undefined or has residual's dtype (the caller
// uses dresidual for it). dw_partial == nullptr: the weight needs no gradient.
template <typename Tx, typename Tr, int VEC, int ITERS>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    ablate_residual_norm_bwd(const Tx* __restrict__ dy, const Tr* __restrict__ ds, const Tr* __restrict__ s,
                             const void* __restrict__ w, bool w_bf16, const float* __restrict__ rstd,
                             Tr* __restrict__ dresidual, Tx* __restrict__ dx, float* __restrict__ dw_partial,
                             int64_t rows, int d) {
  extern __shared__ float block_dw[];  // [blockDim.y][d] when blockDim.y > 1 and dw is wanted
  float dw[ITERS][VEC];
#pragma unroll
  for (int it = 0; it < ITERS; ++it)
#pragma unroll
    for (int i = 0; i < VEC; ++i) dw[it][i] = 0.f;

  for (int64_t first = int64_t(blockIdx.x) * blockDim.y; first < rows; first += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const bool valid = row < rows;  // the loop bound is uniform over the block; row_sum synchronises it
    const int64_t base = row * d;
    const float r = valid ? rstd[row] : 0.f;
    float g[ITERS][VEC], sv[ITERS][VEC];
    float dot = 0.f;  // <g, s> over the row
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int col = (it * blockDim.x + threadIdx.x) * VEC;
      if (valid && col < d) {
        float wv[VEC];
        load_vec<VEC>(dy + base + col, g[it]);
        load_vec<VEC>(s + base + col, sv[it]);
        load_weight<VEC>(w, w_bf16, col, wv);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          dw[it][i] += g[it][i] * sv[it][i] * r;
          g[it][i] *= wv[i];
          dot += g[it][i] * sv[it][i];
        }
      }
    }
    const float c = row_sum(dot) * r * r * r / d;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int col = (it * blockDim.x + threadIdx.x) * VEC;
      if (valid && col < d) {
        float out[VEC], dsv[VEC];
        if (ds != nullptr) {
          load_vec<VEC>(ds + base + col, dsv);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) dsv[i] = 0.f;
        }
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = r * g[it][i] - c * sv[it][i] + dsv[i];
        store_vec<VEC>(dresidual + base + col, out);
        if (dx != nullptr) store_vec<VEC>(dx + base + col, out);
      }
    }
  }
  if (dw_partial == nullptr) return;
  // The block's rows (threadIdx.y) are combined in shared memory in a fixed order, then written once.
  float* out_row = dw_partial + int64_t(blockIdx.x) * d;
  if (blockDim.y > 1) {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int col = (it * blockDim.x + threadIdx.x) * VEC;
      if (col < d)
#pragma unroll
        for (int i = 0; i < VEC; ++i) block_dw[threadIdx.y * d + col + i] = dw[it][i];
    }
    __syncthreads();
    if (threadIdx.y != 0) return;
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int col = (it * blockDim.x + threadIdx.x) * VEC;
      if (col < d)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          float total = 0.f;
          for (int y = 0; y < blockDim.y; ++y) total += block_dw[y * d + col + i];
          dw[it][i] = total;
        }
    }
  }
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int col = (it * blockDim.x + threadIdx.x) * VEC;
    if (col < d) store_vec<VEC>(out_row + col, dw[it]);
  }
}

// dw[col] = sum over the partial rows, in a fixed order: 16 strided slices each summed in order, then
// the slices in order. Same grid, same order on every run, so dw is bitwise reproducible.
constexpr int kDwSlices = 16;
__global__ void __launch_bounds__(32 * kDwSlices)
    ablate_residual_norm_dw(const float* __restrict__ partial, int64_t parts, int d, float* __restrict__ dw) {
  __shared__ float slice_sums[kDwSlices][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.f;
  if (col < d)
    for (int64_t p = threadIdx.y; p < parts; p += kDwSlices) acc += partial[p * d + col];
  slice_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || col >= d) return;
  float total = 0.f;
  for (int k = 0; k < kDwSlices; ++k) total += slice_sums[k][threadIdx.x];
  dw[col] = total;
}

// Vectorised when the width splits into 8-column groups and every row pointer is 16-byte aligned.
bool vectorisable(int64_t d, std::initializer_list<const Tensor*> tensors) {
  if (d % 8 != 0) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && !aligned16(t->data_ptr())) return false;
  return true;
}

dim3 block_of(const RowLayout& l) { return dim3(l.threads_per_row, l.rows_per_block); }

// The forward and backward of both autograd functions below; x_in may be undefined (s = residual).
// backward_impl returns {dx (undefined without x), dresidual, dweight}.
torch::autograd::variable_list forward_impl(torch::autograd::AutogradContext* ctx, const Tensor& x_in,
                                            const Tensor& residual_in, const Tensor& weight_in, double eps) {
  const Tensor residual = on_device(residual_in, residual_in, "residual");
  const Tensor x = x_in.defined() ? on_device(x_in, residual, "x") : Tensor();
  const Tensor weight = on_device(weight_in, residual, "weight");
  const int64_t d = residual.size(-1);
  TORCH_CHECK(d > 0 && weight.dim() == 1 && weight.size(0) == d, "residual_norm fused_cuda: weight must be [", d,
              "], got ", weight.sizes());
  TORCH_CHECK(!x.defined() || x.sizes() == residual.sizes(), "residual_norm fused_cuda: x ", x.sizes(),
              " and residual ", residual.sizes(), " differ");
  with_float_or_bf16(weight.scalar_type(), "weight", [](auto) {});
  const int64_t rows = residual.numel() / d;
  const Tensor& y_like = x.defined() ? x : residual;
  Tensor y = torch::empty_like(y_like);
  Tensor s = x.defined() ? torch::empty_like(residual) : residual;
  Tensor rstd = torch::empty({rows}, residual.options().dtype(torch::kFloat));
  if (rows > 0) {
    const RowLayout l = row_layout(d, vectorisable(d, {&x, &residual, &weight}), Pass::forward, forced_forward_iters);
    const auto stream = at::cuda::getCurrentCUDAStream();
    const bool w_bf16 = weight.scalar_type() == torch::kBFloat16;
    with_float_or_bf16(y_like.scalar_type(), "x", [&](auto x_tag) {
      with_float_or_bf16(residual.scalar_type(), "residual", [&](auto r_tag) {
        using Tx = typename decltype(x_tag)::type;
        using Tr = typename decltype(r_tag)::type;
        with_layout(l, [&](auto vec, auto iters) {
          auto* kernel = &ablate_residual_norm_fwd<Tx, Tr, decltype(vec)::value, decltype(iters)::value>;
          kernel<<<ceil_div(rows, l.rows_per_block), block_of(l), 0, stream>>>(
              x.defined() ? static_cast<const Tx*>(x.data_ptr()) : nullptr,
              static_cast<const Tr*>(residual.data_ptr()), weight.data_ptr(), w_bf16,
              static_cast<Tx*>(y.data_ptr()), x.defined() ? static_cast<Tr*>(s.data_ptr()) : nullptr,
              rstd.data_ptr<float>(), rows, static_cast<int>(d), static_cast<float>(eps));
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
    });
  }
  ctx->save_for_backward({s, weight, rstd});
  ctx->saved_data["x_defined"] = x.defined();
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(y_like.scalar_type());
  return {y, s};
}

torch::autograd::variable_list backward_impl(torch::autograd::AutogradContext* ctx,
                                             const torch::autograd::variable_list& grads, int weight_input) {
  const auto saved = ctx->get_saved_variables();
  const Tensor &s = saved[0], &weight = saved[1], &rstd = saved[2];
  const bool x_defined = ctx->saved_data["x_defined"].toBool();
  const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
  const int64_t d = s.size(-1), rows = s.numel() / d;
  // An unused output has an undefined gradient: zeros for y (rare), "no term" for s.
  const Tensor dy = grads[0].defined() ? on_device(grads[0].to(x_dtype), s, "dy") : torch::zeros_like(s, x_dtype);
  const Tensor ds = grads[1].defined() ? on_device(grads[1].to(s.scalar_type()), s, "ds") : Tensor();
  Tensor dresidual = torch::empty_like(s);
  const bool separate_dx = x_defined && x_dtype != s.scalar_type();
  Tensor dx = separate_dx ? torch::empty_like(s, x_dtype) : Tensor();
  const bool want_dw = ctx->needs_input_grad(weight_input);
  // ablate_residual_norm_dw writes every column of dw: zeros only where no row launches it.
  const auto dw_options = s.options().dtype(torch::kFloat);
  Tensor dw = !want_dw ? Tensor() : rows > 0 ? torch::empty({d}, dw_options) : torch::zeros({d}, dw_options);
  if (rows > 0) {
    const RowLayout l = row_layout(d, vectorisable(d, {&dy, &ds, &s, &weight}), Pass::backward);
    const auto stream = at::cuda::getCurrentCUDAStream();
    const bool w_bf16 = weight.scalar_type() == torch::kBFloat16;
    with_float_or_bf16(x_dtype, "dy", [&](auto x_tag) {
      with_float_or_bf16(s.scalar_type(), "s", [&](auto r_tag) {
        using Tx = typename decltype(x_tag)::type;
        using Tr = typename decltype(r_tag)::type;
        with_layout(l, [&](auto vec, auto iters) {
          auto* kernel = &ablate_residual_norm_bwd<Tx, Tr, decltype(vec)::value, decltype(iters)::value>;
          const int threads = l.threads_per_row * l.rows_per_block;
          const size_t shared = l.rows_per_block > 1 ? size_t(l.rows_per_block) * d * sizeof(float) : 0;
          // As many blocks as fit on the device at once (a device property, so the same grid and
          // hence the same dw summation order on every run), fewer when there are fewer rows.
          int per_sm = 0;
          C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, shared));
          const int64_t grid =
              std::min<int64_t>(ceil_div(rows, l.rows_per_block), int64_t(std::max(per_sm, 1)) * sm_count());
          Tensor partial = want_dw ? torch::empty({grid, d}, s.options().dtype(torch::kFloat)) : Tensor();
          kernel<<<grid, block_of(l), shared, stream>>>(
              static_cast<const Tx*>(dy.data_ptr()), ds.defined() ? static_cast<const Tr*>(ds.data_ptr()) : nullptr,
              static_cast<const Tr*>(s.data_ptr()), weight.data_ptr(), w_bf16, rstd.data_ptr<float>(),
              static_cast<Tr*>(dresidual.data_ptr()), separate_dx ? static_cast<Tx*>(dx.data_ptr()) : nullptr,
              want_dw ? partial.data_ptr<float>() : nullptr, rows, static_cast<int>(d));
          C10_CUDA_KERNEL_LAUNCH_CHECK();
          if (want_dw) {
            ablate_residual_norm_dw<<<ceil_div(d, 32), dim3(32, kDwSlices), 0, stream>>>(
                partial.data_ptr<float>(), grid, static_cast<int>(d), dw.data_ptr<float>());
            C10_CUDA_KERNEL_LAUNCH_CHECK();
          }
        });
      });
    });
  }
  if (x_defined && !separate_dx) dx = dresidual;  // d(s)/dx = d(s)/d(residual) = identity
  return {dx, dresidual, want_dw ? dw.to(weight.scalar_type()) : Tensor()};
}

// residual_norm(x, residual, weight): inputs (x, residual, weight, eps).
class AddNormFunction : public torch::autograd::Function<AddNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& residual, const Tensor& weight, double eps) {
    return forward_impl(ctx, x, residual, weight, eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = backward_impl(ctx, grads, /*weight_input=*/2);
    return {g[0], g[1], g[2], Tensor()};
  }
};

// residual_norm(undefined, residual, weight): a LibTorch autograd function cannot take an undefined
// tensor as an input, so the first layer's call has its own (inputs residual, weight, eps).
class NormFunction : public torch::autograd::Function<NormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& residual,
                                                const Tensor& weight, double eps) {
    return forward_impl(ctx, Tensor(), residual, weight, eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = backward_impl(ctx, grads, /*weight_input=*/1);
    return {g[1], g[2], Tensor()};
  }
};

}  // namespace

namespace tuning {
void residual_norm_forward_iters(int iters) {
  TORCH_CHECK(iters == 0 || iters == 1 || iters == 2 || iters == 4, "residual_norm_forward_iters: 0, 1, 2 or 4");
  forced_forward_iters = iters;
}
}  // namespace tuning

std::pair<Tensor, Tensor> residual_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  auto out =
      x.defined() ? AddNormFunction::apply(x, residual, weight, eps) : NormFunction::apply(residual, weight, eps);
  return {out[0], out[1]};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(residual_norm_fused_cuda) {
  registry.residual_norm("fused_cuda", ABLATE_CUDA_ONLY(&fused::residual_norm));
}

}  // namespace ablate::kernels
