// tests/kernels/copy_blocks_test.cpp: copy_blocks (kernels/copy_blocks.h), dst = src x scale for each
// pair, against LibTorch's own copy_ and the fp32 product rounded once into dst, bit for bit (a cast and
// one product each, both ways the same arithmetic): on the CPU the LibTorch path and its checks; on a GPU
// the CUDA pass over strided slices of stacked operands, contiguous tensors of any rank, 16-byte and
// element paths, more pairs than one launch takes, and pairs it cannot take (they fall back).
// Run: build/tests/kernels_tests --gtest_filter='CopyBlocks*'
#include "kernels/copy_blocks.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels {
namespace {

// What copy_blocks promises for a pair: the product in fp32, rounded once into dst's dtype.
torch::Tensor scaled(const torch::Tensor& src, double scale, torch::ScalarType dtype) {
  return src.to(torch::kFloat).mul(scale).to(dtype);
}

TEST(CopyBlocks, ScalesEveryPairInFp32AndRoundsOnce) {
  torch::manual_seed(3);
  const auto a = torch::randn({4, 6, 8}, torch::kBFloat16), b = torch::randn({5}, torch::kFloat);
  auto into_a = torch::empty({4, 6, 8}, torch::kFloat), into_b = torch::empty({5}, torch::kBFloat16);
  copy_blocks({{into_a, a}, {into_b, b}}, 1.0 / 3.0);
  EXPECT_TRUE(torch::equal(into_a, scaled(a, 1.0 / 3.0, torch::kFloat)));
  EXPECT_TRUE(torch::equal(into_b, scaled(b, 1.0 / 3.0, torch::kBFloat16)));
  copy_blocks({{into_a, a}});  // scale 1: a copy
  EXPECT_TRUE(torch::equal(into_a, a.to(torch::kFloat)));
}

TEST(CopyBlocks, RefusesAPairOfTwoShapes) {
  auto dst = torch::empty({2, 3});
  EXPECT_THROW(copy_blocks({{dst, torch::zeros({3, 2})}}), c10::Error);
}

class CopyBlocksCudaShapes : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(ABLATE_HAVE_CUDA)
    GTEST_SKIP() << "copy_blocks' CUDA pass needs CUDA: built without it";
#endif
    if (!torch::cuda::is_available()) GTEST_SKIP() << "copy_blocks' CUDA pass needs a CUDA device";
  }
};

// The shapes of the data-parallel sync's hooks, scaled by 1/ranks: a gradient that is a strided view of a
// stacked one into a contiguous fp32 slot, 0-d and 1-d tensors, a contiguous 4-d tensor (one row), odd
// widths (the element path), 1/3 (not a power of two: the product rounds); in one call with a pair the
// pass cannot take (a non-contiguous 4-d view), which sends the whole call through LibTorch, and alone.
TEST_F(CopyBlocksCudaShapes, ScaledGradientsIntoSlotsOfAnyShape) {
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  torch::manual_seed(7);
  const auto stacked = torch::randn({3, 2 * 24, 40}, bf16);
  std::vector<torch::Tensor> grads = {stacked.narrow(1, 0, 24), torch::randn({}, bf16), torch::randn({13}, bf16),
                                      torch::randn({2, 3, 4, 16}, bf16), torch::randn({7, 9}, bf16)};
  const auto not_a_block = torch::randn({2, 3, 4, 16}, bf16).transpose(0, 2);
  for (const double scale : {0.5, 1.0 / 3.0})
    for (const bool with_fallback : {false, true}) {
      SCOPED_TRACE("scale " + std::to_string(scale) + (with_fallback ? ", with a pair LibTorch copies" : ""));
      std::vector<std::pair<torch::Tensor, torch::Tensor>> pairs;
      std::vector<torch::Tensor> slots;
      auto all = grads;
      if (with_fallback) all.push_back(not_a_block);
      for (const auto& g : all) {
        slots.push_back(torch::empty(g.sizes(), bf16.dtype(torch::kFloat)));
        pairs.push_back({slots.back(), g});
      }
      copy_blocks(pairs, scale);
      for (size_t i = 0; i < all.size(); ++i)
        EXPECT_TRUE(torch::equal(slots[i], scaled(all[i], scale, torch::kFloat))) << "pair " << i;
    }
}

// Slices of stacked operands both ways (fp32 <-> bf16, at widths of both paths), unscaled and scaled.
class CopyBlocksCuda : public CopyBlocksCudaShapes,
                       public ::testing::WithParamInterface<std::tuple<torch::ScalarType, int64_t>> {};

TEST_P(CopyBlocksCuda, ScaledSlicesRoundOnce) {
  const auto [dtype, width] = GetParam();
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(11);
  const auto other = dtype == torch::kFloat ? torch::kBFloat16 : torch::kFloat;
  const auto stack = torch::randn({3, 16, width + 8}, torch::TensorOptions(cuda).dtype(dtype));
  const auto slice = stack.narrow(1, 8, 5).narrow(2, 0, width);
  auto into = torch::empty({3, 5, width}, torch::TensorOptions(cuda).dtype(other));
  copy_blocks({{into, slice}}, 0.25);
  EXPECT_TRUE(torch::equal(into, scaled(slice, 0.25, other)));
  copy_blocks({{into, slice}}, 1.0 / 3.0);
  EXPECT_TRUE(torch::equal(into, scaled(slice, 1.0 / 3.0, other)));
}

