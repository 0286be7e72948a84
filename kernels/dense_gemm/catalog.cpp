// kernels/dense_gemm/catalog.cpp: the dense_gemm seam's catalog rows (kernels/catalog.h), plain C++: the
// blocks' dense projections in bf16 (the reference) or FP8 with current scaling, per tensor or per row.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*:*Fp8*' (tests/kernels/catalog_test.cpp,
// tests/kernels/fp8_test.cpp).
#include <fmt/format.h>

#include "kernels/catalog_rows.h"

namespace ablate::kernels {
namespace {

// FP8 GEMMs replace the bf16 autocast GEMMs of a bf16 run on Hopper's FP8 tensor cores, and cuBLASLt
// takes FP8 operands only with every leading dimension a multiple of 16.
std::string fp8_unavailable(const DeviceInfo& dev) {
  if (auto r = availability::hopper_fp32_or_bf16(dev); !r.empty()) return r;
  if (dev.dtype != "bf16")
    return fmt::format("needs train.dtype = \"bf16\": FP8 GEMMs replace the bf16 autocast GEMMs (run dtype is {})",
                       dev.dtype);
  if (dev.model.projection_alignment != 0 && dev.model.projection_alignment % 16 != 0)
    return fmt::format("every projection width and the tokens of a micro-batch must be multiples of 16 for FP8 "
                       "GEMMs (their greatest common divisor is {}): choose such widths, or use "
                       "dense_gemm = \"reference\" for this model",
                       dev.model.projection_alignment);
  return "";
}

}  // namespace

std::vector<BackendInfo> catalog_rows::dense_gemm() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "y = x W^T (+ b) through LibTorch's GEMM: under bf16 autocast the casts and GEMMs of "
                      "autocast, the weight gradient written in fp32 by its GEMM",
       .unavailable_reason = &availability::always},
      {.name = "fp8_tensorwise",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_fp8_tensorwise"},
       .description = "kernels/dense_gemm/fp8_scaled_mm.cu: FP8 GEMMs (at::_scaled_mm) with one current "
                      "scale per tensor: x and W e4m3, the output gradient e5m2; fp32 master weights",
       .unavailable_reason = &fp8_unavailable,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
      {.name = "fp8_rowwise",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_fp8_rowwise"},
       .description = "kernels/dense_gemm/fp8_scaled_mm.cu: FP8 GEMMs (at::_scaled_mm) with one current "
                      "power-of-two scale per row of each operand along the GEMM's inner dimension, e4m3 "
                      "throughout; fp32 master weights",
       .unavailable_reason = &fp8_unavailable,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
  };
}

}  // namespace ablate::kernels
