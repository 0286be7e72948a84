// kernels/moe_dispatch/expert_groups.h: what both moe_dispatch backends share (reference.cpp,
// grouped_mm.cpp): the MoeDispatchFn argument checks and the slot-by-expert grouping, all on the device: slot s = token * k + j,
// the j-th choice of a token; slots sorted by expert with a stable sort, so token order is kept inside
// each expert's group and capacity drops hit the latest tokens first.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace ablate::kernels {

// The MoeDispatchFn contract's shape checks (TORCH_CHECK: c10::Error).
void check_moe_dispatch_args(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor);

struct ExpertGroups {
  torch::Tensor by_expert;      // [S] slot indices in expert order
  torch::Tensor position;       // [S] each slot's position in that order (the inverse of by_expert)
  torch::Tensor sorted_expert;  // [S] the expert of each slot in that order
  torch::Tensor load;           // [E] int64 slots per expert
  torch::Tensor group_start;    // [E] position of each expert's first slot in that order
};
ExpertGroups group_by_expert(const torch::Tensor& topk_idx, int64_t experts);
// Rows of x reordered by a permutation: out[i] = x[order[i]], `inverse` the inverse permutation. The
// backward gathers the gradient by `inverse` where index_select's own backward would scatter-add it
// (atomics, ~6x a gather on the H100 for these sizes), so both directions are one gather each.
torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse);
// Each slot's token row in expert order, out[i] = x[order[i] / k] (x [tokens, d], k slots a token):
// one gather, without materialising x repeated k times. The backward gathers the gradient back into
// slot order by `inverse` and sums each token's k rows: no scatter-add either.
torch::Tensor gather_slot_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse,
                               int64_t k);
// [S] each slot's position inside its expert's group, in expert order.
torch::Tensor rank_in_expert(const ExpertGroups& groups);
// Slots an expert keeps under a capacity factor > 0: ceil(cf * slots / experts), at least 1.
int64_t expert_capacity(double capacity_factor, int64_t slots, int64_t experts);

}  // namespace ablate::kernels