// copy_blocks: the expert weights into stacked GEMM operands of the other dtype (fp32 -> bf16, slices of a
// padded stack as destinations) and back (bf16 slices -> fp32), more pairs than one launch takes, each
// element equal to what copy_ gives (a cast is one rounding: bit for bit). The width parameter is the
// weights' inner width: multiples of 8 take the 16-byte path, others the element-wise one.
TEST_P(CopyBlocksCuda, EqualsCopyIntoEachSlice) {
  const auto [dtype, width] = GetParam();
  const int64_t experts = 3, f = 5, fp = 8, wp = (width + 7) / 8 * 8;
  const torch::Device cuda(torch::kCUDA);
  torch::manual_seed(5);
  const auto other = dtype == torch::kFloat ? torch::kBFloat16 : torch::kFloat;
  std::vector<torch::Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back(torch::randn({experts, f, width}, torch::TensorOptions(cuda).dtype(dtype)));
  auto stack = torch::zeros({experts, 3 * fp, wp}, torch::TensorOptions(cuda).dtype(other));
  auto want = stack.clone();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> into;
  for (int i = 0; i < 3; ++i) {
    into.push_back({stack.narrow(1, i * fp, f).narrow(2, 0, width), weights[i]});
    want.narrow(1, i * fp, f).narrow(2, 0, width).copy_(weights[i]);
  }
  // Two more pairs (5 in all: two launches), into a second stack.
  auto stack2 = torch::zeros({experts, f, width}, torch::TensorOptions(cuda).dtype(other)), want2 = stack2.clone();
  into.push_back({stack2.narrow(0, 0, 1), weights[0].narrow(0, 1, 1)});
  into.push_back({stack2.narrow(0, 1, 2), weights[1].narrow(0, 0, 2)});
  want2.narrow(0, 0, 1).copy_(weights[0].narrow(0, 1, 1));
  want2.narrow(0, 1, 2).copy_(weights[1].narrow(0, 0, 2));
  copy_blocks(into);
  EXPECT_TRUE(torch::equal(stack, want)) << "into the stack, padding left as it was";
  EXPECT_TRUE(torch::equal(stack2, want2));

  // Back: the stack's slices into fresh weights of the first dtype.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> back;
  std::vector<torch::Tensor> got;
  for (int i = 0; i < 3; ++i) {
    got.push_back(torch::empty({experts, f, width}, torch::TensorOptions(cuda).dtype(dtype)));
    back.push_back({got.back(), stack.narrow(1, i * fp, f).narrow(2, 0, width)});
  }
  copy_blocks(back);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::equal(got[i], stack.narrow(1, i * fp, f).narrow(2, 0, width).to(dtype))) << "block " << i;
}

// copy_blocks at nam56r-small's E-layer shapes (16 experts, f 768, d 1024: ~9.4 M 8-element units a
// launch, several grid-stride rounds a thread and a ragged last round), both directions, bit for bit
// against copy_ into each slice.
TEST_F(CopyBlocksCudaShapes, AtModelShapesSpansManyRounds) {
  const int64_t experts = 16, f = 768, d = 1024;
  const auto fp32 = torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat);
  torch::manual_seed(9);
  const auto w1 = torch::randn({experts, f, d}, fp32), w3 = torch::randn({experts, f, d}, fp32);
  const auto w2 = torch::randn({experts, d, f}, fp32);
  auto gate_up = torch::empty({experts, 2 * f, d}, fp32.dtype(torch::kBFloat16));
  auto down = torch::empty({experts, d, f}, fp32.dtype(torch::kBFloat16));
  copy_blocks({{gate_up.narrow(1, 0, f), w1}, {gate_up.narrow(1, f, f), w3}, {down, w2}});
  EXPECT_TRUE(torch::equal(gate_up.narrow(1, 0, f), w1.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(gate_up.narrow(1, f, f), w3.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(down, w2.to(torch::kBFloat16)));
  auto d1 = torch::empty_like(w1), d3 = torch::empty_like(w3), d2 = torch::empty_like(w2);
  copy_blocks({{d1, gate_up.narrow(1, 0, f)}, {d3, gate_up.narrow(1, f, f)}, {d2, down}});
  EXPECT_TRUE(torch::equal(d1, gate_up.narrow(1, 0, f).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(d3, gate_up.narrow(1, f, f).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(d2, down.to(torch::kFloat)));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndWidths, CopyBlocksCuda,
                         ::testing::Combine(::testing::Values(torch::kFloat, torch::kBFloat16),
                                            ::testing::Values<int64_t>(8, 13, 768)),
                         [](const auto& info) { return testing::dtype_and_width_name(info); });

}  // namespace
}  // namespace ablate::kernels
