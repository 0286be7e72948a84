// kernels/loss/fused_cuda.cu: backend `fused_cuda` of the `loss` seam, fused linear
// cross-entropy. The reference (kernels/loss/reference.cpp) materialises the [N, V]
// logits, an fp32 copy, the softmax and the gradient of each: several GiB at N 16384, V 32768. Here the
// rows are taken in chunks of a few MiB of logits; per chunk:
//   1. logits = hidden_chunk @ W^T into one reused buffer (cuBLAS, the GEMM dtype autocast would use);
//   2. ablate_lce_rows: one block a row, an online (max, sum of exp) pass gives the log-sum-exp and the
//      row's loss; a second pass over the row (from L2) overwrites the logits with the gradient
//      d loss / d logits = (softmax - onehot(target)) * mask * scale;
//   3. d hidden_chunk = grad @ W and dW += grad^T @ hidden_chunk (cuBLAS, fp32 accumulation of dW).
// Two modes, both autograd functions:
//   mean (the seam): the scalar sum(ce * mask) / max(sum(mask), 1). Its gradient is known up to the
//     scalar upstream gradient g, so steps 1-3 run inside forward (when an input needs a gradient) and
//     backward only scales dh and dW by g: three GEMMs in all, as many as the full-logits path.
//   none: per-row ce * mask [N]. The upstream gradient differs per row, so forward keeps the
//     log-sum-exp only and backward recomputes each chunk's logits with row scale mask_r * g_r (a known
//     bug of a popular implementation scales every row by g_0; tests/kernels/fused_test.cpp checks
//     exactly that case).
// Backend `fused_cuda_fp8_rowwise` (the LM head's FP8 family; the projections' is seam dense_gemm): the same
// passes with the three GEMMs in FP8 (at::_scaled_mm), the rowwise recipe of the FP8 projections: W
// quantised once a call from its fp32 master along d and along V, each chunk's hidden rows along d and
// along its rows, each chunk's logits gradient along V and along its rows (fp8_quantize.h), every operand
// e4m3 with power-of-two scales; logits and d hidden bf16, dW fp32 (written by the first chunk's GEMM,
// added to by the others). Mean mode only; N, d and V multiples of 16.
// fp32 arithmetic in the row kernel; masked rows have loss 0 and gradient 0 (their target is not read);
// an unmasked target outside [0, V) gives a NaN loss (the runner then fails the run at that step).
// Tests: kernels_tests --gtest_filter='*Parity*loss*:FusedCuda*Loss*:Fp8Head*'. Benchmark: build/bench/kernels_bench --benchmark_filter=loss.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <ATen/autocast_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>

#include <cfloat>

#include "kernels/cuda_common.cuh"
#include "kernels/dense_gemm/fp8_recipe.h"
#include "kernels/loss/fused_cuda.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kRowThreads = 512;

// (max, sum of exp(x - max)) pairs combined: the online softmax merge.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both empty
  s = s * __expf(m - mx) + s2 * __expf(m2 - mx);
  m = mx;
}

// The block-wide merge of every thread's (m, s); every thread gets the result.
__device__ __forceinline__ void block_merge(float& m, float& s) {
  __shared__ float ms[kRowThreads / 32], ss[kRowThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) ms[warp] = m, ss[warp] = s;
  __syncthreads();
  m = lane < warps ? ms[lane] : -INFINITY;
  s = lane < warps ? ss[lane] : 0.f;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}

