// kernels/moe_dispatch/reference.cpp: the reference backend of seam `moe_dispatch`, the "standard"
// MoE path: permute the token->expert assignments by expert, pad every expert's group to one
// capacity, run the three expert matmuls as batched GEMMs (bmm), unpad, unpermute, weighted sum.
// Dropless mode reads the largest expert load on the host (one sync per call, the documented nature
// of this path: it makes whole-step CUDA-graph capture impossible); with a capacity factor it is
// sync-free and counts the dropped slots on the device. Contract: MoeDispatchFn in kernels/seams.h.
// Tests: kernels_tests (parity_test.cpp, dropless and capacity rows) and model_tests (MoE block vs a
// per-token loop, including drops). Benchmark: build/bench/kernels_bench --benchmark_filter=moe_dispatch.
#include "kernels/moe_dispatch/expert_exchange.h"
#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

torch::Tensor moe_dispatch_standard(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                    const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                    double capacity_factor, torch::Tensor* dropped, const ExpertExchange* exchange) {
  check_moe_dispatch_args(x, topk_idx, topk_w, w1, w3, w2, capacity_factor);
  TORCH_CHECK(exchange == nullptr || exchange->ranks() == 1,
              "moe_dispatch reference runs every expert on its own rank: distributed.expert_parallel > 1 needs "
              "backends.moe_dispatch = \"grouped_mm\"");
  const int64_t tokens = x.size(0), d = x.size(1), k = topk_idx.size(1), experts = w1.size(0);
  const int64_t slots = tokens * k;  // slot s = token * k + j, the j-th choice of a token
  const auto index_opts = torch::TensorOptions().dtype(torch::kLong).device(x.device());

  const auto groups = group_by_expert(topk_idx, experts);
  const auto& by_expert = groups.by_expert;
  const auto& sorted_expert = groups.sorted_expert;
  const auto rank = rank_in_expert(groups);

  int64_t capacity = 0;
  if (capacity_factor > 0) {
    capacity = expert_capacity(capacity_factor, slots, experts);
  } else if (slots > 0) {
    capacity = groups.load.max().item<int64_t>();  // the host sync of dropless standard dispatch
  }
  capacity = std::max<int64_t>(capacity, 1);

  // Row of the padded [E * capacity] buffer that each sorted slot lands in; dropped slots go to the
  // extra row E * capacity, which is discarded on the way in and reads as zeros on the way out.
  const int64_t buffer_rows = experts * capacity;
  const auto kept = rank < capacity;
  const auto sorted_row =
      torch::where(kept, sorted_expert * capacity + rank, torch::full({}, buffer_rows, index_opts));
  // Token feeding each buffer row; padding rows read token `tokens`, an appended zero row of x.
  const auto row_token = torch::full({buffer_rows + 1}, tokens, index_opts)
                             .index_copy_(0, sorted_row, torch::div(by_expert, k, "floor"))
                             .narrow(0, 0, buffer_rows);
  const auto zero_row = torch::zeros({1, d}, x.options());
  const auto grouped = torch::cat({x, zero_row}).index_select(0, row_token).view({experts, capacity, d});

  const auto hidden = torch::silu(torch::bmm(grouped, w1.transpose(1, 2))) * torch::bmm(grouped, w3.transpose(1, 2));
  const auto expert_out = torch::bmm(hidden, w2.transpose(1, 2)).reshape({buffer_rows, d});

  // Back to slot order (by_expert is a permutation, so this inverts it), then the weighted sum.
  const auto slot_row = torch::empty_like(sorted_row).index_copy_(0, by_expert, sorted_row);
  const auto slot_out = torch::cat({expert_out, torch::zeros({1, d}, expert_out.options())})
                            .index_select(0, slot_row)
                            .view({tokens, k, d});
  const auto weights = topk_w.unsqueeze(-1).to(at::promote_types(topk_w.scalar_type(), slot_out.scalar_type()));
  const auto y = (slot_out.to(weights.scalar_type()) * weights).sum(1).to(x.scalar_type());

  if (dropped != nullptr) {
    *dropped = capacity_factor > 0 ? torch::logical_not(kept).sum().to(torch::kLong) : torch::zeros({}, index_opts);
  }
  return y;
}

}  // namespace

ABLATE_REGISTER_BACKENDS(moe_dispatch_reference) {
  registry.moe_dispatch("reference", &moe_dispatch_standard);
}

}  // namespace ablate::kernels
