// kernels/ssm_rotary/catalog.cpp: the ssm_rotary seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {
namespace {

// Hopper, fp32 or bf16, and the M blocks' shapes within the kernels' limits: N <= 2048 (a thread a pair,
// 1024 a block) and H x S <= 12288 angles a row (S = N / 4: the angle-gradient pass keeps a row's in 48 KB
// of shared memory).
std::string ssm_rotary_fused_unavailable(const DeviceInfo& dev) {
  if (auto why = availability::hopper_fp32_or_bf16(dev); !why.empty()) return why;
  if (auto why = availability::dims_at_most(dev.model.ssm_state, 2048, "model.mamba.state", "state dims", "ssm_rotary");
      !why.empty())
    return why;
  return availability::dims_at_most(dev.model.ssm_heads * (dev.model.ssm_state / 4), 12288,
                                    "the M blocks' heads x angles (H x state / 4)", "angles a row", "ssm_rotary");
}

}  // namespace

std::vector<BackendInfo> catalog_rows::ssm_rotary() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "Mamba-3 angles and per-head rotated B, C in LibTorch ops, fp32",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_ssm_rotary_"},
       .description = "kernels/ssm_rotary/fused_cuda.cu: Phi summed over time by a two-pass "
                      "scan, q and k written in one pass (per-head bias, pairs turned by "
                      "sincosf(Phi)), backward one pass (bias gradients by per-block partials, "
                      "no atomics) and the reverse scan; the angle steps in LibTorch ops",
       .unavailable_reason = &ssm_rotary_fused_unavailable,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