// One block per row of `logits` [rows, V] (T = the GEMM dtype). With lse_in == nullptr the row's
// log-sum-exp is computed and written to lse_out, and loss[row] = (lse - logit[target]) * mask. With
// WRITE_GRAD the row is overwritten by (exp(x - lse) - [v == target]) * mask * scale, where scale is
// *uniform_scale (mean mode: 1 / count, read on the device: no host sync) or row_grad[row] (none mode).
template <typename T, int VEC, bool WRITE_GRAD>
__global__ void __launch_bounds__(kRowThreads)
    ablate_lce_rows(T* __restrict__ logits, int64_t V, const int64_t* __restrict__ targets,
                    const float* __restrict__ mask, const float* __restrict__ lse_in, float* __restrict__ lse_out,
                    float* __restrict__ loss, const float* __restrict__ uniform_scale,
                    const float* __restrict__ row_grad) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * V;
  const float m_r = mask[row];
  const int64_t target = targets[row];
  const bool target_ok = target >= 0 && target < V;
  float lse;
  if (lse_in != nullptr) {
    lse = lse_in[row];
  } else {
    float m = -INFINITY, s = 0.f;
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < V; col += int64_t(blockDim.x) * VEC) {
      float v[VEC];
      load_vec<VEC>(x + col, v);
      float vm = v[0];
#pragma unroll
      for (int i = 1; i < VEC; ++i) vm = fmaxf(vm, v[i]);
      float vs = 0.f;
#pragma unroll
      for (int i = 0; i < VEC; ++i) vs += __expf(v[i] - vm);
      merge(m, s, vm, vs);
    }
    block_merge(m, s);
    lse = m + logf(s);
    if (threadIdx.x == 0) {
      lse_out[row] = lse;
      float ce = 0.f;
      if (m_r != 0.f) ce = target_ok ? (lse - to_float(x[target])) * m_r : NAN;
      loss[row] = ce;
    }
    // Everyone has read the target logit above only through thread 0; the grad pass below overwrites
    // the row, so the block synchronises first.
    if constexpr (WRITE_GRAD) __syncthreads();
  }
  if constexpr (WRITE_GRAD) {
    const float scale = m_r * (row_grad != nullptr ? row_grad[row] : *uniform_scale);
    for (int64_t col = int64_t(threadIdx.x) * VEC; col < V; col += int64_t(blockDim.x) * VEC) {
      float v[VEC];
      if (scale == 0.f) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[i] = 0.f;
      } else {
        load_vec<VEC>(x + col, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float onehot = (col + i == target) ? 1.f : 0.f;
          v[i] = (__expf(v[i] - lse) - onehot) * scale;
        }
      }
      store_vec<VEC>(x + col, v);
    }
  }
}

// Launches ablate_lce_rows over the first `rows` rows of `logits`.
void launch_rows(const Tensor& logits, int64_t rows, const int64_t* targets, const float* mask, const float* lse_in,
                 float* lse_out, float* loss, bool write_grad, const float* uniform_scale, const float* row_grad) {
  if (rows == 0) return;
  const int64_t V = logits.size(1);
  const bool vec = V % 8 == 0 && aligned16(logits.data_ptr());
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(logits.scalar_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto go = [&](auto vec_c, auto grad_c) {
      constexpr int VEC = decltype(vec_c)::value;
      const int threads = static_cast<int>(std::min<int64_t>(kRowThreads, ceil_div(ceil_div(V, VEC), 32) * 32));
      ablate_lce_rows<T, VEC, decltype(grad_c)::value><<<rows, threads, 0, stream>>>(
          static_cast<T*>(logits.data_ptr()), V, targets, mask, lse_in, lse_out, loss, uniform_scale, row_grad);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    };
    auto with_grad = [&](auto vec_c) {
      if (write_grad)
        go(vec_c, std::true_type{});
      else
        go(vec_c, std::false_type{});
    };
    if (vec)
      with_grad(std::integral_constant<int, 8>{});
    else
      with_grad(std::integral_constant<int, 1>{});
  });
}

// x *= *g in place, fp32 arithmetic: the scalar upstream gradient applied to the gradients computed in
// forward. (A LibTorch mul_ by a 0-dim fp32 tensor would round g to x's dtype first.)
template <typename T, int VEC>
__global__ void ablate_lce_scale(T* __restrict__ x, int64_t groups, const float* __restrict__ g) {
  const float scale = *g;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    float v[VEC];
    load_vec<VEC>(x + i * VEC, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] *= scale;
    store_vec<VEC>(x + i * VEC, v);
  }
}

