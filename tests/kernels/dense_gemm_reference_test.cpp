// tests/kernels/dense_gemm_reference_test.cpp: dense_gemm's reference (kernels/dense_gemm/reference.h). Off the autocast path it is torch::linear,
// bit for bit. Under CUDA bf16 autocast with fp32 weights: the output and the input gradient equal
// autocast's torch::linear bit for bit (the same casts and GEMMs), and the weight and bias gradients,
// written in fp32 by the GEMM and the reduction, match an fp64 product of the same bf16-rounded operands
// to 1e-5 relative (fp32 accumulation over 111 rows; autocast's bf16 weight gradient is ~4e-3 off, so the
// bound also tells the two apart). Run: build/tests/kernels_tests --gtest_filter='DenseGemmReference*'
#include "kernels/dense_gemm/reference.h"

#include <gtest/gtest.h>

#include "tests/kernels/tensor_checks.h"
#include "tests/model/bf16_autocast.h"

namespace ablate::kernels {
namespace {

using ablate::testing::random_normal;
using ablate::testing::relative_error;
using ablate::testing::seeded_generator;
using torch::Tensor;

TEST(DenseGemmReference, WithoutAutocastIsTorchLinear) {
  auto gen = seeded_generator(3);
  const auto x = random_normal({3, 5, 7}, gen).to(torch::kFloat), w = random_normal({4, 7}, gen).to(torch::kFloat);
  const auto b = random_normal({4}, gen).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(reference::dense_gemm(x, w, b), torch::linear(x, w, b)));
  EXPECT_TRUE(torch::equal(reference::dense_gemm(x, w), torch::linear(x, w)));
}

TEST(DenseGemmReferenceCuda, UnderAutocastMatchesTorchLinearWithFp32WeightGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  for (const auto x_dtype : {torch::kBFloat16, torch::kFloat}) {
    auto gen = seeded_generator(11);
    const auto x0 = random_normal({3, 37, 96}, gen).to(cuda.dtype(x_dtype));
    const auto w0 = random_normal({80, 96}, gen, 0.1).to(cuda.dtype(torch::kFloat));
    const auto b0 = random_normal({80}, gen).to(cuda.dtype(torch::kFloat));
    const auto dy = random_normal({3, 37, 80}, gen).to(cuda.dtype(torch::kBFloat16));
    struct Result {
      Tensor y, dx, dw, db;
    };
    const auto run = [&](bool ours, bool with_bias) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      Tensor y;
      {
        ablate::testing::Bf16Autocast autocast;
        const auto bias = with_bias ? b : Tensor();
        y = ours ? reference::dense_gemm(x, w, bias) : torch::linear(x, w, bias);
      }
      if (!with_bias) {
        const auto g = torch::autograd::grad({y}, {x, w}, {dy});
        return Result{y, g[0], g[1], Tensor()};
      }
      const auto g = torch::autograd::grad({y}, {x, w, b}, {dy});
      return Result{y, g[0], g[1], g[2]};
    };
    const auto got = run(true, true), want = run(false, true);
    const auto label = x_dtype == torch::kFloat ? "fp32 x" : "bf16 x";
    EXPECT_EQ(got.y.scalar_type(), torch::kBFloat16) << label;
    EXPECT_TRUE(torch::equal(got.y, want.y)) << label;
    EXPECT_EQ(got.dx.scalar_type(), x_dtype) << label;
    EXPECT_TRUE(torch::equal(got.dx, want.dx)) << label;
    EXPECT_EQ(got.dw.scalar_type(), torch::kFloat) << label;
    EXPECT_EQ(got.db.scalar_type(), torch::kFloat) << label;
    // fp64 of the operands the GEMMs saw: bf16 x and dy.
    const auto x64 = x0.to(torch::kBFloat16).to(torch::kDouble).reshape({-1, 96}).cpu();
    const auto dy64 = dy.to(torch::kDouble).reshape({-1, 80}).cpu();
    EXPECT_LE(relative_error(got.dw, dy64.t().mm(x64)), 1e-5) << label;
    EXPECT_LE(relative_error(got.db, dy64.sum(0)), 1e-5) << label;
    // Without a bias (the other function): the same output and input gradient as autocast's, an fp32
    // weight gradient to the same bound.
    const auto plain = run(true, false), plain_want = run(false, false);
    EXPECT_TRUE(torch::equal(plain.y, plain_want.y)) << label;
    EXPECT_TRUE(torch::equal(plain.dx, plain_want.dx)) << label;
    EXPECT_LE(relative_error(plain.dw, dy64.t().mm(x64)), 1e-5) << label;
    EXPECT_GT(relative_error(want.dw, dy64.t().mm(x64)), 1e-4) << label << ": autocast's bf16 weight gradient "
                                                                         "was expected to be visibly rounded";
  }
}

}  // namespace
}  // namespace ablate::kernels
