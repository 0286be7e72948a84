// kernels/swiglu/catalog.cpp: the swiglu seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::swiglu() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "silu(a) * b in LibTorch ops",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_swiglu_fwd", "ablate_swiglu_bwd"},
       .description = "kernels/swiglu/fused_cuda.cu: silu(a) * b and its backward, one vectorised "
                      "element-wise pass each",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