void scale_in_place(Tensor& x, const Tensor& g) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool vec = n % 8 == 0 && aligned16(x.data_ptr());
  const int64_t groups = vec ? n / 8 : n;
  const int64_t grid = std::min<int64_t>(ceil_div(groups, 256), int64_t(sm_count()) * 16);
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(x.scalar_type(), "gradient", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      ablate_lce_scale<T, 8><<<grid, 256, 0, stream>>>(static_cast<T*>(x.data_ptr()), groups, g.data_ptr<float>());
    else
      ablate_lce_scale<T, 1><<<grid, 256, 0, stream>>>(static_cast<T*>(x.data_ptr()), groups, g.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// Rows a chunk so that its logits take about kChunkBytes (at least 1 row, at most all). 256 MiB: each
// chunk also reads and writes the fp32 dW [V, d] once, and on one H100 at the nam56r-small head (N 16384,
// d 1024, V 32768: 4096 rows a chunk) fwd+bwd takes 6.06 ms against 7.40 at 64 MiB (1024 rows) and 5.93
// at 512 MiB, for 192 and 448 MiB more transient memory (kernels_bench loss/*chunk_rows*, 2026-11-25).
constexpr int64_t kChunkBytes = int64_t{256} << 20;

int64_t chunk_rows_for(int64_t requested, int64_t rows, int64_t V, int64_t element_size) {
  const int64_t automatic = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, V * element_size));
  return std::max<int64_t>(1, std::min(rows, requested > 0 ? requested : automatic));
}

// The dtype the head GEMM runs in: the autocast dtype when autocast is on for CUDA (hidden bf16, weight
// fp32 in the model), else the promoted input dtype.
at::ScalarType gemm_dtype(const Tensor& hidden, const Tensor& weight) {
  if (at::autocast::is_autocast_enabled(at::kCUDA)) return at::autocast::get_autocast_dtype(at::kCUDA);
  return at::promote_types(hidden.scalar_type(), weight.scalar_type());
}

// d hidden rows [start, start + n) = grad @ W (written), dW += grad^T @ h (fp32 accumulation); each
// only when that tensor is defined (its input needs a gradient).
void accumulate_grads(const Tensor& grad, const Tensor& h, const Tensor& w_mm, Tensor& dh, Tensor& dw, int64_t start,
                      int64_t n) {
  if (dh.defined()) {
    Tensor dh_rows = dh.narrow(0, start, n);
    at::mm_out(dh_rows, grad, w_mm);
  }
  if (dw.defined()) {
    if (grad.scalar_type() == at::kFloat)
      dw.addmm_(grad.t(), h);
    else
      at::addmm_out(dw, dw, grad.t(), h, at::kFloat);
  }
}

// FP8 head GEMMs (HeadGemms::fp8_rowwise): the rowwise recipe of the FP8 projections
// (kernels/dense_gemm/fp8_recipe.h): every operand e4m3 with one current power-of-two scale per row
// along its GEMM's inner dimension; the logits GEMM with fast accumulation, the gradients' without.
constexpr int64_t kFp8Multiple = 16;  // cuBLASLt's FP8 GEMMs take leading dimensions in multiples of 16

fp8::Quantized quantize_rowwise(const Tensor& x, bool rows, bool cols) {
  return fp8::quantize(x, fp8::kRowwise.options(fp8::kRowwise.inputs, rows, cols));
}

// out = a b^T from a [M, K] and b [N, K], both quantised along K, with their per-row inverse scales.
void scaled_mm_out(Tensor& out, const Tensor& a, const Tensor& a_inverse, const Tensor& b, const Tensor& b_inverse,
                   bool fast_accumulation) {
  fp8::scaled_mm_out(out, a, a_inverse, b, b_inverse, fp8::Scaling::rowwise, fast_accumulation);
}

struct LceInputs {
  Tensor hidden, w_mm, targets, mask;  // hidden and w_mm in the GEMM dtype; targets int64; mask fp32
  int64_t chunk;
  // FP8 only: W quantised along d (rows, for the logits) and along V (cols, for d hidden); w_mm undefined.
  bool fp8 = false;
  fp8::Quantized w_fp8;
};

