// tests/kernels/tensor_checks.h: helpers shared by kernels_tests and model_tests: seeded random
// inputs (drawn in fp64 on the CPU, so every dtype and device sees the same numbers), a relative error
// measure, and a finite-difference gradient check (central differences along random directions,
// compared with autograd). Header-only; include as "tests/kernels/tensor_checks.h".
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace ablate::testing {

inline at::Generator seeded_generator(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// Standard normal values (times `scale`), drawn in fp64 on the CPU from `gen`, then cast and moved.
inline torch::Tensor random_normal(at::IntArrayRef sizes, at::Generator& gen, double scale = 1.0,
                                   torch::Dtype dtype = torch::kDouble, torch::Device device = torch::kCPU) {
  auto t = torch::empty(sizes, torch::kDouble).normal_(0.0, scale, gen);
  return t.to(device, dtype);
}

inline torch::Tensor random_uniform(at::IntArrayRef sizes, at::Generator& gen, double low, double high) {
  return torch::empty(sizes, torch::kDouble).uniform_(low, high, gen);
}

// max |actual - expected| / max(max |expected|, scale_floor), computed in fp64 on the CPU (0 for
// empty tensors). The floor gives an expected tensor that is exactly zero (a gradient that vanishes
// by construction) a meaningful scale, e.g. the largest of its sibling gradients.
inline double relative_error(const torch::Tensor& actual, const torch::Tensor& expected, double scale_floor = 0.0) {
  const auto a = actual.detach().to(torch::kCPU, torch::kDouble), e = expected.detach().to(torch::kCPU, torch::kDouble);
  if (e.numel() == 0) return 0.0;
  const double scale = std::max({e.abs().max().item<double>(), scale_floor, 1e-300});
  return (a - e).abs().max().item<double>() / scale;
}

// Compares autograd's gradient of scalar_fn() with respect to `leaves` (fp64 tensors that require grad:
// inputs and parameters) against central differences (f(x + h u) - f(x - h u)) / 2h along `directions`
// random directions u. Returns the worst |analytic - numeric| / max(|analytic|, |numeric|, floor).
// With h = 1e-6 in fp64 the difference quotient is good to about 1e-8 for smooth functions.
inline double gradient_check_error(const std::function<torch::Tensor()>& scalar_fn,
                                   const std::vector<torch::Tensor>& leaves, at::Generator& gen, int directions = 3,
                                   double step = 1e-6) {
  const auto value = scalar_fn();
  const auto grads = torch::autograd::grad({value}, leaves, /*grad_outputs=*/{}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  double worst = 0.0;
  for (int n = 0; n < directions; ++n) {
    std::vector<torch::Tensor> dirs;
    double analytic = 0.0;
    for (size_t i = 0; i < leaves.size(); ++i) {
      dirs.push_back(random_normal(leaves[i].sizes(), gen, 1.0, torch::kDouble, leaves[i].device()));
      if (grads[i].defined()) analytic += (grads[i] * dirs[i]).sum().item<double>();
    }
    torch::NoGradGuard no_grad;
    auto shift = [&](double amount) {
      for (size_t i = 0; i < leaves.size(); ++i) leaves[i].add_(dirs[i], amount);
    };
    shift(step);
    const double plus = scalar_fn().item<double>();
    shift(-2 * step);
    const double minus = scalar_fn().item<double>();
    shift(step);
    const double numeric = (plus - minus) / (2 * step);
    const double scale = std::max({std::abs(analytic), std::abs(numeric), 1e-6});
    worst = std::max(worst, std::abs(analytic - numeric) / scale);
  }
  return worst;
}

// The name of a (dtype, width) test parameter, as "bf16_w768": the CUDA passes' parameterised suites.
template <class Info>
std::string dtype_and_width_name(const Info& info) {
  const auto& [dtype, width] = info.param;
  return std::string(dtype == torch::kFloat ? "fp32" : "bf16") + "_w" + std::to_string(width);
}

}  // namespace ablate::testing
