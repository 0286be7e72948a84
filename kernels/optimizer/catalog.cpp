// kernels/optimizer/catalog.cpp: the optimizer seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::optimizer() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "AdamW in LibTorch ops, one parameter at a time; bias corrections from the "
                      "step tensor on the device (no host read, capturable)",
       .unavailable_reason = &availability::always},
      {.name = "fused_adamw",
       .role = Role::vendor,
       .fallback = "reference",
       .kernel_patterns = {"FusedAdamMathFunctor"},
       .description = "LibTorch's fused multi-tensor AdamW (at::_fused_adamw_, learning rate "
                      "as a tensor): every parameter of a group in a few launches",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "fused_adamw",
       .kernel_patterns = {"ablate_adamw"},
       .description = "kernels/optimizer/fused_cuda.cu: AdamW over every parameter of a group in "
                      "a few launches, the clipping's scale divided in as each gradient is read "
                      "(no write-back of the divided gradient); fp32, contiguous",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
