// kernels/dense_gemm/catalog.cpp: the dense_gemm seam's catalog rows (kernels/catalog.h), plain C++: the
// blocks' dense projections in bf16 (the reference) or FP8 with current scaling (per tensor or per row)
// or delayed scaling (per tensor, the gradients' GEMMs promoted to fp32 or in fast accumulation).
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*:*Fp8*' (tests/kernels/catalog_test.cpp,
// tests/kernels/fp8_test.cpp).
#include "kernels/catalog_rows.h"
#include "kernels/dense_gemm/fp8_availability.h"

namespace ablate::kernels {

std::string availability::fp8_gemms(const DeviceInfo& dev) {
  return catalog_rows::fp8_gemms_unavailable(
      dev, "the bf16 autocast GEMMs", dev.model.projection_alignment,
      "every dense GEMM width (the blocks' projections, the LM head's vocabulary and d) and the tokens of a "
      "micro-batch",
      "bf16 GEMMs (dense_gemm = \"reference\", loss = \"fused_cuda\")");
}

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
       .unavailable_reason = &availability::fp8_gemms,
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
       .unavailable_reason = &availability::fp8_gemms,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
      {.name = "fp8_delayed",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_fp8_delayed"},
       .description = "kernels/dense_gemm/fp8_scaled_mm.cu: FP8 GEMMs (at::_scaled_mm) with one delayed scale "
                      "per tensor, from each operand's amax over its last 16 calls at this projection (one "
                      "quantisation pass, not two): x and W e4m3, the output gradient e5m2; fp32 master weights",
       .unavailable_reason = &availability::fp8_gemms,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
      {.name = "fp8_delayed_fast_accum",
       .role = Role::experimental,
       .fallback = "reference",
       // fp8_delayed's quantisation kernels: cuBLASLt's kernel names do not show the accumulation mode,
       // so a profile confirms the delayed recipe's FP8 GEMMs ran, not which accumulation they used.
       .kernel_patterns = {"ablate_fp8_delayed"},
       .description = "kernels/dense_gemm/fp8_scaled_mm.cu: fp8_delayed with the two gradient GEMMs in fast "
                      "accumulation too (partial sums kept in the tensor cores' reduced precision over the "
                      "whole inner dimension, not promoted to fp32 every few k-blocks)",
       .unavailable_reason = &availability::fp8_gemms,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
  };
}

}  // namespace ablate::kernels
