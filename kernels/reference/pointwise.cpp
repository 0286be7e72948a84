// kernels/reference/pointwise.cpp: the reference backends of the row-local seams `rope`,
// `residual_norm` and `swiglu`, and the pair rotation that rope and the Mamba-3 block share.
// LibTorch ops, autograd-differentiable, CPU and CUDA, fp32/fp64/bf16 (bf16 is computed in fp32).
// Contracts: kernels/dispatch.h (RopeFn, ResidualNormFn, SwigluFn).
// Tests: kernels_tests --gtest_filter='*Parity*' (tests/kernels/parity_test.cpp) and model_tests.
#include "kernels/reference/ops.h"

namespace ablate::kernels::reference {

torch::Tensor rotate_adjacent_pairs(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.size(-1) % 2 == 0, "rotate_adjacent_pairs: last dim ", x.size(-1), " is odd");
  TORCH_CHECK(cos.size(-1) * 2 == x.size(-1) && sin.sizes() == cos.sizes(),
              "rotate_adjacent_pairs: cos/sin need last dim ", x.size(-1) / 2);
  const auto dt = compute_dtype(x);
  const auto pairs = x.to(dt).unflatten(-1, {x.size(-1) / 2, 2});
  const auto even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  const auto c = cos.to(dt), s = sin.to(dt);
  return torch::stack({even * c - odd * s, even * s + odd * c}, -1).flatten(-2).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                             const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                             const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(q_rope.dim() == 4 && k_rope.dim() == 4 && k_rope.size(2) == 1,
              "rope: q_rope must be [B,T,H,dr] and k_rope [B,T,1,dr]");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == q_rope.size(1), "rope: cos/sin must be [T, dr/2]");
  // [T, dr/2] -> [T, 1, dr/2]: broadcasts over batch and heads of [B, T, H, dr/2].
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  const auto q_rot = rotate_adjacent_pairs(q_rope, c, s);
  const auto k_rot = rotate_adjacent_pairs(k_rope, c, s).expand({-1, -1, k_nope.size(2), -1});
  return {torch::cat({q_nope, q_rot}, -1), torch::cat({k_nope, k_rot}, -1)};
}

std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                      const torch::Tensor& weight, double eps) {
  const auto dt = x.defined() ? at::promote_types(compute_dtype(residual), x.scalar_type()) : compute_dtype(residual);
  const auto sum = x.defined() ? residual.to(dt) + x.to(dt) : residual.to(dt);
  const auto inv_rms = torch::rsqrt(sum.pow(2).mean(-1, /*keepdim=*/true) + eps);
  const auto y = sum * inv_rms * weight.to(dt);
  const auto out_dtype = x.defined() ? x.scalar_type() : residual.scalar_type();
  return {y.to(out_dtype), sum.to(residual.scalar_type())};
}

torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b) { return torch::silu(a) * b; }

}  // namespace ablate::kernels::reference
