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

ExpertGroups group_by_expert_ops(const torch::Tensor& topk_idx, int64_t experts) {
  const auto slot_expert = topk_idx.reshape({-1}).to(torch::kLong);
  ExpertGroups g;
  g.by_expert = std::get<1>(slot_expert.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  g.position = torch::empty_like(g.by_expert).scatter_(0, g.by_expert, torch::arange(g.by_expert.size(0), g.by_expert.options()));
  g.sorted_expert = slot_expert.index_select(0, g.by_expert);
  g.load = torch::zeros({experts}, slot_expert.options()).scatter_add_(0, slot_expert, torch::ones_like(slot_expert));
  g.group_start = g.load.cumsum(0) - g.load;
  g.group_end = (g.group_start + g.load).to(torch::kInt);
  return g;
}

ExpertGroups group_by_expert(const torch::Tensor& topk_idx, int64_t experts) {
#if defined(ABLATE_HAVE_CUDA)
  if (fused::group_by_expert_cuda_supports(topk_idx, experts)) return fused::group_by_expert_cuda(topk_idx, experts);
#endif
  return group_by_expert_ops(topk_idx, experts);
}

namespace {

// out[i] = x[order[i] / k]: each expert-order row's token row.
torch::Tensor spread_slot_rows(const torch::Tensor& x, const torch::Tensor& order, int64_t k) {
  return x.index_select(0, order.div(k, "floor"));
}

// out[t] = sum_j src[inverse[t * k + j]], fp32 accumulation, written in out_dtype.
torch::Tensor sum_slot_rows(const torch::Tensor& src, const torch::Tensor& inverse, int64_t k,
                            at::ScalarType out_dtype) {
#if defined(ABLATE_HAVE_CUDA)
  const auto in = src.scalar_type();
  if (src.is_cuda() && (in == torch::kFloat || in == torch::kBFloat16) &&
      (out_dtype == torch::kFloat || out_dtype == torch::kBFloat16))
    return fused::sum_slot_rows_cuda(src, inverse, k, out_dtype);
#endif
  // LibTorch sums a bf16 tensor in fp32 and rounds once.
  return src.index_select(0, inverse).view({-1, k, src.size(1)}).sum(1).to(out_dtype);
}

}  // namespace

torch::Tensor gather_rows_or_zero(const torch::Tensor& x, const torch::Tensor& index) {
  TORCH_CHECK(x.dim() == 2 && index.dim() == 1 && index.scalar_type() == torch::kLong,
              "gather_rows_or_zero: x must be [n, d] and index [m] int64, got ", x.sizes(), " and ", index.sizes(), " ",
              index.scalar_type());
#if defined(ABLATE_HAVE_CUDA)
  if (x.is_cuda()) return fused::gather_rows_or_zero_cuda(x, index);
#endif
  return torch::cat({x, torch::zeros({1, x.size(1)}, x.options())}).index_select(0, index);
}

namespace {

class GatherSlotRows : public torch::autograd::Function<GatherSlotRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& order,
                               const torch::Tensor& inverse, int64_t k) {
    ctx->save_for_backward({inverse});
    ctx->saved_data["k"] = k;
    return spread_slot_rows(x, order, k);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto inverse = ctx->get_saved_variables()[0];
    const auto& g = grads[0];
    return {sum_slot_rows(g, inverse, ctx->saved_data["k"].toInt(), g.scalar_type()), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

class CombineSlotRows : public torch::autograd::Function<CombineSlotRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& src, const torch::Tensor& order,
                               const torch::Tensor& inverse, int64_t k, at::ScalarType out_dtype) {
    ctx->save_for_backward({order});
    ctx->saved_data["k"] = k;
    ctx->saved_data["src_dtype"] = static_cast<int64_t>(src.scalar_type());
    return sum_slot_rows(src, inverse, k, out_dtype);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto order = ctx->get_saved_variables()[0];
    const auto src_dtype = static_cast<at::ScalarType>(ctx->saved_data["src_dtype"].toInt());
    return {spread_slot_rows(grads[0].to(src_dtype), order, ctx->saved_data["k"].toInt()), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

#if defined(ABLATE_HAVE_CUDA)
class WeightedSwiglu : public torch::autograd::Function<WeightedSwiglu> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate_up,
                               const torch::Tensor& weight) {
    const auto weight32 = weight.to(torch::kFloat);
    ctx->save_for_backward({gate_up, weight32});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return fused::weighted_swiglu_cuda(gate_up, weight32);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
    const auto saved = ctx->get_saved_variables();
    auto [d_gate_up, d_weight] = fused::weighted_swiglu_backward_cuda(saved[0], saved[1], grads[0]);
    return {d_gate_up, d_weight.to(static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()))};
  }
};
#endif

}  // namespace

torch::Tensor gather_slot_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse,
                               int64_t k) {
  return GatherSlotRows::apply(x, order, inverse, k);
}

torch::Tensor combine_slot_rows(const torch::Tensor& src, const torch::Tensor& order, const torch::Tensor& inverse,
                                int64_t k, at::ScalarType out_dtype) {
  return CombineSlotRows::apply(src, order, inverse, k, out_dtype);
}

void check_weighted_swiglu_args(const torch::Tensor& gate_up, const torch::Tensor& weight) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0 && weight.dim() == 1 && weight.size(0) == gate_up.size(0),
              "moe weighted_swiglu: gate_up must be [S, 2f] and weight [S], got ", gate_up.sizes(), ", ", weight.sizes());
}

torch::Tensor weighted_swiglu(const torch::Tensor& gate_up, const torch::Tensor& weight) {
  check_weighted_swiglu_args(gate_up, weight);
#if defined(ABLATE_HAVE_CUDA)
  const auto dtype = gate_up.scalar_type();
  if (gate_up.is_cuda() && (dtype == torch::kFloat || dtype == torch::kBFloat16))
    return WeightedSwiglu::apply(gate_up, weight);
#endif
  const int64_t f = gate_up.size(1) / 2;
  const auto g_u = gate_up.split_with_sizes({f, f}, 1);
  const auto gated = torch::silu(g_u[0]) * g_u[1];
  const auto weight_dtype = at::promote_types(weight.scalar_type(), gated.scalar_type());
  return (gated * weight.to(weight_dtype).unsqueeze(-1)).to(gate_up.scalar_type());
}

torch::Tensor rank_in_expert(const ExpertGroups& g) {
  return torch::arange(g.by_expert.size(0), g.by_expert.options()) - g.group_start.index_select(0, g.sorted_expert);
}

int64_t expert_capacity(double capacity_factor, int64_t slots, int64_t experts) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(slots) / static_cast<double>(experts))));
}

}  // namespace ablate::kernels
