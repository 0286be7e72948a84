// tests/kernels/expert_groups_test.cpp: the slot grouping and row movements the moe_dispatch backends
// share (kernels/moe_dispatch/expert_groups.h), against their definitions written with LibTorch's own
// ops: the stable expert order and its inverse, gather_slot_rows and combine_slot_rows forward and
// backward (the gradients must equal what index_select's and index_add's own backwards give), the
// weighted SwiGLU; and, on a GPU, the same entry points through their CUDA passes (expert_kernels.cu),
// the counting sort against the ops element for element.
// Run: build/tests/kernels_tests --gtest_filter='ExpertGroups*'
#include "kernels/moe_dispatch/expert_groups.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "tests/kernels/tensor_checks.h"

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
    if (sorted[i].item<int64_t>() == sorted[i - 1].item<int64_t>()) {
      EXPECT_LT(r.groups.by_expert[i - 1].item<int64_t>(), r.groups.by_expert[i].item<int64_t>());
    }
  EXPECT_TRUE(torch::equal(r.groups.position.index_select(0, r.groups.by_expert), torch::arange(100)));
  EXPECT_TRUE(torch::equal(r.groups.load, torch::bincount(slot_expert, {}, 6)));
  EXPECT_TRUE(torch::equal(r.groups.group_end, (r.groups.load.cumsum(0)).to(torch::kInt)));
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

// combine_slot_rows(src, order, inverse, k) sums each token's k slot rows: index_add of src's rows into
// their tokens; its gradient is index_add's (each row gets its token's gradient).
TEST(ExpertGroups, CombineSlotRowsMatchesIndexAddForwardAndBackward) {
  for (const int64_t k : {1, 2, 3}) {
    const auto r = route(19, k, 4);
    const auto src = torch::randn({19 * k, 6}, torch::kDouble).requires_grad_(true);
    const auto upstream = torch::randn({19, 6}, torch::kDouble);
    const auto token_of_row = r.groups.by_expert.div(k, "floor");
    const auto got = combine_slot_rows(src, r.groups.by_expert, r.groups.position, k, torch::kDouble);
    const auto want = torch::zeros({19, 6}, torch::kDouble).index_add(0, token_of_row, src);
    EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12)) << "k " << k;
    const auto g_got = torch::autograd::grad({(got * upstream).sum()}, {src})[0];
    const auto g_want = torch::autograd::grad({(want * upstream).sum()}, {src})[0];
    EXPECT_TRUE(torch::equal(g_got, g_want)) << "k " << k;
  }
}

// The definition in fp64: silu(g) * u * w.
torch::Tensor weighted_swiglu_fp64(const torch::Tensor& gate_up, const torch::Tensor& weight) {
  const int64_t f = gate_up.size(1) / 2;
  const auto g = gate_up.narrow(1, 0, f), u = gate_up.narrow(1, f, f);
  return g * torch::sigmoid(g) * u * weight.unsqueeze(-1);
}

TEST(ExpertGroups, WeightedSwigluMatchesItsDefinitionForwardAndBackward) {
  torch::manual_seed(5);
  const auto gate_up = (2.0 * torch::randn({9, 14}, torch::kDouble)).requires_grad_(true);
  const auto weight = torch::rand({9}, torch::kDouble).requires_grad_(true);
  const auto upstream = torch::randn({9, 7}, torch::kDouble);
  const auto got = weighted_swiglu(gate_up, weight);
  const auto want = weighted_swiglu_fp64(gate_up, weight);
  EXPECT_TRUE(torch::allclose(got, want, 1e-12, 1e-12));
  const auto g_got = torch::autograd::grad({(got * upstream).sum()}, {gate_up, weight});
  const auto g_want = torch::autograd::grad({(want * upstream).sum()}, {gate_up, weight});
  for (size_t i = 0; i < g_got.size(); ++i) EXPECT_TRUE(torch::allclose(g_got[i], g_want[i], 1e-12, 1e-12)) << i;
  EXPECT_THROW(weighted_swiglu(gate_up.narrow(1, 0, 13), weight), c10::Error);  // an odd width: no [g | u]
}

