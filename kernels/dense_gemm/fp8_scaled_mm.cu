// kernels/dense_gemm/fp8_scaled_mm.cu: backends `fp8_tensorwise`, `fp8_rowwise`, `fp8_delayed` and
// `fp8_delayed_fast_accum` of seam `dense_gemm`: the three GEMMs of a projection (y = x W^T, dx = dy W,
// dW = dy^T x) as FP8 GEMMs (at::_scaled_mm, cuBLASLt on Hopper's FP8 tensor cores). Current scaling
// (tensorwise, rowwise): every operand is quantised from its own amax in this step (fp8_quantize.h), its
// two orientations in one pair of passes; delayed: from its amax over its last calls at this projection,
// in one pass. fp32 master weights stay fp32 (they are quantised from fp32 every step); y and dx are
// bf16, dW fp32 (written by the GEMM). The recipes: fp8_recipe.h.
// The forward GEMM accumulates with cuBLASLt's "fast accumulation", the gradients' GEMMs without (their
// sums over the token dimension are the longest), as torchao does; fp8_delayed_fast_accum runs them fast
// too (fp8_recipe.h "Accumulation").
// Only under CUDA bf16 autocast with fp32 weights, the training posture the catalog row's availability
// asks for (a bf16 run on Hopper); a call outside it is an error, never a silent bf16 GEMM.
// Tests: kernels_tests --gtest_filter='*Parity*dense_gemm*:Fp8*'. Benchmark:
// build/bench/kernels_bench --benchmark_filter=dense_gemm.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out.
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <ATen/autocast_mode.h>

#include <mutex>
#include <unordered_map>

#include "kernels/dense_gemm/fp8_recipe.h"
#include "kernels/numerics.h"

namespace ablate::kernels::fp8 {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Delayed scaling's state: per projection an amax history for each operand it quantises (x, W, dy), kept
// by the weight, one tensor for the whole run.
struct DelayedOperand {
  Tensor history;
  bool seen = false;  // the first call enters its own amax before it casts: it scales as current scaling does
};
struct CallSite : torch::CustomClassHolder {
  DelayedOperand x, weight, dy;
};

// The call sites by weight. An entry holds a weak reference to its weight: the entry of a freed weight is
// swept away, and while it lives the freed weight's address is not reused, so no new weight inherits
// another's histories.
class CallSites {
 public:
  c10::intrusive_ptr<CallSite> of(const Tensor& weight) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* key = weight.unsafeGetTensorImpl();
    if (const auto it = sites_.find(key); it != sites_.end()) return it->second.site;
    if (sites_.size() >= sweep_at_) {
      for (auto it = sites_.begin(); it != sites_.end();) it = it->second.weight.expired() ? sites_.erase(it) : std::next(it);
      sweep_at_ = 2 * std::max<size_t>(sites_.size(), 64);
    }
    auto site = c10::make_intrusive<CallSite>();
    for (auto* operand : {&site->x, &site->weight, &site->dy}) operand->history = new_amax_history(weight.device());
    sites_.emplace(key, Entry{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(weight.getIntrusivePtr()), site});
    return site;
  }

 private:
  struct Entry {
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> weight;
    c10::intrusive_ptr<CallSite> site;
  };
  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, Entry> sites_;
  size_t sweep_at_ = 64;
};

CallSites& call_sites() {
  static CallSites sites;
  return sites;
}

// `delayed`: the operand's history under the delayed recipe, null under current scaling.
Quantized quantize_operand(const Tensor& x, const Recipe& r, at::ScalarType dtype, bool rows, bool cols,
                           DelayedOperand* delayed) {
  const auto o = r.options(dtype, rows, cols);
  if (delayed == nullptr) return quantize(x, o);
  if (!delayed->seen) {
    quantize_delayed(x, delayed->history, o);
    delayed->seen = true;
  }
  return quantize_delayed(x, delayed->history, o);
}

// What the backward will need (nothing under no_grad, e.g. an evaluation): decided before the autograd
// function runs, since its forward always runs with grad mode off.
struct Needs {
  bool dx, dw;
};

// y = x W^T in bf16; saves what the backward's two GEMMs read: x^T and W^T quantised along M and N.
Tensor project(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Recipe& r, Needs needs) {
  NoAutocastScope casts_done_here;
  const int64_t K = x.size(-1), N = weight.size(0);
  const auto x2 = x.reshape({-1, K});
  const auto site = r.delayed ? call_sites().of(weight) : c10::intrusive_ptr<CallSite>();
  const auto xq = quantize_operand(x2, r, r.inputs, /*rows=*/true, /*cols=*/needs.dw, site ? &site->x : nullptr);
  const auto wq = quantize_operand(weight, r, r.inputs, /*rows=*/true, /*cols=*/needs.dx, site ? &site->weight : nullptr);
  if (site) ctx->saved_data["call_site"] = c10::IValue::make_capsule(site);
  auto y = scaled_mm(xq.rows, xq.rows_inverse, wq.rows, wq.rows_inverse, r.scaling, at::kBFloat16, /*fast=*/true);
  ctx->save_for_backward({xq.cols, xq.cols_inverse, wq.cols, wq.cols_inverse});
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
  auto out_sizes = x.sizes().vec();
  out_sizes.back() = N;
  return y.view(out_sizes);
}

