// kernels/residual_norm/reference.cpp: the reference backend of seam `residual_norm`
// (ResidualNormFn in kernels/seams.h): s = x + residual, y = RMSNorm(s) * weight, in LibTorch ops with
// fp32 arithmetic (fp64 for fp64 inputs), autograd-differentiable, CPU and CUDA.
// Tests: kernels_tests --gtest_filter='Parity*residual_norm*' (tests/kernels/parity_test.cpp).
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

std::pair<torch::Tensor, torch::Tensor> residual_norm_reference(const torch::Tensor& x, const torch::Tensor& residual,
                                                                const torch::Tensor& weight, double eps) {
  const auto dt = x.defined() ? at::promote_types(compute_dtype(residual), x.scalar_type()) : compute_dtype(residual);
  const auto sum = x.defined() ? residual.to(dt) + x.to(dt) : residual.to(dt);
  const auto inv_rms = torch::rsqrt(sum.pow(2).mean(-1, /*keepdim=*/true) + eps);
  const auto y = sum * inv_rms * weight.to(dt);
  const auto out_dtype = x.defined() ? x.scalar_type() : residual.scalar_type();
  return {y.to(out_dtype), sum.to(residual.scalar_type())};
}

}  // namespace

ABLATE_REGISTER_BACKENDS(residual_norm_reference) {
  registry.residual_norm("reference", &residual_norm_reference);
}

}  // namespace ablate::kernels
