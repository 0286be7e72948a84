// kernels/loss/catalog.cpp: the loss seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"
#include "kernels/dense_gemm/fp8_availability.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::loss() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "full logits + masked cross-entropy in LibTorch ops",
       .unavailable_reason = &availability::always},
      {.name = "chunked",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {},
       .description = "head matmul + cross-entropy over row chunks; backward recomputes each chunk's "
                      "logits, so the full logits never exist at once",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "chunked",
       .kernel_patterns = {"ablate_lce_rows", "ablate_lce_scale"},
       .description = "kernels/loss/fused_cuda.cu: fused linear cross-entropy, row chunks of ~256 MiB "
                      "of logits, online log-sum-exp and the logits gradient in one kernel, gradients "
                      "computed in forward",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
      {.name = "fused_cuda_fp8_rowwise",
       .role = Role::experimental,
       .fallback = "fused_cuda",
       .kernel_patterns = {"ablate_lce_rows", "ablate_lce_scale", "ablate_fp8_rowwise"},
       .description = "kernels/loss/fused_cuda.cu: fused_cuda with the LM head's three GEMMs in FP8 "
                      "(at::_scaled_mm): one current power-of-two scale per row of each operand along the "
                      "GEMM's inner dimension, e4m3 throughout; fp32 master weights",
       .unavailable_reason = &availability::fp8_gemms,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
  };
}

}  // namespace ablate::kernels
