// kernels/causal_conv/catalog.cpp: the causal_conv seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"
#include "kernels/causal_conv/limits.h"

namespace ablate::kernels {
namespace {

// Hopper, fp32 or bf16, and the model's conv width within the taps the kernel keeps in registers.
std::string causal_conv_fused_unavailable(const DeviceInfo& dev) {
  if (auto why = availability::hopper_fp32_or_bf16(dev); !why.empty()) return why;
  return availability::dims_at_most(dev.model.conv_width, kMaxTaps, "model.recurrent.conv_width", "taps",
                                    "causal_conv");
}

}  // namespace

std::vector<BackendInfo> catalog_rows::causal_conv() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "zero padding and one shifted product per tap in LibTorch ops",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_causal_conv_"},
       .description = "kernels/causal_conv/fused_cuda.cu: one pass each way, the last K-1 rows "
                      "in registers; parameter gradients as per-tile partial sums (no atomics)",
       .unavailable_reason = &causal_conv_fused_unavailable,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
