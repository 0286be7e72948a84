// kernels/catalog_rows.h: one function per seam returning that seam's catalog rows, each defined in the
// seam's folder (kernels/<seam>/catalog.cpp, plain C++) and called by catalog() (kernels/catalog.cpp)
// in seam order. Adding a backend is adding its row there and its function in its own file
// (kernels/registry.h); the registry refuses a function without a row and a built row without one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/seam_list.h"

namespace ablate::kernels::catalog_rows {

#define ABLATE_SEAM_ROWS(seam, Fn, lane_key) std::vector<BackendInfo> seam();
ABLATE_SEAMS(ABLATE_SEAM_ROWS)
#undef ABLATE_SEAM_ROWS

// The availability of FP8 GEMMs (at::_scaled_mm, at::_scaled_grouped_mm) in place of a bf16 run's GEMMs
// (`replaced`): a bf16 run on Hopper (sm_90a kernels and quantisation passes), whose GEMM widths
// (`widths`, their greatest common divisor `alignment`, 0 when unknown) are multiples of 16, since FP8
// operands are read in 16-byte units; otherwise the reason, and `otherwise` as the way to run the model.
std::string fp8_gemms_unavailable(const DeviceInfo& dev, const char* replaced, int64_t alignment, const char* widths,
                                  const char* otherwise);

}  // namespace ablate::kernels::catalog_rows