LceInputs prepare(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const Tensor& mask,
                  int64_t chunk_rows, HeadGemms gemms = HeadGemms::autocast) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "loss fused_cuda: hidden must be [N, d] and head_weight [V, d], got ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(targets.dim() == 1 && mask.dim() == 1 && targets.size(0) == hidden.size(0) &&
                  mask.size(0) == hidden.size(0),
              "loss fused_cuda: targets and mask must be [N] with N = ", hidden.size(0));
  const auto mm = gemm_dtype(hidden, weight);
  TORCH_CHECK(mm == at::kFloat || mm == at::kBFloat16, "loss fused_cuda: GEMM dtype must be fp32 or bf16, got ", mm);
  LceInputs in;
  in.targets = on_device(targets.to(torch::kLong), hidden, "targets");
  in.mask = on_device(mask.to(torch::kFloat), hidden, "mask");
  if (gemms == HeadGemms::fp8_rowwise) {
    const int64_t N = hidden.size(0), d = hidden.size(1), V = weight.size(0);
    TORCH_CHECK(N % kFp8Multiple == 0 && d % kFp8Multiple == 0 && V % kFp8Multiple == 0,
                "loss fused_cuda_fp8_rowwise: hidden ", hidden.sizes(), " and head_weight ", weight.sizes(),
                " must have every size a multiple of 16 (FP8 GEMMs); use loss = \"fused_cuda\" for this model");
    TORCH_CHECK(hidden.scalar_type() == at::kBFloat16 || hidden.scalar_type() == at::kFloat,
                "loss fused_cuda_fp8_rowwise: hidden must be bf16 or fp32, got ", hidden.scalar_type());
    in.fp8 = true;
    // Logits and d hidden are bf16 (the GEMM outputs); the operands are quantised from what they are
    // (fp32 master weights directly, no bf16 copy of W).
    in.hidden = on_device(hidden.to(at::kBFloat16), hidden, "hidden");
    in.w_fp8 = quantize_rowwise(on_device(weight, hidden, "head_weight").contiguous(), /*rows=*/true,
                                /*cols=*/hidden.requires_grad());
    // Each chunk is an operand of the weight gradient's GEMM along its rows: a multiple of 16 rows.
    const int64_t rows = chunk_rows_for(chunk_rows, N, V, c10::elementSize(at::kBFloat16));
    in.chunk = std::min(N, std::max(kFp8Multiple, rows / kFp8Multiple * kFp8Multiple));
    return in;
  }
  in.hidden = on_device(hidden.to(mm), hidden, "hidden");
  in.w_mm = on_device(weight.to(mm), hidden, "head_weight");
  in.chunk = chunk_rows_for(chunk_rows, hidden.size(0), weight.size(0), c10::elementSize(mm));
  return in;
}

// One pass over the row chunks: per chunk the logits GEMM into one reused buffer, then the row kernel.
// Forward (lse_in undefined) writes lse_out and loss; with write_grad the logits gradient, scaled by
// *uniform_scale (mean mode) or row_grad (none mode), goes into dh / dw (each when defined).
struct ChunkPass {
  Tensor lse_in, lse_out, loss;  // [N] fp32
  bool write_grad = false;
  Tensor uniform_scale, row_grad;  // [1] / [N] fp32
  Tensor dh, dw;                   // GEMM dtype / fp32
};