// The CUDA passes (expert_kernels.cu) through the same entry points, against the fp64 definitions on
// the CPU computed from the same (dtype-rounded) inputs, at widths that take the 16-byte accesses (a
// multiple of 8) and the element-wise path (not). Bounds: fp32 1e-5 relative (k-term sums and
// expf-based silu, ~1e-7 each); bf16 outputs 8e-3 (one rounding of the result, 2^-8, plus the fp32
// arithmetic); the weight gradient is an fp32 row sum from bf16 inputs: 1e-4 either way.
class ExpertGroupsCuda : public ::testing::TestWithParam<std::tuple<torch::ScalarType, int64_t>> {
 protected:
  void SetUp() override {
#if !defined(ABLATE_HAVE_CUDA)
    GTEST_SKIP() << "the fused MoE passes need CUDA: built without it";
#endif
    if (!torch::cuda::is_available()) GTEST_SKIP() << "the fused MoE passes need a CUDA device";
  }
  static double bound(torch::ScalarType dtype) { return dtype == torch::kFloat ? 1e-5 : 8e-3; }
};

TEST_P(ExpertGroupsCuda, SlotRowSumsMatchTheDefinition) {
  const auto [dtype, width] = GetParam();
  const int64_t tokens = 37, k = 2;
  const auto r = route(tokens, k, 5);
  const torch::Device cuda(torch::kCUDA);
  const auto src = torch::randn({tokens * k, width}, torch::kDouble).to(dtype).to(torch::kDouble);  // dtype-exact
  const auto x = torch::randn({tokens, width}, torch::kDouble).to(dtype).to(torch::kDouble);
  const auto by_expert = r.groups.by_expert, position = r.groups.position;
  const auto token_of_row = by_expert.div(k, "floor");

  // combine_slot_rows forward (fp32 out) and backward.
  const auto src_cuda = src.to(cuda, dtype).requires_grad_(true);
  const auto y = combine_slot_rows(src_cuda, by_expert.to(cuda), position.to(cuda), k, torch::kFloat);
  const auto y_want = torch::zeros({tokens, width}, torch::kDouble).index_add(0, token_of_row, src);
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  EXPECT_LE(testing::relative_error(y, y_want), 1e-6) << "combine, fp32 accumulation of dtype-exact rows";
  const auto upstream = torch::randn({tokens, width}, torch::kDouble).to(torch::kFloat);
  const auto d_src = torch::autograd::grad({(y * upstream.to(cuda)).sum()}, {src_cuda})[0];
  EXPECT_LE(testing::relative_error(d_src, upstream.to(torch::kDouble).to(dtype).index_select(0, token_of_row)), 0.0);

  // gather_slot_rows forward (exact) and backward (the same sum kernel, in the gradient's dtype).
  const auto x_cuda = x.to(cuda, dtype).requires_grad_(true);
  const auto rows = gather_slot_rows(x_cuda, by_expert.to(cuda), position.to(cuda), k);
  EXPECT_LE(testing::relative_error(rows, x.index_select(0, token_of_row)), 0.0);
  const auto row_grad = src.to(cuda, dtype);
  const auto d_x = torch::autograd::grad({(rows * row_grad).sum()}, {x_cuda})[0];
  EXPECT_EQ(d_x.scalar_type(), dtype);
  EXPECT_LE(testing::relative_error(d_x, y_want), bound(dtype)) << "the gather's gradient sums k rows";
}

TEST_P(ExpertGroupsCuda, WeightedSwigluMatchesTheDefinition) {
  const auto [dtype, f] = GetParam();
  const int64_t rows = 45;
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(11);
  const auto gate_up = (2.0 * torch::randn({rows, 2 * f}, torch::kDouble)).to(dtype).to(torch::kDouble);
  const auto weight = torch::rand({rows}, torch::kDouble).to(torch::kFloat).to(torch::kDouble);
  const auto dh = torch::randn({rows, f}, torch::kDouble).to(dtype).to(torch::kDouble);

  const auto gu_cuda = gate_up.to(cuda, dtype).requires_grad_(true);
  const auto w_cuda = weight.to(cuda, torch::kFloat).requires_grad_(true);
  const auto h = weighted_swiglu(gu_cuda, w_cuda);
  EXPECT_EQ(h.scalar_type(), dtype);
  const auto gu64 = gate_up.clone().requires_grad_(true), w64 = weight.clone().requires_grad_(true);
  const auto want = weighted_swiglu_fp64(gu64, w64);
  EXPECT_LE(testing::relative_error(h, want), bound(dtype));
  const auto got_grads = torch::autograd::grad({(h * dh.to(cuda, dtype)).sum()}, {gu_cuda, w_cuda});
  const auto want_grads = torch::autograd::grad({(want * dh).sum()}, {gu64, w64});
  EXPECT_LE(testing::relative_error(got_grads[0], want_grads[0]), bound(dtype)) << "d gate_up";
  EXPECT_EQ(got_grads[1].scalar_type(), torch::kFloat);
  EXPECT_LE(testing::relative_error(got_grads[1], want_grads[1]), 1e-4) << "d weight";
}

