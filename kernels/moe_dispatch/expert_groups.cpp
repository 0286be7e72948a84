// kernels/moe_dispatch/expert_groups.cpp: see expert_groups.h.
#include "kernels/moe_dispatch/expert_groups.h"

#include <algorithm>
#include <cmath>

namespace ablate::kernels {

void check_moe_dispatch_args(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor) {
  TORCH_CHECK(
      x.dim() == 2 && topk_idx.dim() == 2 && topk_idx.sizes() == topk_w.sizes() && topk_idx.size(0) == x.size(0),
      "moe_dispatch: x must be [T, d] and topk_idx, topk_w [T, k]");
  TORCH_CHECK(w1.dim() == 3 && w1.sizes() == w3.sizes() && w2.size(0) == w1.size(0) && w2.size(1) == x.size(1) &&
                  w2.size(2) == w1.size(1) && w1.size(2) == x.size(1),
              "moe_dispatch: w1, w3 must be [E, f, d] and w2 [E, d, f]");
  TORCH_CHECK(capacity_factor >= 0, "moe_dispatch: capacity_factor must be >= 0");
}

ExpertGroups group_by_expert(const torch::Tensor& topk_idx, int64_t experts) {
  const auto slot_expert = topk_idx.reshape({-1}).to(torch::kLong);
  ExpertGroups g;
  g.by_expert = std::get<1>(slot_expert.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  g.position = torch::empty_like(g.by_expert).scatter_(0, g.by_expert, torch::arange(g.by_expert.size(0), g.by_expert.options()));
  g.sorted_expert = slot_expert.index_select(0, g.by_expert);
  g.load = torch::zeros({experts}, slot_expert.options()).scatter_add_(0, slot_expert, torch::ones_like(slot_expert));
  g.group_start = g.load.cumsum(0) - g.load;
  return g;
}

namespace {

class PermuteRows : public torch::autograd::Function<PermuteRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& order,
                               const torch::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    return x.index_select(0, order);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto inverse = ctx->get_saved_variables()[0];
    return {grads[0].index_select(0, inverse), torch::Tensor(), torch::Tensor()};
  }
};

class GatherSlotRows : public torch::autograd::Function<GatherSlotRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& order,
                               const torch::Tensor& inverse, int64_t k) {
    ctx->save_for_backward({inverse});
    ctx->saved_data["k"] = k;
    return x.index_select(0, order.div(k, "floor"));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto inverse = ctx->get_saved_variables()[0];
    const int64_t k = ctx->saved_data["k"].toInt();
    const auto& g = grads[0];
    return {g.index_select(0, inverse).view({-1, k, g.size(1)}).sum(1), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gather_slot_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse,
                               int64_t k) {
  return GatherSlotRows::apply(x, order, inverse, k);
}

torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse) {
  return PermuteRows::apply(x, order, inverse);
}

torch::Tensor rank_in_expert(const ExpertGroups& g) {
  return torch::arange(g.by_expert.size(0), g.by_expert.options()) - g.group_start.index_select(0, g.sorted_expert);
}

int64_t expert_capacity(double capacity_factor, int64_t slots, int64_t experts) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(slots) / static_cast<double>(experts))));
}

}  // namespace ablate::kernels
