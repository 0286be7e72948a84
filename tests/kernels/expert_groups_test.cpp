// tests/kernels/expert_groups_test.cpp: the slot grouping and row movements the moe_dispatch backends
// share (kernels/moe_dispatch/expert_groups.h), against their definitions written with LibTorch's own
// ops: the stable expert order and its inverse, permute_rows and gather_slot_rows forward and backward
// (the gradients they gather must equal what index_select's scatter-add backward gives).
// Run: build/tests/kernels_tests --gtest_filter='ExpertGroups*'
#include "kernels/moe_dispatch/expert_groups.h"

#include <gtest/gtest.h>

namespace ablate::kernels {
namespace {

struct Routed {
  torch::Tensor topk_idx;  // [tokens, k]
  ExpertGroups groups;
};

Routed route(int64_t tokens, int64_t k, int64_t experts) {
  torch::manual_seed(3);
  Routed r;
  r.topk_idx = torch::randint(experts, {tokens, k}, torch::kLong);
  r.groups = group_by_expert(r.topk_idx, experts);
  return r;
}

TEST(ExpertGroups, OrderIsStableByExpertAndPositionIsItsInverse) {
  const auto r = route(50, 2, 6);
  const auto slot_expert = r.topk_idx.reshape({-1});
  const auto sorted = slot_expert.index_select(0, r.groups.by_expert);
  EXPECT_TRUE(torch::equal(sorted, std::get<0>(slot_expert.sort())));
  // Stable: inside an expert's group the slots keep their order.
  for (int64_t i = 1; i < sorted.size(0); ++i)
    if (sorted[i].item<int64_t>() == sorted[i - 1].item<int64_t>())
      EXPECT_LT(r.groups.by_expert[i - 1].item<int64_t>(), r.groups.by_expert[i].item<int64_t>());
  EXPECT_TRUE(torch::equal(r.groups.position.index_select(0, r.groups.by_expert), torch::arange(100)));
  EXPECT_TRUE(torch::equal(r.groups.load, torch::bincount(slot_expert, {}, 6)));
}

// gather_slot_rows(x, order, inverse, k) is x repeated k times, then rows taken in expert order; its
// gradient is index_select's (a scatter-add of each row's gradient into its token).
TEST(ExpertGroups, GatherSlotRowsMatchesRepeatThenSelectForwardAndBackward) {
  for (const int64_t k : {1, 2, 3}) {
    const auto r = route(17, k, 5);
    const auto x = torch::randn({17, 8}, torch::kDouble).requires_grad_(true);
    const auto upstream = torch::randn({17 * k, 8}, torch::kDouble);
    const auto got = gather_slot_rows(x, r.groups.by_expert, r.groups.position, k);
    const auto want = x.repeat_interleave(k, 0).index_select(0, r.groups.by_expert);
    EXPECT_TRUE(torch::allclose(got, want, 0, 0)) << "k " << k;
    const auto g_got = torch::autograd::grad({(got * upstream).sum()}, {x})[0];
    const auto g_want = torch::autograd::grad({(want * upstream).sum()}, {x})[0];
    EXPECT_TRUE(torch::allclose(g_got, g_want, 1e-12, 1e-12)) << "k " << k;
  }
}

TEST(ExpertGroups, PermuteRowsBackwardIsTheInverseGather) {
  const auto r = route(20, 2, 4);
  const auto x = torch::randn({40, 3}, torch::kDouble).requires_grad_(true);
  const auto upstream = torch::randn({40, 3}, torch::kDouble);
  const auto got = permute_rows(x, r.groups.by_expert, r.groups.position);
  EXPECT_TRUE(torch::equal(got, x.index_select(0, r.groups.by_expert)));
  const auto g = torch::autograd::grad({(got * upstream).sum()}, {x})[0];
  const auto want = torch::autograd::grad({(x.index_select(0, r.groups.by_expert) * upstream).sum()}, {x})[0];
  EXPECT_TRUE(torch::equal(g, want));
}

}  // namespace
}  // namespace ablate::kernels
