// kernels/catalog_rows.h: one function per seam returning that seam's catalog rows, each defined in the
// seam's folder (kernels/<seam>/catalog.cpp, plain C++) and called by catalog() (kernels/catalog.cpp)
// in seam order. Adding a backend is adding its row there and its function in its own file
// (kernels/registry.h); the registry refuses a function without a row and a built row without one.
#pragma once
#include <vector>

#include "kernels/catalog.h"
#include "kernels/seam_list.h"

namespace ablate::kernels::catalog_rows {

#define ABLATE_SEAM_ROWS(seam, Fn, lane_key) std::vector<BackendInfo> seam();
ABLATE_SEAMS(ABLATE_SEAM_ROWS)
#undef ABLATE_SEAM_ROWS

}  // namespace ablate::kernels::catalog_rows
