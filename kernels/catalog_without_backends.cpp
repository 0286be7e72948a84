// kernels/catalog_without_backends.cpp: the registered rows of a build without LibTorch (the
// ABLATE_WITH_TORCH=OFF build of receipts, reports and the CLI's readers): no backend is compiled,
// so the catalog is empty and a spec that names a backend is refused with the catalog's message.
#include <vector>

#include "kernels/catalog.h"

namespace ablate::kernels::detail {

std::vector<BackendInfo> registered_rows() { return {}; }

}  // namespace ablate::kernels::detail
