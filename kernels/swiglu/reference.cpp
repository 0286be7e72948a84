// kernels/swiglu/reference.cpp: the reference backend of seam `swiglu` (SwigluFn in kernels/seams.h):
// silu(a) * b in LibTorch ops, autograd-differentiable, any device and dtype.
// Tests: kernels_tests --gtest_filter='Parity*swiglu*' (tests/kernels/parity_test.cpp).
#include "kernels/registry.h"

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(swiglu_reference) {
  registry.swiglu("reference", [](const torch::Tensor& a, const torch::Tensor& b) { return torch::silu(a) * b; });
}

}  // namespace ablate::kernels
