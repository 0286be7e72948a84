// kernels/catalog.cpp: the kernel catalog (docs/architecture.md "Kernel catalog"): the seams, their rows
// (kernels/<seam>/catalog.cpp) checked once, the shared availability checks and the fallback
// resolution. Plain C++, as are the rows: `ablate catalog`, the spec parser and the profiler link this
// library (ablate_catalog) without LibTorch.
// Tests: tests/kernels/catalog_test.cpp (resolution, reasons, strict mode, unknown names) and
// tests/kernels/parity_test.cpp (every available row against the reference).
#include "kernels/catalog.h"

#include "kernels/catalog_rows.h"
#include "kernels/seam_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

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

const char* capture_name(Capture c) {
  switch (c) {
    case Capture::always:
      return "always";
    case Capture::never:
      return "never";
    case Capture::not_when_dropless:
      return "not_when_dropless";
  }
  return "unknown";
}

namespace availability {

std::string always(const DeviceInfo&) { return ""; }

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

std::string hopper_fp32_or_bf16(const DeviceInfo& dev) {
  if (auto r = needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  if (dev.dtype != "fp32" && dev.dtype != "bf16")
    return fmt::format("needs fp32 or bf16 inputs (run dtype is {})", dev.dtype);
  return "";
}

std::string dims_at_most(int64_t value, int64_t limit, const char* field, const char* unit, const char* seam) {
  if (value <= limit) return "";
  return fmt::format("{} = {} exceeds the {} {} this kernel takes (use {} = \"reference\" for this model)", field,
                     value, limit, unit, seam);
}

}  // namespace availability

std::string catalog_rows::fp8_gemms_unavailable(const DeviceInfo& dev, const char* replaced, int64_t alignment,
                                                const char* widths, const char* otherwise) {
  if (auto r = availability::hopper_fp32_or_bf16(dev); !r.empty()) return r;
  if (dev.dtype != "bf16")
    return fmt::format("needs train.dtype = \"bf16\": FP8 GEMMs replace {} (run dtype is {})", replaced, dev.dtype);
  if (alignment != 0 && alignment % 16 != 0)
    return fmt::format("{} must be multiples of 16 for FP8 GEMMs (their greatest common divisor is {}): choose such "
                       "widths, or use {} for this model",
                       widths, alignment, otherwise);
  return "";
}

namespace {

std::string join(const std::vector<std::string>& items, const std::string& separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : separator) + items[i];
  return out;
}

}  // namespace

const std::vector<std::string>& seams() {
#define ABLATE_SEAM_NAME(seam, Fn, lane_key) #seam,
  static const std::vector<std::string> kSeams = {ABLATE_SEAMS(ABLATE_SEAM_NAME)};
#undef ABLATE_SEAM_NAME
  return kSeams;
}

LaneKey lane_key_of(const std::string& seam) {
#define ABLATE_SEAM_LANE_KEY(s, Fn, lane_key) \
  if (seam == #s) return LaneKey::lane_key;
  ABLATE_SEAMS(ABLATE_SEAM_LANE_KEY)
#undef ABLATE_SEAM_LANE_KEY
  throw std::invalid_argument(fmt::format("unknown seam '{}': known seams are {}", seam, join(seams())));
}

BuildFacts this_build() {
  BuildFacts build;
#if defined(ABLATE_CATALOG_BUILT_WITH_LIBTORCH)
  build.libtorch = true;
#endif
#if defined(ABLATE_CATALOG_BUILT_WITH_CUDA)
  build.cuda = true;
#endif
  return build;
}

std::vector<BackendInfo> checked_seam_rows(const std::string& seam, std::vector<BackendInfo> rows,
                                           const BuildFacts& build) {
  const auto refuse = [&](const BackendInfo& row, const std::string& what) {
    throw std::logic_error(
        fmt::format("kernel catalog: kernels/{}/catalog.cpp, row '{}': {}", seam, row.name, what));
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    auto& row = rows[i];
    if (!row.seam.empty() && row.seam != seam) refuse(row, fmt::format("names seam '{}'", row.seam));
    row.seam = seam;
    if (row.name.empty()) refuse(row, "has no name");
    if (row.description.empty() || row.unavailable_reason == nullptr)
      refuse(row, "needs a description and an availability check");
    const bool reference = row.name == "reference";
    if (reference != (row.role == Role::reference) || reference != row.fallback.empty())
      refuse(row, "the reference (and only it) has role reference and no fallback");
    if (reference != (i == 0)) refuse(row, "the reference row comes first, and once");
    if ((row.capture == Capture::always) != row.capture_reason.empty())
      refuse(row, "a capture reason is given exactly when capture is not always");
    for (size_t j = 0; j < i; ++j)
      if (rows[j].name == row.name) refuse(row, "is listed twice");
    if (!build.libtorch)
      row.not_built = "built without LibTorch";
    else if (row.needs_nvcc && !build.cuda)
      row.not_built = "built without CUDA";
  }
  if (rows.empty()) throw std::logic_error(fmt::format("kernel catalog: seam '{}' has no reference row", seam));
  return rows;
}

const std::vector<BackendInfo>& catalog() {
  static const std::vector<BackendInfo> kRows = [] {
    std::vector<BackendInfo> all;
    const BuildFacts build = this_build();
#define ABLATE_SEAM_CATALOG(seam, Fn, lane_key)                                    \
  for (auto& row : checked_seam_rows(#seam, catalog_rows::seam(), build)) all.push_back(std::move(row));
    ABLATE_SEAMS(ABLATE_SEAM_CATALOG)
#undef ABLATE_SEAM_CATALOG
    return all;
  }();
  return kRows;
}

std::string why_unavailable(const BackendInfo& row, const DeviceInfo& dev) {
  if (!row.not_built.empty()) return row.not_built;
  return row.unavailable_reason ? row.unavailable_reason(dev) : "";
}

std::string why_not_capturable(const BackendInfo& row, bool dropless_moe) {
  switch (row.capture) {
    case Capture::always:
      return "";
    case Capture::never:
      return row.capture_reason;
    case Capture::not_when_dropless:
      return dropless_moe ? "in dropless MoE mode (model.moe.capacity_factor = 0) " + row.capture_reason : "";
  }
  return row.capture_reason;
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
    const std::string why = why_unavailable(*row, dev);
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