void run_chunks(const LceInputs& in, ChunkPass& pass) {
  const int64_t rows = in.hidden.size(0), V = in.w_mm.size(0);
  if (rows == 0) return;
  auto at_row = [](const Tensor& t, int64_t start) { return t.defined() ? t.data_ptr<float>() + start : nullptr; };
  Tensor buffer = torch::empty({std::min(in.chunk, rows), V}, in.hidden.options());
  const Tensor w_t = in.fp8 ? Tensor() : in.w_mm.t();
  Tensor dw_chunk;  // FP8: a later chunk's dW, added to the first's (one buffer for every chunk)
  for (int64_t start = 0; start < rows; start += in.chunk) {
    const int64_t n = std::min(in.chunk, rows - start);
    Tensor logits = buffer.narrow(0, 0, n);
    const Tensor h = in.hidden.narrow(0, start, n);
    fp8::Quantized hq;
    if (in.fp8) {
      hq = quantize_rowwise(h, /*rows=*/true, /*cols=*/pass.write_grad && pass.dw.defined());
      scaled_mm_out(logits, hq.rows, hq.rows_inverse, in.w_fp8.rows, in.w_fp8.rows_inverse, /*fast=*/true);
    } else {
      at::mm_out(logits, h, w_t);
    }
    launch_rows(logits, n, in.targets.data_ptr<int64_t>() + start, in.mask.data_ptr<float>() + start,
                at_row(pass.lse_in, start), at_row(pass.lse_out, start), at_row(pass.loss, start), pass.write_grad,
                at_row(pass.uniform_scale, 0), at_row(pass.row_grad, start));
    if (!pass.write_grad) continue;
    if (!in.fp8) {
      accumulate_grads(logits, h, in.w_mm, pass.dh, pass.dw, start, n);
      continue;
    }
    // The logits gradient along V (d hidden = grad W) and along the chunk's rows (dW += grad^T h).
    const auto gq = quantize_rowwise(logits, /*rows=*/pass.dh.defined(), /*cols=*/pass.dw.defined());
    if (pass.dh.defined()) {
      Tensor dh_rows = pass.dh.narrow(0, start, n);
      scaled_mm_out(dh_rows, gq.rows, gq.rows_inverse, in.w_fp8.cols, in.w_fp8.cols_inverse, /*fast=*/false);
    }
    if (pass.dw.defined()) {
      if (start == 0) {  // the first chunk writes dW, the others add to it
        scaled_mm_out(pass.dw, gq.cols, gq.cols_inverse, hq.cols, hq.cols_inverse, /*fast=*/false);
      } else {
        if (!dw_chunk.defined()) dw_chunk = torch::empty_like(pass.dw);
        scaled_mm_out(dw_chunk, gq.cols, gq.cols_inverse, hq.cols, hq.cols_inverse, /*fast=*/false);
        pass.dw.add_(dw_chunk);
      }
    }
  }
}

