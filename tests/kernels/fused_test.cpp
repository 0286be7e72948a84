// tests/kernels/fused_test.cpp: properties of the fused CUDA kernels (kernels/cuda/) that the table-driven
// parity test does not see: dw of residual_norm is bitwise reproducible (two-stage reduction, no
// atomics) over enough rows that every block strides over many of them, and it matches the fp64
// reference there; rows that are not 16-byte aligned take the element-wise path and agree with the
// vectorised one. Skip (with the reason) without CUDA.
// Run: build/tests/kernels_tests --gtest_filter='FusedCuda*'
#include <gtest/gtest.h>

#include "kernels/dispatch.h"
#include "kernels/reference/ops.h"
#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels {
namespace {

using testing::random_normal;
using testing::relative_error;
using testing::seeded_generator;
using torch::Tensor;

// The fused_cuda implementation of a seam, or a skip reason.
#define SKIP_UNLESS_FUSED_CUDA()                                                    \
  do {                                                                              \
    if (!has_implementation("residual_norm", "fused_cuda"))                         \
      GTEST_SKIP() << "fused_cuda unavailable: built without CUDA";                 \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "fused_cuda needs a CUDA device"; \
    const auto dev = describe_device(torch::Device(torch::kCUDA, 0), torch::kFloat); \
    if (const auto why = find_backend("residual_norm", "fused_cuda")->unavailable_reason(dev); !why.empty()) \
      GTEST_SKIP() << "fused_cuda unavailable: " << why;                            \
  } while (0)

// Gradients of <y, gy> + <s, gs> with respect to (x, residual, weight).
std::vector<Tensor> residual_norm_grads(const ResidualNormFn& fn, const Tensor& x, const Tensor& r, const Tensor& w,
                                        const Tensor& gy, const Tensor& gs) {
  const auto leaves = std::vector<Tensor>{x.detach().requires_grad_(true), r.detach().requires_grad_(true),
                                          w.detach().requires_grad_(true)};
  auto [y, s] = fn(leaves[0], leaves[1], leaves[2], 1e-6);
  return torch::autograd::grad({y, s}, leaves, {gy.to(y.scalar_type()), gs.to(s.scalar_type())});
}

TEST(FusedCuda, ResidualNormWeightGradientIsBitwiseReproducibleAndMatchesTheReference) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(11);
  // 65536 rows of nam56r-small's width: more rows than the backward grid has blocks, so each block
  // accumulates many rows before its partial is written.
  const int64_t rows = 65536, d = 1024;
  const auto x = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto r = random_normal({rows, d}, gen, 2.0, torch::kFloat, cuda);
  const auto w = (1.0 + random_normal({d}, gen, 0.3)).to(cuda, torch::kFloat);
  const auto gy = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto gs = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto& fused = implementations().residual_norm.at("fused_cuda");
  const auto first = residual_norm_grads(fused, x, r, w, gy, gs);
  const auto second = residual_norm_grads(fused, x, r, w, gy, gs);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(torch::equal(first[i], second[i])) << "gradient " << i;
  const auto want = residual_norm_grads(&reference::residual_norm, x.to(torch::kDouble), r.to(torch::kDouble),
                                        w.to(torch::kDouble), gy.to(torch::kDouble), gs.to(torch::kDouble));
  // dw sums 65536 products per column in fp32 (per-thread runs of 16 rows, then 16 slices):
  // relative error ~ 1e-6 expected; 2e-5 leaves room without hiding a wrong sum (which is O(1)).
  EXPECT_LE(relative_error(first[2], want[2]), 2e-5);
  EXPECT_LE(relative_error(first[1], want[1]), 5e-6);
  EXPECT_LE(relative_error(first[0], want[0]), 5e-6);
}

TEST(FusedCuda, UnalignedRowsTakeTheElementwisePathAndAgreeWithTheVectorisedOne) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(12);
  const int64_t rows = 37, d = 1024;
  // One fp32 element in: contiguous rows whose start is 4 bytes past a 16-byte boundary.
  auto shifted = [&](const Tensor& t) {
    auto buffer = torch::empty({t.numel() + 1}, t.options());
    auto view = buffer.narrow(0, 1, t.numel()).view(t.sizes());
    view.copy_(t);
    return view;
  };
  const auto x = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto r = random_normal({rows, d}, gen, 2.0, torch::kFloat, cuda);
  const auto w = (1.0 + random_normal({d}, gen, 0.3)).to(cuda, torch::kFloat);
  const auto gy = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto gs = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(shifted(x).data_ptr()) % 16, 0u);
  const auto& fused = implementations().residual_norm.at("fused_cuda");
  const auto [y_vec, s_vec] = fused(x, r, w, 1e-6);
  const auto [y_el, s_el] = fused(shifted(x), shifted(r), w, 1e-6);
  EXPECT_LE(relative_error(y_el, y_vec), 1e-6);
  EXPECT_TRUE(torch::equal(s_el, s_vec));  // one fp32 add either way
  const auto g_vec = residual_norm_grads(fused, x, r, w, gy, gs);
  const auto g_el = residual_norm_grads(fused, shifted(x), shifted(r), w, shifted(gy), shifted(gs));
  for (size_t i = 0; i < g_vec.size(); ++i) EXPECT_LE(relative_error(g_el[i], g_vec[i]), 1e-5) << "gradient " << i;
  const auto& swiglu = implementations().swiglu.at("fused_cuda");
  EXPECT_LE(relative_error(swiglu(shifted(x), shifted(r)), swiglu(x, r)), 1e-6);
}

}  // namespace
}  // namespace ablate::kernels
