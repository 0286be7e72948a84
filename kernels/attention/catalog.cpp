// kernels/attention/catalog.cpp: the attention seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {
namespace {

// FlashAttention-2 inside LibTorch: sm80+, bf16/fp16 only (fp32 is rejected by the kernel).
std::string sdpa_flash_unavailable(const DeviceInfo& dev) {
  if (auto r = availability::needs_compute_capability(dev, 8, 0); !r.empty()) return r;
  return availability::needs_half_precision(dev);
}

// cuDNN fused attention: enabled for Hopper (sm90) and newer. It accepts fp32 inputs without an error
// but returns NaN (checked on an H100 with LibTorch 2.11 + cuDNN 9.19), so fp32 counts as unavailable.
std::string sdpa_cudnn_unavailable(const DeviceInfo& dev) {
  if (auto r = availability::needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  return availability::needs_half_precision(dev);
}

// Memory-efficient attention (CUTLASS, from xFormers): any CUDA device LibTorch supports; fp32 and bf16.
std::string sdpa_efficient_unavailable(const DeviceInfo& dev) { return availability::needs_cuda(dev); }

}  // namespace

std::vector<BackendInfo> catalog_rows::attention() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "causal softmax attention in LibTorch ops (fp32 softmax for bf16 inputs)",
       .unavailable_reason = &availability::always},
      {.name = "sdpa_flash",
       .role = Role::vendor,
       .fallback = "reference",
       .kernel_patterns = {"flash_fwd", "flash_bwd"},
       .description = "at::_scaled_dot_product_flash_attention (FlashAttention-2); head dims "
                      "padded to a multiple of 8, v padded to the q/k head dim",
       .unavailable_reason = &sdpa_flash_unavailable},
      {.name = "sdpa_cudnn",
       .role = Role::vendor,
       .fallback = "reference",
       .kernel_patterns = {"cudnn_generated_fort_native_sdpa", "cudnn::fusion"},
       .description = "at::_scaled_dot_product_cudnn_attention (cuDNN fused flash attention); "
                      "head dims padded to a multiple of 8, a one-position sequence to two "
                      "(its backward rejects s = 1)",
       .unavailable_reason = &sdpa_cudnn_unavailable},
      {.name = "sdpa_efficient",
       .role = Role::vendor,
       .fallback = "reference",
       .kernel_patterns = {"fmha_cutlassF", "fmha_cutlassB"},
       .description = "at::_scaled_dot_product_efficient_attention (CUTLASS memory-efficient "
                      "attention); head dims padded to a multiple of 8",
       .unavailable_reason = &sdpa_efficient_unavailable},
  };
}

}  // namespace ablate::kernels