// Mean mode: inputs (hidden, weight, targets, mask, chunk_rows). The gradients are computed in forward
// and held in saved_data (not save_for_backward) so that backward can scale them in place and drop
// them: the graph is differentiable once, like a fused optimizer step.
class LinearCrossEntropyMean : public torch::autograd::Function<LinearCrossEntropyMean> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& hidden, const Tensor& weight,
                        const Tensor& targets, const Tensor& mask, int64_t chunk_rows, int64_t gemms) {
    const LceInputs in = prepare(hidden, weight, targets, mask, chunk_rows, static_cast<HeadGemms>(gemms));
    const Tensor count = in.mask.sum().clamp_min(1.0);
    ChunkPass pass;
    pass.lse_out = torch::empty({in.hidden.size(0)}, in.mask.options());
    pass.loss = torch::empty_like(pass.lse_out);
    if (hidden.requires_grad()) pass.dh = torch::empty_like(in.hidden);
    // FP8: the first chunk's GEMM writes every element of dW.
    if (weight.requires_grad())
      pass.dw = in.fp8 ? torch::empty(weight.sizes(), in.mask.options()) : torch::zeros(weight.sizes(), in.mask.options());
    pass.write_grad = pass.dh.defined() || pass.dw.defined();
    if (pass.write_grad) pass.uniform_scale = count.reciprocal().reshape({1});
    run_chunks(in, pass);
    ctx->saved_data["dh"] = pass.dh;
    ctx->saved_data["dw"] = pass.dw;
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["consumed"] = false;
    return pass.loss.sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!ctx->saved_data["consumed"].toBool(),
                "loss fused_cuda: backward through the fused loss twice (its gradients are computed in forward "
                "and released by the first backward); use the `chunked` loss for higher-order or repeated backward");
    ctx->saved_data["consumed"] = true;
    Tensor dh = ctx->saved_data["dh"].toTensor(), dw = ctx->saved_data["dw"].toTensor();
    ctx->saved_data["dh"] = Tensor();
    ctx->saved_data["dw"] = Tensor();
    const Tensor g = on_device(grads[0].to(torch::kFloat), grads[0], "grad_output");
    TORCH_CHECK(g.numel() == 1, "loss fused_cuda: the mean loss takes a scalar upstream gradient");
    if (dh.defined()) {
      scale_in_place(dh, g);
      dh = dh.to(static_cast<at::ScalarType>(ctx->saved_data["hidden_dtype"].toInt()));
    }
    if (dw.defined()) {
      scale_in_place(dw, g);
      dw = dw.to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    }
    return {dh, dw, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// None mode: per-row losses; backward recomputes the logits chunk by chunk with row scales mask * g.
class LinearCrossEntropyRows : public torch::autograd::Function<LinearCrossEntropyRows> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& hidden, const Tensor& weight,
                        const Tensor& targets, const Tensor& mask, int64_t chunk_rows) {
    const LceInputs in = prepare(hidden, weight, targets, mask, chunk_rows);
    ChunkPass pass;
    pass.lse_out = torch::empty({in.hidden.size(0)}, in.mask.options());
    pass.loss = torch::empty_like(pass.lse_out);
    run_chunks(in, pass);
    ctx->save_for_backward({in.hidden, in.w_mm, in.targets, in.mask, pass.lse_out});
    ctx->saved_data["chunk"] = in.chunk;
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return pass.loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const LceInputs in{saved[0], saved[1], saved[2], saved[3], ctx->saved_data["chunk"].toInt()};
    const int64_t rows = in.hidden.size(0);
    ChunkPass pass;
    pass.lse_in = saved[4];
    pass.write_grad = true;
    pass.row_grad = on_device(grads[0].to(torch::kFloat), in.hidden, "grad_output");
    TORCH_CHECK(pass.row_grad.numel() == rows, "loss fused_cuda: per-row gradient must have ", rows, " elements");
    if (ctx->needs_input_grad(0)) pass.dh = torch::empty_like(in.hidden);
    if (ctx->needs_input_grad(1)) pass.dw = torch::zeros(in.w_mm.sizes(), in.mask.options());
    if (pass.dh.defined() || pass.dw.defined()) run_chunks(in, pass);
    Tensor dh = pass.dh, dw = pass.dw;
    if (dh.defined()) dh = dh.to(static_cast<at::ScalarType>(ctx->saved_data["hidden_dtype"].toInt()));
    if (dw.defined()) dw = dw.to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()));
    return {dh, dw, Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& head_weight, const Tensor& targets, const Tensor& mask,
                            LossReduction reduction, int64_t chunk_rows, HeadGemms gemms) {
  if (reduction == LossReduction::mean)
    return LinearCrossEntropyMean::apply(hidden, head_weight, targets, mask, chunk_rows, static_cast<int64_t>(gemms));
  TORCH_CHECK(gemms == HeadGemms::autocast, "loss fused_cuda: per-row losses run the head GEMMs as autocast does "
                                            "(FP8 head GEMMs: the mean reduction only)");
  return LinearCrossEntropyRows::apply(hidden, head_weight, targets, mask, chunk_rows);
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(loss_fused_cuda) {
  registry.loss("fused_cuda", ABLATE_CUDA_ONLY([](const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
                                    const torch::Tensor& m) {
                  return fused::linear_cross_entropy(h, w, t, m, fused::LossReduction::mean);
                }));
  registry.loss("fused_cuda_fp8_rowwise",
                ABLATE_CUDA_ONLY([](const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
                                    const torch::Tensor& m) {
                  return fused::linear_cross_entropy(h, w, t, m, fused::LossReduction::mean, /*chunk_rows=*/0,
                                                     fused::HeadGemms::fp8_rowwise);
                }));
}

}  // namespace ablate::kernels
