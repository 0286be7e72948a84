// kernels/residual_norm/catalog.cpp: the residual_norm seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::residual_norm() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "residual add + RMSNorm in LibTorch ops, fp32 arithmetic",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_residual_norm_fwd", "ablate_residual_norm_bwd",
                           "ablate_residual_norm_dw"},
       .description = "kernels/residual_norm/fused_cuda.cu: add + RMSNorm in one pass forward "
                      "and one backward (rows in registers), deterministic two-stage dw",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