// gather_rows_or_zero's CUDA pass against its LibTorch form (x with a zero row appended, then
// index_select) on the CPU, bit for bit: rows gathered out of order, repeated, and the sentinel index
// (x's row count) as zeros; 16-byte words (widths 8, 768) and elements (13), a one-column fp32 tensor
// (the routing weights the exchange moves), a column view (made contiguous first) and no rows at all.
TEST_P(ExpertGroupsCuda, GatherRowsOrZeroMovesRowsBitForBit) {
  const auto [dtype, width] = GetParam();
  const int64_t n = 50;
  torch::manual_seed(width);
  auto index = torch::randint(n + 1, {83}, torch::kLong);  // about 2 % the sentinel
  index.index_put_({torch::indexing::Slice(0, 4)}, n);          // at least some
  const auto x = torch::randn({n, width}).to(dtype);
  const auto check = [&](const torch::Tensor& src, const torch::Tensor& idx, const char* what) {
    const auto want = torch::cat({src, torch::zeros({1, src.size(1)}, src.options())}).index_select(0, idx);
    const auto got = gather_rows_or_zero(src.cuda(), idx.cuda());
    EXPECT_EQ(got.scalar_type(), src.scalar_type()) << what;
    EXPECT_TRUE(torch::equal(got.cpu(), want)) << what;
  };
  check(x, index, "rows");
  check(torch::randn({n, 1}), index, "one fp32 column");
  check(torch::randn({width, n}).to(dtype).t(), index, "a transposed view");
  check(x, torch::empty({0}, torch::kLong), "no rows");
  EXPECT_THROW(gather_rows_or_zero(x.cuda(), index.cuda().to(torch::kInt)), c10::Error) << "int32 indices";
}

// The counting sort (group_by_expert on CUDA) against the LibTorch ops on the CPU, every tensor equal:
// slot counts under, at and over a warp's step and the block's 1024-slot sweep, one expert, the most the
// kernel takes (256), loads skewed to a single expert, int32 and int64 ids, no slots at all.
TEST(ExpertGroupsCudaSort, CountingSortEqualsTheStableSortOps) {
#if !defined(ABLATE_HAVE_CUDA)
  GTEST_SKIP() << "the counting sort needs CUDA: built without it";
#endif
  if (!torch::cuda::is_available()) GTEST_SKIP() << "the counting sort needs a CUDA device";
  struct Shape {
    int64_t tokens, k, experts;
    bool skewed;
  };
  const std::vector<Shape> shapes = {{1, 1, 1, false},     {5, 2, 6, false},     {16, 2, 3, false},
                                     {600, 2, 16, false},  {513, 3, 7, true},    {16384, 2, 16, true},
                                     {4097, 1, 256, false}, {3000, 8, 256, true}, {0, 2, 4, false}};
  for (const auto& sh : shapes)
    for (const auto dtype : {torch::kLong, torch::kInt}) {
      torch::manual_seed(sh.tokens + sh.experts);
      auto ids = torch::randint(sh.experts, {sh.tokens, sh.k}, torch::kLong);
      // Skewed: most slots on expert 0, as an untrained router can route them.
      if (sh.skewed) ids = torch::where(torch::rand({sh.tokens, sh.k}) < 0.8, torch::zeros_like(ids), ids);
      ids = ids.to(dtype);
      const auto want = group_by_expert_ops(ids, sh.experts);
      const auto got = group_by_expert(ids.cuda(), sh.experts);
      const auto label = ::testing::Message() << sh.tokens << " tokens, k " << sh.k << ", " << sh.experts << " experts, "
                                             << (dtype == torch::kLong ? "int64" : "int32");
      EXPECT_TRUE(torch::equal(got.by_expert.cpu(), want.by_expert)) << label;
      EXPECT_TRUE(torch::equal(got.position.cpu(), want.position)) << label;
      EXPECT_TRUE(torch::equal(got.sorted_expert.cpu(), want.sorted_expert)) << label;
      EXPECT_TRUE(torch::equal(got.load.cpu(), want.load)) << label;
      EXPECT_TRUE(torch::equal(got.group_start.cpu(), want.group_start)) << label;
      EXPECT_EQ(got.group_end.scalar_type(), torch::kInt) << label;
      EXPECT_TRUE(torch::equal(got.group_end.cpu(), want.group_end)) << label;
    }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndWidths, ExpertGroupsCuda,
                         ::testing::Combine(::testing::Values(torch::kFloat, torch::kBFloat16),
                                            ::testing::Values<int64_t>(8, 13, 768)),
                         [](const auto& info) { return testing::dtype_and_width_name(info); });

}  // namespace
}  // namespace ablate::kernels
