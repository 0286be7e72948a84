// kernels/moe_dispatch/catalog.cpp: the moe_dispatch seam's catalog rows (kernels/catalog.h), plain C++: what each
// backend is (role, fallback, CUPTI kernel-name patterns, availability, capture), the reference first.
// Each backend's function registers itself from its own file under its row's name (kernels/registry.h).
// Tests: kernels_tests --gtest_filter='Catalog*:Registry*' (tests/kernels/catalog_test.cpp).
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
       // CUTLASS's grouped GEMM (cutlass::gemm::GroupProblemShape), in the demangled
       // name and in the raw one a build without libiberty keeps
       // (profiling/cupti_names.h); the fused passes around it (expert_kernels.cu).
       .kernel_patterns = {"GroupProblemShape", "ablate_moe_sum_slots", "ablate_moe_swiglu",
                           "ablate_moe_copy_blocks"},
       .description = "dropless without a host sync: slots sorted by expert on the device, "
                      "the expert matmuls as LibTorch grouped GEMMs (at::_grouped_mm, gate and "
                      "up in one) over device offsets, the SwiGLU with the routing weight and "
                      "the k-slot sums as fused CUDA passes; CUDA-graph capturable",
       .unavailable_reason = &grouped_mm_unavailable},
  };
}

}  // namespace ablate::kernels
