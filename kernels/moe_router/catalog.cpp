// kernels/moe_router/catalog.cpp: the moe_router seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"
#include "kernels/moe_router/limits.h"

namespace ablate::kernels {
namespace {

std::string moe_router_fused_unavailable(const DeviceInfo& dev) {
  if (auto why = availability::hopper_fp32_or_bf16(dev); !why.empty()) return why;
  return availability::dims_at_most(dev.model.experts, kMaxExperts, "model.moe.experts", "experts", "moe_router");
}

}  // namespace

std::vector<BackendInfo> catalog_rows::moe_router() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "x into fp32, an fp32 linear, softmax and top-k in LibTorch ops",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_moe_router_"},
       .description = "kernels/moe_router/fused_cuda.cu: logits, softmax and top-k in one pass "
                      "over x in its own dtype; dx and dW without an fp32 copy of x",
       .unavailable_reason = &moe_router_fused_unavailable,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
