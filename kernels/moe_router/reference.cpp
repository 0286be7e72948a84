// kernels/moe_router/reference.cpp: the reference backend of seam `moe_router` (MoeRouterFn in
// kernels/seams.h): the E block's router in LibTorch ops, as the block computed it before it was a seam
// (x taken into fp32, an fp32 linear with autocast off, softmax, top-k, the k weights renormalised), so
// the reference lane did not move. Autograd-differentiable, any device; fp64 when the weight is fp64
// (tests).
// Tests: kernels_tests --gtest_filter='*Parity*moe_router*'; model_tests --gtest_filter='*Moe*'.
#include "kernels/moe_router/reference.h"

#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {

void reference::check_moe_router_args(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k) {
  TORCH_CHECK(x.defined() && x.dim() == 2 && at::isFloatingType(x.scalar_type()),
              "moe_router: x must be a floating [T,d] tensor, got ", x.defined() ? x.sizes() : at::IntArrayRef{});
  TORCH_CHECK(weight.defined() && weight.dim() == 2 && weight.size(1) == x.size(1) && weight.size(0) >= 1,
              "moe_router: weight must be [E,d] with d = ", x.size(1), " (x's width) and E >= 1, got ",
              weight.defined() ? weight.sizes() : at::IntArrayRef{});
  TORCH_CHECK(weight.device() == x.device(), "moe_router: x and weight must be on one device, got ", x.device(), " and ",
              weight.device());
  TORCH_CHECK(top_k >= 1 && top_k <= weight.size(0), "moe_router: top_k must be in [1, E = ", weight.size(0), "], got ",
              top_k);
}

namespace {

MoeRouterOutputs moe_router_reference(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k) {
  reference::check_moe_router_args(x, weight, top_k);
  NoAutocastScope fp32_router;
  const auto dt = compute_dtype(weight);
  auto probs = torch::softmax(torch::linear(x.to(dt), weight.to(dt)), -1);
  auto [top_p, top_idx] = probs.topk(top_k, -1);
  auto top_w = top_p / top_p.sum(-1, /*keepdim=*/true);
  return {.probs = std::move(probs), .top_w = std::move(top_w), .top_idx = std::move(top_idx)};
}

}  // namespace

ABLATE_REGISTER_BACKENDS(moe_router_reference) {
  registry.moe_router("reference", &moe_router_reference);
}

}  // namespace ablate::kernels
