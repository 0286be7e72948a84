// tests/kernels/join_last_dim_test.cpp: split_last_dim and join_last_dim (kernels/join_last_dim.h)
// against LibTorch's split_with_sizes and cat, bit for bit (pure data movement): the backward through
// autograd with an unused part, the zero-copy join of adjacent views, and on a GPU the CUDA pass over
// strided, transposed and missing parts, 16-byte and element paths, bf16 and fp32.
// Run: build/tests/kernels_tests --gtest_filter='JoinLastDim*'
#include "kernels/join_last_dim.h"

#include <gtest/gtest.h>

#include <vector>

namespace ablate::kernels {
namespace {

torch::Tensor zeros_or(const torch::Tensor& t, std::vector<int64_t> sizes, const torch::TensorOptions& opts) {
  return t.defined() ? t : torch::zeros(sizes, opts);
}

// Forward: the parts of split_with_sizes. Backward: each part's gradient in its columns, the unused
// part's columns zero (its gradient is undefined).
TEST(JoinLastDim, SplitBackwardIsTheJoinOfThePartGradients) {
  torch::manual_seed(1);
  const auto t = torch::randn({3, 4, 10}, torch::kDouble).requires_grad_(true);
  const auto parts = split_last_dim(t, {3, 5, 2});
  const auto want = t.split_with_sizes({3, 5, 2}, -1);
  ASSERT_EQ(parts.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(parts[i], want[i])) << "part " << i;
  const auto r0 = torch::randn({3, 4, 3}, torch::kDouble), r2 = torch::randn({3, 4, 2}, torch::kDouble);
  const auto grad = torch::autograd::grad({(parts[0] * r0).sum() + (parts[2] * r2).sum()}, {t})[0];
  EXPECT_TRUE(torch::equal(grad, torch::cat({r0, torch::zeros({3, 4, 5}, torch::kDouble), r2}, -1)));
}

// Parts that are adjacent views of one buffer are joined without a copy; the same parts out of order,
// or overlapping rows, are copied.
TEST(JoinLastDim, AdjacentViewsJoinWithoutACopy) {
  const auto buffer = torch::randn({5, 7, 12});
  const auto p = buffer.split_with_sizes({4, 8}, -1);
  const auto joined = join_last_dim({p[0], p[1]}, {4, 8});
  EXPECT_EQ(joined.data_ptr(), buffer.data_ptr());
  EXPECT_TRUE(torch::equal(joined, buffer));
  const auto swapped = join_last_dim({p[1], p[0]}, {8, 4});
  EXPECT_NE(swapped.data_ptr(), buffer.data_ptr());
  EXPECT_TRUE(torch::equal(swapped, torch::cat({p[1], p[0]}, -1)));
  // Views inside a wider buffer: the joined rows (6 wide) fit the row stride (12): still no copy.
  const auto inner = buffer.narrow(-1, 2, 6).split_with_sizes({1, 5}, -1);
  const auto inner_joined = join_last_dim({inner[0], inner[1]}, {1, 5});
  EXPECT_EQ(inner_joined.data_ptr(), buffer.narrow(-1, 2, 6).data_ptr());
  EXPECT_TRUE(torch::equal(inner_joined, buffer.narrow(-1, 2, 6)));
}

TEST(JoinLastDim, RefusesMismatchedParts) {
  const auto a = torch::zeros({2, 3}), b = torch::zeros({3, 3});
  EXPECT_THROW(join_last_dim({a, b}, {3, 3}), c10::Error);           // leading dims differ
  EXPECT_THROW(join_last_dim({a, a}, {3, 4}), c10::Error);           // a width that is not the part's
  EXPECT_THROW(join_last_dim({a}, {3, 3}), c10::Error);              // widths for parts that are not there
  EXPECT_THROW(join_last_dim({torch::Tensor()}, {3}), c10::Error);   // nothing to take a shape from
  EXPECT_THROW(split_last_dim(a, {1, 1}), c10::Error);               // sizes that do not add up
}

// The CUDA pass against at::cat of the same parts (undefined ones as zeros), bit for bit.
TEST(JoinLastDim, CudaPassEqualsCat) {
#if !defined(ABLATE_HAVE_CUDA)
  GTEST_SKIP() << "the join's CUDA pass needs CUDA: built without it";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "the join's CUDA pass needs a CUDA device";
  for (const auto dtype : {torch::kBFloat16, torch::kFloat}) {
    const auto opts = torch::TensorOptions(torch::kCUDA).dtype(dtype);
    struct Case {
      const char* what;
      std::vector<torch::Tensor> parts;
      std::vector<int64_t> widths;
    };
    const auto dq = torch::randn({2, 5, 3, 96}, opts);
    const auto padded_dv = torch::randn({2, 3, 5, 96}, opts);
    const std::vector<Case> cases = {
        {"narrow + contiguous (the q join)", {dq.narrow(-1, 0, 64), torch::randn({2, 5, 3, 32}, opts)}, {64, 32}},
        {"narrow + transposed narrow (the kv join)",
         {dq.narrow(-1, 0, 64), padded_dv.narrow(-1, 0, 64).transpose(1, 2)},
         {64, 64}},
        {"an unused part", {torch::randn({2, 5, 16}, opts), torch::Tensor(), torch::randn({2, 5, 8}, opts)}, {16, 24, 8}},
        {"odd widths (element path)", {torch::randn({7, 3}, opts), torch::randn({7, 13}, opts).narrow(-1, 1, 5)}, {3, 5}},
        {"one leading dim of size 1, broadcast stride",
         {torch::randn({4, 1, 8}, opts), torch::randn({4, 1, 16}, opts)},
         {8, 16}},
        {"1-d parts", {torch::randn({8}, opts), torch::randn({24}, opts)}, {8, 24}},
        {"eight parts (the M block's split)",
         {torch::randn({3, 4, 16}, opts), torch::randn({3, 4, 16}, opts), torch::randn({3, 4, 8}, opts),
          torch::randn({3, 4, 8}, opts), torch::randn({3, 4, 2}, opts), torch::randn({3, 4, 2}, opts),
          torch::randn({3, 4, 2}, opts), torch::randn({3, 4, 6}, opts)},
         {16, 16, 8, 8, 2, 2, 2, 6}},
    };
    for (const auto& c : cases) {
      ASSERT_TRUE(fused::join_last_dim_cuda_supports(c.parts, c.widths)) << c.what;
      std::vector<torch::Tensor> filled;
      const torch::Tensor* some = first_defined(c.parts);
      for (size_t i = 0; i < c.parts.size(); ++i) {
        auto sizes = some->sizes().vec();
        sizes.back() = c.widths[i];
        filled.push_back(zeros_or(c.parts[i], sizes, opts));
      }
      const auto got = join_last_dim(c.parts, c.widths);
      EXPECT_TRUE(got.is_contiguous()) << c.what;
      EXPECT_TRUE(torch::equal(got, torch::cat(filled, -1))) << c.what << ", " << dtype;
    }
  }
#endif
}

}  // namespace
}  // namespace ablate::kernels
