// tests/kernels/fp8_checks.h: helpers the FP8 tests share (tests/kernels/fp8_test.cpp,
// fp8_experts_test.cpp): quantisation options by recipe field, FP8 values as fp32, and bitwise equality
// of quantised tensors and their scales. Header-only.
#pragma once
#include <torch/torch.h>

#include "kernels/dense_gemm/fp8_quantize.h"

namespace ablate::testing {

inline kernels::fp8::QuantizeOptions fp8_options(kernels::fp8::Scaling scaling,
                                                 at::ScalarType dtype = at::kFloat8_e4m3fn, bool power_of_two = false) {
  kernels::fp8::QuantizeOptions o;
  o.scaling = scaling;
  o.dtype = dtype;
  o.power_of_two_scales = power_of_two;
  return o;
}

inline torch::Tensor as_float(const torch::Tensor& fp8) { return fp8.to(torch::kFloat); }

// Bit patterns (NaN compares equal to itself this way); two undefined tensors are equal.
inline bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto as_int = [](const torch::Tensor& t) {
    return t.element_size() == 1 ? t.cpu().contiguous().view(torch::kUInt8) : t.cpu().contiguous().view(torch::kInt32);
  };
  return torch::equal(as_int(a), as_int(b));
}

}  // namespace ablate::testing
