// kernels/catalog.cpp: the kernel catalog rows (DESIGN.md "Kernel catalog: seams and backends") and
// the fallback resolution. Plain C++ (no LibTorch): `ablate catalog`, the spec parser and the receipts
// use it on machines without a GPU toolchain. The implementations of these rows live in
// kernels/dispatch.cpp (registry) and kernels/reference/*.cpp; a test checks that both list the same rows.
// Tests: tests/kernels/catalog_test.cpp (resolution, reasons, strict mode, unknown names) and
// tests/kernels/parity_test.cpp (every available row against the reference).
#include "kernels/catalog.h"

#include <fmt/format.h>

#include <algorithm>

namespace ablate::kernels {

const char* role_name(Role r) {
  switch (r) {
    case Role::keep:
      return "keep";
    case Role::borderline:
      return "borderline";
    case Role::experimental:
      return "experimental";
    case Role::vendor:
      return "vendor";
    case Role::reference:
      return "reference";
  }
  return "unknown";
}

namespace {

// Availability checks. Each returns "" when the backend can run on `dev`, else the reason it cannot.
std::string always_available(const DeviceInfo&) { return ""; }

std::string needs_cuda(const DeviceInfo& dev) { return dev.cuda ? "" : "needs a CUDA device"; }

std::string needs_compute_capability(const DeviceInfo& dev, int major, int minor) {
  if (!dev.cuda) return "needs a CUDA device";
  if (dev.sm_major * 10 + dev.sm_minor < major * 10 + minor)
    return fmt::format("needs compute capability {}.{} or newer (device has {}.{})", major, minor, dev.sm_major,
                       dev.sm_minor);
  return "";
}

std::string needs_half_precision(const DeviceInfo& dev) {
  if (dev.dtype == "bf16" || dev.dtype == "fp16") return "";
  return fmt::format("needs bf16 or fp16 inputs (run dtype is {})", dev.dtype);
}

// FlashAttention-2 inside LibTorch: sm80+, bf16/fp16 only (fp32 is rejected by the kernel).
std::string sdpa_flash_unavailable(const DeviceInfo& dev) {
  if (auto r = needs_compute_capability(dev, 8, 0); !r.empty()) return r;
  return needs_half_precision(dev);
}

// cuDNN fused attention: enabled for Hopper (sm90) and newer. It accepts fp32 inputs without an error
// but returns NaN (checked on an H100 with LibTorch 2.11 + cuDNN 9.19), so fp32 counts as unavailable.
std::string sdpa_cudnn_unavailable(const DeviceInfo& dev) {
  if (auto r = needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  return needs_half_precision(dev);
}

// Memory-efficient attention (CUTLASS, from xFormers): any CUDA device LibTorch supports; fp32 and bf16.
std::string sdpa_efficient_unavailable(const DeviceInfo& dev) { return needs_cuda(dev); }

// Our own CUDA kernels (kernels/cuda/): compiled only when CUDA is, built for sm_90a (Hopper), fp32
// and bf16 tensors. ABLATE_HAVE_CUDA reaches this file through kernels/CMakeLists.txt.
std::string fused_cuda_unavailable([[maybe_unused]] const DeviceInfo& dev) {
#if defined(ABLATE_HAVE_CUDA)
  if (auto r = needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  if (dev.dtype != "fp32" && dev.dtype != "bf16")
    return fmt::format("needs fp32 or bf16 inputs (run dtype is {})", dev.dtype);
  return "";
#else
  return "built without CUDA";
#endif
}

// LibTorch's grouped GEMM (at::_grouped_mm): on CUDA the CUTLASS sm90 kernels, bf16/fp16 only; on the
// CPU its own fp32/bf16 implementation. No fp64 kernel anywhere.
std::string grouped_mm_unavailable(const DeviceInfo& dev) {
  if (dev.dtype == "fp64") return "at::_grouped_mm has no fp64 kernel";
  if (!dev.cuda) return "";
  if (auto r = needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  return needs_half_precision(dev);
}

BackendInfo reference_row(const std::string& seam, std::string description) {
  return BackendInfo{.seam = seam,
                     .name = "reference",
                     .role = Role::reference,
                     .fallback = "",
                     .kernel_patterns = {},
                     .description = std::move(description),
                     .unavailable_reason = &always_available};
}

std::vector<BackendInfo> build_catalog() {
  std::vector<BackendInfo> rows;
  rows.push_back(reference_row("attention", "causal softmax attention in LibTorch ops (fp32 softmax for bf16 inputs)"));
  rows.push_back(BackendInfo{.seam = "attention",
                             .name = "sdpa_flash",
                             .role = Role::vendor,
                             .fallback = "reference",
                             .kernel_patterns = {"flash_fwd", "flash_bwd"},
                             .description = "at::_scaled_dot_product_flash_attention (FlashAttention-2); head dims "
                                            "padded to a multiple of 8, v padded to the q/k head dim",
                             .unavailable_reason = &sdpa_flash_unavailable});
  rows.push_back(BackendInfo{.seam = "attention",
                             .name = "sdpa_cudnn",
                             .role = Role::vendor,
                             .fallback = "reference",
                             .kernel_patterns = {"cudnn_generated_fort_native_sdpa", "cudnn::fusion"},
                             .description = "at::_scaled_dot_product_cudnn_attention (cuDNN fused flash attention); "
                                            "head dims padded to a multiple of 8, a one-position sequence to two "
                                            "(its backward rejects s = 1)",
                             .unavailable_reason = &sdpa_cudnn_unavailable});
  rows.push_back(BackendInfo{.seam = "attention",
                             .name = "sdpa_efficient",
                             .role = Role::vendor,
                             .fallback = "reference",
                             .kernel_patterns = {"fmha_cutlassF", "fmha_cutlassB"},
                             .description = "at::_scaled_dot_product_efficient_attention (CUTLASS memory-efficient "
                                            "attention); head dims padded to a multiple of 8",
                             .unavailable_reason = &sdpa_efficient_unavailable});
  rows.push_back(reference_row("rope", "rotation of adjacent pairs (2i, 2i+1) in LibTorch ops, fp32 arithmetic"));
  rows.push_back(BackendInfo{.seam = "rope",
                             .name = "fused_cuda",
                             .role = Role::experimental,
                             .fallback = "reference",
                             .kernel_patterns = {"ablate_rope_fwd", "ablate_rope_bwd"},
                             .description = "kernels/cuda/rope.cu: rotates q_r and the shared k_r and writes the "
                                            "concatenated q and k in one launch; backward one launch",
                             .unavailable_reason = &fused_cuda_unavailable});
  rows.push_back(reference_row("residual_norm", "residual add + RMSNorm in LibTorch ops, fp32 arithmetic"));
  rows.push_back(BackendInfo{.seam = "residual_norm",
                             .name = "fused_cuda",
                             .role = Role::experimental,
                             .fallback = "reference",
                             .kernel_patterns = {"ablate_residual_norm_fwd", "ablate_residual_norm_bwd",
                                                 "ablate_residual_norm_dw"},
                             .description = "kernels/cuda/residual_norm.cu: add + RMSNorm in one pass forward and one "
                                            "backward (rows in registers), deterministic two-stage dw",
                             .unavailable_reason = &fused_cuda_unavailable});
  rows.push_back(reference_row("swiglu", "silu(a) * b in LibTorch ops"));
  rows.push_back(BackendInfo{.seam = "swiglu",
                             .name = "fused_cuda",
                             .role = Role::experimental,
                             .fallback = "reference",
                             .kernel_patterns = {"ablate_swiglu_fwd", "ablate_swiglu_bwd"},
                             .description = "kernels/cuda/swiglu.cu: silu(a) * b and its backward, one vectorised "
                                            "element-wise pass each",
                             .unavailable_reason = &fused_cuda_unavailable});
  rows.push_back(reference_row("moe_dispatch",
                               "standard path: permute by expert, pad to capacity, bmm, unpad, unpermute, weighted "
                               "sum; dropless mode syncs the host once for the largest expert load"));
  rows.push_back(BackendInfo{.seam = "moe_dispatch",
                             .name = "grouped_mm",
                             .role = Role::vendor,
                             .fallback = "reference",
                             // CUTLASS's grouped GEMM (cutlass::gemm::GroupProblemShape), in the raw name
                             // CUPTI keeps when the demangler gives up on it, and in the demangled one.
                             .kernel_patterns = {"GroupProblemShape"},
                             .description = "dropless without a host sync: slots sorted by expert on the device, "
                                            "the three expert matmuls as LibTorch grouped GEMMs (at::_grouped_mm) "
                                            "over device offsets; CUDA-graph capturable",
                             .unavailable_reason = &grouped_mm_unavailable});
  rows.push_back(reference_row("ssm_scan", "Mamba-3 SISO chunked scan in LibTorch ops, fp32"));
  rows.push_back(BackendInfo{.seam = "ssm_scan",
                             .name = "fused_cuda",
                             .role = Role::experimental,
                             .fallback = "reference",
                             .kernel_patterns = {"ablate_ssm_scan_"},
                             .description = "kernels/cuda/ssm_scan.cu: chunked SSD-style scan, fp32 state; forward "
                                            "3 launches (chunk states, state passing, outputs with D skip and "
                                            "silu(z) gate), backward 5 (recomputes within a chunk); P, N "
                                            "multiples of 16 up to 128, chunk 16-64",
                             .unavailable_reason = &fused_cuda_unavailable});
  rows.push_back(reference_row("recurrent_scan", "RG-LRU linear recurrence, chunked, in LibTorch ops, fp32"));
  rows.push_back(reference_row("loss", "full logits + masked cross-entropy in LibTorch ops"));
  rows.push_back(BackendInfo{.seam = "loss",
                             .name = "chunked",
                             .role = Role::experimental,
                             .fallback = "reference",
                             .kernel_patterns = {},
                             .description = "head matmul + cross-entropy over row chunks; backward recomputes each "
                                            "chunk's logits, so the full logits never exist at once",
                             .unavailable_reason = &always_available});
  rows.push_back(BackendInfo{.seam = "loss",
                             .name = "fused_cuda",
                             .role = Role::experimental,
                             .fallback = "chunked",
                             .kernel_patterns = {"ablate_lce_rows", "ablate_lce_scale"},
                             .description = "kernels/cuda/linear_cross_entropy.cu: fused linear cross-entropy, row "
                                            "chunks of ~64 MiB of logits, online log-sum-exp and the logits "
                                            "gradient in one kernel, gradients computed in forward",
                             .unavailable_reason = &fused_cuda_unavailable});
  rows.push_back(reference_row("optimizer",
                               "AdamW in LibTorch ops, one parameter at a time; bias corrections from the step "
                               "tensor on the device (no host read, capturable)"));
  rows.push_back(BackendInfo{.seam = "optimizer",
                             .name = "fused_adamw",
                             .role = Role::vendor,
                             .fallback = "reference",
                             .kernel_patterns = {"FusedAdamMathFunctor"},
                             .description = "LibTorch's fused multi-tensor AdamW (at::_fused_adamw_, learning rate "
                                            "as a tensor): every parameter of a group in a few launches",
                             .unavailable_reason = &always_available});
  return rows;
}

std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : separator) + items[i];
  return out;
}

}  // namespace

const std::vector<std::string>& seams() {
  static const std::vector<std::string> kSeams = {"attention", "rope",           "residual_norm", "swiglu",   "moe_dispatch",
                                                  "ssm_scan",  "recurrent_scan", "loss",          "optimizer"};
  return kSeams;
}

const std::vector<BackendInfo>& catalog() {
  static const std::vector<BackendInfo> kRows = build_catalog();
  return kRows;
}

const BackendInfo* find_backend(const std::string& seam, const std::string& name) {
  for (const auto& row : catalog())
    if (row.seam == seam && row.name == name) return &row;
  return nullptr;
}

std::vector<std::string> backend_names(const std::string& seam) {
  std::vector<std::string> names;
  for (const auto& row : catalog())
    if (row.seam == seam) names.push_back(row.name);
  return names;
}

bool resolve(const std::string& seam, const std::string& requested, const DeviceInfo& dev, bool strict, Resolution& out,
             std::string& error) {
  out = Resolution{.seam = seam, .requested = requested, .chosen = "", .reason = ""};
  error.clear();
  const auto& all_seams = seams();
  if (std::find(all_seams.begin(), all_seams.end(), seam) == all_seams.end()) {
    error = fmt::format("unknown seam '{}': known seams are {}", seam, join(all_seams));
    return false;
  }
  const BackendInfo* row = find_backend(seam, requested);
  if (row == nullptr) {
    error = fmt::format("unknown backend '{}' for seam '{}': known backends are {}", requested, seam,
                        join(backend_names(seam)));
    return false;
  }
  std::vector<std::string> skipped;  // "name unavailable: why", in chain order
  for (size_t hops = 0; row != nullptr; ++hops) {
    const std::string why = row->unavailable_reason ? row->unavailable_reason(dev) : "";
    if (why.empty()) {
      out.chosen = row->name;
      out.reason = skipped.empty() ? "requested backend is available"
                                   : fmt::format("{}; fell back to {}", join(skipped, "; "), row->name);
      return true;
    }
    skipped.push_back(fmt::format("{} unavailable: {}", row->name, why));
    if (strict) {
      error = fmt::format("seam '{}': {} (strict mode does not fall back)", seam, skipped.back());
      return false;
    }
    if (row->fallback.empty() || hops > catalog().size()) break;  // end of chain (or a cycle: a catalog bug)
    const BackendInfo* next = find_backend(seam, row->fallback);
    if (next == nullptr) {
      error = fmt::format("seam '{}': backend '{}' falls back to '{}', which the catalog does not list", seam,
                          row->name, row->fallback);
      return false;
    }
    row = next;
  }
  error = fmt::format("seam '{}': no available backend: {}", seam, join(skipped, "; "));
  return false;
}

}  // namespace ablate::kernels