// {dx in x's dtype, dW fp32, db fp32 when with_bias}, undefined where no gradient is needed.
variable_list project_backward(AutogradContext* ctx, const Tensor& grad, const Recipe& r, bool with_bias) {
  NoAutocastScope explicit_dtypes;
  const auto saved = ctx->get_saved_variables();
  const Tensor &x_cols = saved[0], &x_cols_inverse = saved[1], &w_cols = saved[2], &w_cols_inverse = saved[3];
  const int64_t N = grad.size(-1);
  const auto dy = grad.to(at::kBFloat16).reshape({-1, N}).contiguous();
  const bool need_dx = w_cols.defined() && ctx->needs_input_grad(0), need_dw = x_cols.defined();
  const auto site = r.delayed ? c10::static_intrusive_pointer_cast<CallSite>(ctx->saved_data["call_site"].toCapsule())
                              : c10::intrusive_ptr<CallSite>();
  const auto dyq = quantize_operand(dy, r, r.gradient, /*rows=*/need_dx, /*cols=*/need_dw, site ? &site->dy : nullptr);
  Tensor dx, dw;
  if (need_dx) {
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    auto dx_sizes = grad.sizes().vec();
    dx_sizes.back() = w_cols.size(0);  // K
    dx = scaled_mm(dyq.rows, dyq.rows_inverse, w_cols, w_cols_inverse, r.scaling, at::kBFloat16, r.fast_gradients)
             .view(dx_sizes)
             .to(x_dtype);
  }
  if (need_dw)
    dw = scaled_mm(dyq.cols, dyq.cols_inverse, x_cols, x_cols_inverse, r.scaling, at::kFloat, r.fast_gradients);
  return {dx, dw, with_bias ? dy.sum(0, /*keepdim=*/false, torch::kFloat) : Tensor()};
}

void check_posture(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TORCH_CHECK(x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA) &&
                  at::autocast::get_autocast_dtype(at::kCUDA) == at::kBFloat16,
              "dense_gemm fp8: runs only under CUDA bf16 autocast (a bf16 run on the GPU); use dense_gemm = "
              "\"reference\" elsewhere");
  TORCH_CHECK(weight.scalar_type() == at::kFloat && (!bias.defined() || bias.scalar_type() == at::kFloat),
              "dense_gemm fp8: needs fp32 master weights (got ", weight.scalar_type(), ")");
  TORCH_CHECK(x.size(-1) % 16 == 0 && weight.size(0) % 16 == 0 && (x.numel() / x.size(-1)) % 16 == 0,
              "dense_gemm fp8: x ", x.sizes(), " and weight ", weight.sizes(),
              " must have every size a multiple of 16 (FP8 GEMMs); use dense_gemm = \"reference\" for this model");
}

template <const Recipe& kRecipe>
class Fp8Linear : public torch::autograd::Function<Fp8Linear<kRecipe>> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, bool need_dx, bool need_dw) {
    return project(ctx, x, weight, kRecipe, {need_dx, need_dw});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = project_backward(ctx, grads[0], kRecipe, /*with_bias=*/false);
    return {g[0], g[1], Tensor(), Tensor()};
  }
};

template <const Recipe& kRecipe>
class Fp8LinearBias : public torch::autograd::Function<Fp8LinearBias<kRecipe>> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, bool need_dx,
                        bool need_dw) {
    return project(ctx, x, weight, kRecipe, {need_dx, need_dw}).add_(bias.to(at::kBFloat16));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = project_backward(ctx, grads[0], kRecipe, /*with_bias=*/true);
    return {g[0], g[1], g[2], Tensor(), Tensor()};
  }
};

template <const Recipe& kRecipe>
Tensor dense_gemm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_posture(x, weight, bias);
  const bool grad = at::GradMode::is_enabled();
  const bool need_dx = grad && x.requires_grad(), need_dw = grad && weight.requires_grad();
  return bias.defined() ? Fp8LinearBias<kRecipe>::apply(x, weight, bias, need_dx, need_dw)
                        : Fp8Linear<kRecipe>::apply(x, weight, need_dx, need_dw);
}

}  // namespace

Tensor dense_gemm_tensorwise(const Tensor& x, const Tensor& w, const Tensor& b) { return dense_gemm<kTensorwise>(x, w, b); }
Tensor dense_gemm_rowwise(const Tensor& x, const Tensor& w, const Tensor& b) { return dense_gemm<kRowwise>(x, w, b); }
Tensor dense_gemm_delayed(const Tensor& x, const Tensor& w, const Tensor& b) { return dense_gemm<kDelayed>(x, w, b); }
Tensor dense_gemm_delayed_fast_accum(const Tensor& x, const Tensor& w, const Tensor& b) {
  return dense_gemm<kDelayedFastGradients>(x, w, b);
}

}  // namespace ablate::kernels::fp8
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(dense_gemm_fp8) {
  registry.dense_gemm("fp8_tensorwise", ABLATE_CUDA_ONLY(&fp8::dense_gemm_tensorwise));
  registry.dense_gemm("fp8_rowwise", ABLATE_CUDA_ONLY(&fp8::dense_gemm_rowwise));
  registry.dense_gemm("fp8_delayed", ABLATE_CUDA_ONLY(&fp8::dense_gemm_delayed));
  registry.dense_gemm("fp8_delayed_fast_accum", ABLATE_CUDA_ONLY(&fp8::dense_gemm_delayed_fast_accum));
}

}  // namespace ablate::kernels
