// kernels/rope/reference.cpp: the reference backend of seam `rope` (MLA layout, RopeFn in
// kernels/seams.h): q_r rotated per head, the one shared k_r rotated and broadcast to every head, then
// [nope ; rope] concatenated. LibTorch ops, autograd-differentiable, CPU and CUDA, fp32/fp64/bf16
// (bf16 computed in fp32).
// Tests: kernels_tests --gtest_filter='Parity*rope*' (tests/kernels/parity_test.cpp).
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

std::pair<torch::Tensor, torch::Tensor> rope_reference(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
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

}  // namespace

ABLATE_REGISTER_BACKENDS(rope_reference) {
  registry.rope("reference", &rope_reference);
}

}  // namespace ablate::kernels
