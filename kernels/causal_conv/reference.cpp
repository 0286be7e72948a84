// kernels/causal_conv/reference.cpp: the reference backend of seam `causal_conv` (CausalConvFn in
// kernels/seams.h): the R block's causal depthwise convolution in LibTorch ops, as the block computed it
// before it was a seam (zero-pad K-1 steps in front, then bias + one shifted product per tap, in tap
// order; bias in x's dtype, the sum in the promoted dtype), so the reference lane did not move.
// Autograd-differentiable, any device and dtype.
// Tests: kernels_tests --gtest_filter='*Parity*causal_conv*'; model_tests --gtest_filter='BlockCausalConv*'.
#include "kernels/causal_conv/reference.h"

#include "kernels/registry.h"

namespace ablate::kernels {

void reference::check_causal_conv_args(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  TORCH_CHECK(x.defined() && x.dim() == 3, "causal_conv: x must be [B,T,C], got ", x.defined() ? x.sizes() : at::IntArrayRef{});
  const int64_t C = x.size(2);
  TORCH_CHECK(weight.defined() && weight.dim() == 2 && weight.size(0) == C && weight.size(1) >= 1,
              "causal_conv: weight must be [C,K] with C = ", C, " (x's channels) and K >= 1, got ",
              weight.defined() ? weight.sizes() : at::IntArrayRef{});
  TORCH_CHECK(bias.defined() && bias.dim() == 1 && bias.size(0) == C, "causal_conv: bias must be [C] with C = ", C,
              ", got ", bias.defined() ? bias.sizes() : at::IntArrayRef{});
  TORCH_CHECK(weight.device() == x.device() && bias.device() == x.device(),
              "causal_conv: x, weight and bias must be on one device, got ", x.device(), ", ", weight.device(), ", ",
              bias.device());
}

namespace {

torch::Tensor causal_conv_reference(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  reference::check_causal_conv_args(x, weight, bias);
  const int64_t T = x.size(1), taps = weight.size(1);
  const auto padded = torch::constant_pad_nd(x, {0, 0, taps - 1, 0});  // zeros before the first step
  auto out = bias.to(x.scalar_type()).expand_as(x);
  for (int64_t j = 0; j < taps; ++j) out = out + padded.narrow(1, j, T) * weight.select(1, j);
  return out;
}

}  // namespace

ABLATE_REGISTER_BACKENDS(causal_conv_reference) {
  registry.causal_conv("reference", &causal_conv_reference);
}

}  // namespace ablate::kernels
