// tests/kernels/gelu_gate_test.cpp: gelu_gate (kernels/gelu_gate.h), the R block's gelu(g) * h, against
// the same function in fp64 (LibTorch's exact GELU and autograd) on fresh random inputs: the output and
// both gradients, on the CPU (the LibTorch ops) and on CUDA (the fused passes; g contiguous and as a
// view of wider rows, widths on the 16-byte path and off it). Tolerances, relative to the largest
// reference entry: an fp32 output 1e-6 and its gradients 1e-5 (a handful of fp32 roundings, erf and exp
// to a few ulp); a bf16 output 4e-3 (one rounding, 2^-9 relative) and its dg 8e-3 (rounded once too,
// from a bf16 output gradient); dh stays fp32 in both, 1e-5. Run: build/tests/kernels_tests
// --gtest_filter='GeluGate*'
#include "kernels/gelu_gate.h"

#include <gtest/gtest.h>

#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels {
namespace {

using ablate::testing::random_normal;
using ablate::testing::relative_error;
using ablate::testing::seeded_generator;
using torch::Tensor;

struct Checked {
  double out, dg, dh;
};

// gelu_gate on (g, h) of `dtype` g (a view of the first `width` columns of wider rows when `strided`)
// against fp64, from a random output gradient in g's dtype.
Checked check(torch::Device device, torch::ScalarType dtype, int64_t width, bool strided, uint64_t seed) {
  auto gen = seeded_generator(seed);
  const std::vector<int64_t> shape = {3, 41, width};
  const auto opts = torch::TensorOptions(device);
  const auto wide = random_normal({3, 41, strided ? 2 * width + 8 : width}, gen, 1.5).to(opts.dtype(dtype));
  const auto g = wide.narrow(-1, 0, width).detach().requires_grad_(true);
  const auto h = random_normal(shape, gen).to(opts.dtype(torch::kFloat)).requires_grad_(true);
  const auto d = random_normal(shape, gen).to(opts.dtype(dtype));
  const auto out = gelu_gate(g, h);
  EXPECT_EQ(out.scalar_type(), dtype);
  EXPECT_EQ(out.sizes(), g.sizes());
  const auto grads = torch::autograd::grad({out}, {g, h}, {d});
  EXPECT_EQ(grads[0].scalar_type(), dtype);
  EXPECT_EQ(grads[1].scalar_type(), torch::kFloat);

  const auto g64 = g.detach().cpu().to(torch::kDouble).requires_grad_(true);
  const auto h64 = h.detach().cpu().to(torch::kDouble).requires_grad_(true);
  const auto want = torch::gelu(g64) * h64;
  const auto want_grads = torch::autograd::grad({want}, {g64, h64}, {d.cpu().to(torch::kDouble)});
  return {relative_error(out, want), relative_error(grads[0], want_grads[0]), relative_error(grads[1], want_grads[1])};
}

void expect_within(const Checked& c, torch::ScalarType dtype, const std::string& label) {
  const bool bf16 = dtype == torch::kBFloat16;
  EXPECT_LE(c.out, bf16 ? 4e-3 : 1e-6) << label << ": output";
  EXPECT_LE(c.dg, bf16 ? 8e-3 : 1e-5) << label << ": dg";
  EXPECT_LE(c.dh, 1e-5) << label << ": dh";
}

TEST(GeluGate, OpsMatchFp64OnTheCpu) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    expect_within(check(torch::kCPU, dtype, 24, true, 5), dtype, dtype == torch::kFloat ? "cpu fp32" : "cpu bf16");
}

TEST(GeluGate, CudaPassesMatchFp64) {
#if !defined(ABLATE_HAVE_CUDA)
  GTEST_SKIP() << "gelu_gate's CUDA passes need CUDA: built without it";
#else
  if (!torch::cuda::is_available()) GTEST_SKIP() << "gelu_gate's CUDA passes need a CUDA device";
  const auto probe = torch::zeros({2, 8}, torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16));
  EXPECT_TRUE(fused::gelu_gate_cuda_supports(probe.narrow(-1, 0, 4), torch::zeros({2, 4}, probe.options().dtype(torch::kFloat))))
      << "a view of wider rows takes the CUDA pass";
  uint64_t seed = 20;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat})
    for (const int64_t width : {1024, 13})
      for (const bool strided : {false, true}) {
        const std::string label = std::string(dtype == torch::kFloat ? "fp32" : "bf16") + " width " +
                                  std::to_string(width) + (strided ? " strided" : " contiguous");
        expect_within(check(torch::kCUDA, dtype, width, strided, ++seed), dtype, label);
      }
#endif
}

}  // namespace
}  // namespace ablate::kernels
