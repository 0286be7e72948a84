// profiling/nvtx.cpp: see nvtx.h.
#include "profiling/nvtx.h"

#if defined(ABLATE_HAVE_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace ablate::profiling {

#if defined(ABLATE_HAVE_NVTX)
void nvtx_push(const std::string& name) { nvtxRangePushA(name.c_str()); }
void nvtx_pop() { nvtxRangePop(); }
bool nvtx_compiled_in() { return true; }
#else
void nvtx_push(const std::string&) {}
void nvtx_pop() {}
bool nvtx_compiled_in() { return false; }
#endif

}  // namespace ablate::profiling
