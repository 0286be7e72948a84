// kernels/recurrent_scan/catalog.cpp: the recurrent_scan seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {

std::vector<BackendInfo> catalog_rows::recurrent_scan() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "RG-LRU gates and linear recurrence, chunked, in LibTorch ops, fp32",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_rglru_"},
       .description = "kernels/recurrent_scan/fused_cuda.cu: gates and recurrence fused, "
                      "chunk scans chained by runs in one pass forward and one "
                      "backward; deterministic d lambda",
       .unavailable_reason = &availability::hopper_fp32_or_bf16,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
