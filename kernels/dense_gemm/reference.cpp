// kernels/dense_gemm/reference.cpp: see reference.h.
#include "kernels/dense_gemm/reference.h"

#include <ATen/autocast_mode.h>

#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = cast(x) cast(W)^T + cast(b) in the autocast dtype, the casts saved for the backward.
Tensor cast_and_project(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        at::ScalarType dtype) {
  NoAutocastScope casts_done_here;
  const auto xc = x.to(dtype), wc = weight.to(dtype);
  ctx->save_for_backward({xc, wc});
  ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
  return at::linear(xc, wc, bias.defined() ? bias.to(dtype) : Tensor());
}

// {dx in x's dtype (undefined when x needs none), dW in fp32 from the GEMM, db in fp32 when with_bias}.
variable_list project_backward(AutogradContext* ctx, const Tensor& grad, bool with_bias) {
  NoAutocastScope explicit_dtypes;
  const auto saved = ctx->get_saved_variables();
  const Tensor &xc = saved[0], &wc = saved[1];
  const int64_t out = wc.size(0), in = wc.size(1);
  const auto dy = grad.to(wc.scalar_type()).reshape({-1, out});
  const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
  const auto dx = ctx->needs_input_grad(0) ? at::mm(dy, wc).view(xc.sizes()).to(x_dtype) : Tensor();
  const auto dw = at::mm(dy.t(), xc.reshape({-1, in}), torch::kFloat);
  return {dx, dw, with_bias ? dy.sum(0, /*keepdim=*/false, torch::kFloat) : Tensor()};
}

// Two functions because a custom autograd function's inputs must all be defined tensors: without and
// with a bias. Both for fp32 weights (and bias) only: the gradients are written in fp32.
class AutocastLinear : public torch::autograd::Function<AutocastLinear> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, at::ScalarType dtype) {
    return cast_and_project(ctx, x, weight, Tensor(), dtype);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = project_backward(ctx, grads[0], /*with_bias=*/false);
    return {g[0], g[1], Tensor()};
  }
};

class AutocastLinearBias : public torch::autograd::Function<AutocastLinearBias> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                        at::ScalarType dtype) {
    return cast_and_project(ctx, x, weight, bias, dtype);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto g = project_backward(ctx, grads[0], /*with_bias=*/true);
    return {g[0], g[1], g[2], Tensor()};
  }
};

}  // namespace

Tensor dense_gemm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool autocast = x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA);
  if (!autocast || weight.scalar_type() != torch::kFloat || (bias.defined() && bias.scalar_type() != torch::kFloat))
    return torch::linear(x, weight, bias);
  const auto dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  if (dtype == torch::kFloat) return torch::linear(x, weight, bias);
  return bias.defined() ? AutocastLinearBias::apply(x, weight, bias, dtype) : AutocastLinear::apply(x, weight, dtype);
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(dense_gemm_reference) {
  registry.dense_gemm("reference", [](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return reference::dense_gemm(x, w, b);
  });
}

}  // namespace ablate::kernels
