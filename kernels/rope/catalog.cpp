// kernels/rope/catalog.cpp: the rope seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::rope() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "rotation of adjacent pairs (2i, 2i+1) in LibTorch ops, fp32 arithmetic",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_rope_fwd", "ablate_rope_bwd"},
       .description = "kernels/rope/fused_cuda.cu: rotates q_r and the shared k_r and writes the "
                      "concatenated q and k in one launch; backward one launch",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
