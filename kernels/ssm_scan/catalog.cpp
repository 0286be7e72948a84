// kernels/ssm_scan/catalog.cpp: the ssm_scan seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/catalog_rows.h"
#include "kernels/ssm_scan/limits.h"

#include <string>

namespace ablate::kernels {
namespace {

// Hopper, fp32 or bf16, and the M blocks' shapes within check_supported's: P and N multiples of 16 in
// [16, 128], chunk 16, 32, 48 or 64; an fp32 run takes the SIMT path, whose backward chunk must fit the
// H100's 232,448 bytes of shared memory a block (P = N = 128 at chunk 64 does not).
std::string ssm_scan_fused_unavailable(const DeviceInfo& dev) {
  if (auto why = availability::hopper_fp32_or_bf16(dev); !why.empty()) return why;
  const auto& m = dev.model;
  if (m.ssm_head_dim == 0) return "";  // shapes not known: each call checks its own
  const auto multiple_of_16 = [](int64_t v, int64_t most) { return v % 16 == 0 && v >= 16 && v <= most; };
  const std::string use_reference = " (use ssm_scan = \"reference\" for this model)";
  if (!multiple_of_16(m.ssm_head_dim, fused::kMaxDim) || !multiple_of_16(m.ssm_state, fused::kMaxDim))
    return "model.mamba.head_dim = " + std::to_string(m.ssm_head_dim) + " and model.mamba.state = " +
           std::to_string(m.ssm_state) + " must be multiples of 16 in [16, 128] for this kernel" + use_reference;
  if (!multiple_of_16(m.ssm_chunk, fused::kMaxChunk))
    return "model.mamba.chunk = " + std::to_string(m.ssm_chunk) + " must be 16, 32, 48 or 64 for this kernel" +
           use_reference;
  using fused::kHopperSmemPerBlock;
  const size_t simt_bytes = fused::bwd_chunk_smem_floats(static_cast<int>(m.ssm_chunk), static_cast<int>(m.ssm_head_dim),
                                                         static_cast<int>(m.ssm_state)) * sizeof(float);
  if (dev.dtype == "fp32" && simt_bytes > kHopperSmemPerBlock)
    return "an fp32 run's backward chunk needs " + std::to_string(simt_bytes) + " bytes of shared memory at chunk " +
           std::to_string(m.ssm_chunk) + ", P " + std::to_string(m.ssm_head_dim) + ", N " + std::to_string(m.ssm_state) +
           ", over the H100's " + std::to_string(kHopperSmemPerBlock) +
           " (set model.mamba.chunk = 48, run in bf16, or use ssm_scan = \"reference\")";
  return "";
}

}  // namespace

std::vector<BackendInfo> catalog_rows::ssm_scan() {
  return {
      {.name = "reference",
       .role = Role::reference,
       .description = "Mamba-3 SISO chunked scan in LibTorch ops, fp32",
       .unavailable_reason = &availability::always},
      {.name = "fused_cuda",
       .role = Role::experimental,
       .fallback = "reference",
       .kernel_patterns = {"ablate_ssm_scan_"},
       .description = "kernels/ssm_scan/fused_cuda.cu: chunked SSD-style scan, fp32 state; bf16: forward "
                      "2 launches (a state scan over the chunks on tensor cores, outputs with D "
                      "skip and silu(z) gate), backward 4 (the adjoint scan, then recomputes "
                      "within a chunk); fp32: 3 and 5 (SIMT); P, N multiples of 16 up to 128, "
                      "chunk 16-64",
       .unavailable_reason = &ssm_scan_fused_unavailable,
       .needs_nvcc = true},
  };
}

}  // namespace ablate::kernels
