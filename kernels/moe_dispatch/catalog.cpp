// kernels/moe_dispatch/catalog.cpp: the moe_dispatch seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*:Fp8Experts*' (tests/kernels/catalog_test.cpp,
// tests/kernels/fp8_experts_test.cpp).
#include "kernels/catalog_rows.h"

namespace ablate::kernels {
namespace {

// LibTorch's grouped GEMM (at::_grouped_mm): on CUDA the CUTLASS sm90 kernels, bf16/fp16 only; on the
// CPU its own fp32/bf16 implementation. No fp64 kernel anywhere.
std::string grouped_mm_unavailable(const DeviceInfo& dev) {
  if (dev.dtype == "fp64") return "at::_grouped_mm has no fp64 kernel";
  if (!dev.cuda) return "";
  if (auto r = availability::needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  return availability::needs_half_precision(dev);
}

// FP8 grouped GEMMs (at::_scaled_grouped_mm: CUTLASS sm90, e4m3 operands) replace the bf16 grouped GEMMs
// of a bf16 run on Hopper; every FP8 operand row must span whole 16-byte TMA units, so d and f are
// multiples of 16 (the FP8 path does not pad them as grouped_mm pads to 8).
std::string grouped_mm_fp8_unavailable(const DeviceInfo& dev) {
  return catalog_rows::fp8_gemms_unavailable(dev, "the bf16 grouped GEMMs", dev.model.expert_alignment,
                                             "model.d_model and model.moe.ffn (the expert GEMMs' widths)",
                                             "moe_dispatch = \"grouped_mm\"");
}

}  // namespace

std::vector<BackendInfo> catalog_rows::moe_dispatch() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "standard path: permute by expert, pad to capacity, bmm, unpad, unpermute, "
                      "weighted sum; dropless mode syncs the host once for the largest expert load",
       .unavailable_reason = &availability::always,
       .capture = Capture::not_when_dropless,
       .capture_reason = "reads the largest expert load on the host in every E layer, and a host "
                         "sync cannot be captured"},
      {.name = "grouped_mm",
       .role = Role::vendor,
       .fallback = "reference",
       // The bf16 tensor-core instruction of CUTLASS's sm90 grouped GEMM (cute's GMMA atom
       // MMA_64xNx16_F32BF16BF16), in the demangled name and in the raw one a build without libiberty
       // keeps (profiling/cupti_names.h). Not the grouped problem shape, nor the fused passes around the
       // GEMMs (expert_kernels.cu): grouped_mm_fp8_rowwise runs those too.
       .kernel_patterns = {"F32BF16BF16"},
       .description = "dropless without a host sync: slots sorted by expert on the device, "
                      "the expert matmuls as LibTorch grouped GEMMs (at::_grouped_mm, gate and "
                      "up in one) over device offsets, the SwiGLU with the routing weight and "
                      "the k-slot sums as fused CUDA passes; CUDA-graph capturable",
       .unavailable_reason = &grouped_mm_unavailable},
      {.name = "grouped_mm_fp8_rowwise",
       .role = Role::experimental,
       .fallback = "grouped_mm",
       // The FP8 instruction of at::_scaled_grouped_mm's CUTLASS sm90 kernels (GMMA
       // MMA_64xNx32_F32E4M3E4M3), raw and demangled; the quantisation passes (dense_gemm's kernels,
       // kernels/dense_gemm/fp8_quantize.cu: within this seam only this row runs them).
       .kernel_patterns = {"F32E4M3E4M3", "ablate_fp8_rowwise"},
       .description = "kernels/moe_dispatch/grouped_mm_fp8.cu: grouped_mm's dropless dispatch with all six "
                      "expert GEMMs (forward, input and weight gradients) as FP8 grouped GEMMs "
                      "(at::_scaled_grouped_mm) with current power-of-two scales per row along each GEMM's "
                      "inner dimension, per expert and column over its tokens for the weight gradients "
                      "(tokens padded to 16 per expert), e4m3 throughout; fp32 master weights, bf16 outputs "
                      "and weight gradients",
       .unavailable_reason = &grouped_mm_fp8_unavailable,
       .needs_nvcc = true,
       .changes_numerics = true,
       .fp8_gemms = true},
  };
}

}  // namespace ablate::kernels
