// profiling/nvtx.h: NVTX ranges for Nsight Systems, from the CUDA toolkit's header-only nvtx3. Without
// a tool attached an NVTX call is a load and a branch; without nvtx3 at build time these do nothing.
// Used by profiling/scope_recorder.cpp and the runner's step/phase ranges.
#pragma once
#include <string>

namespace ablate::profiling {

void nvtx_push(const std::string& name);
void nvtx_pop();
bool nvtx_compiled_in();

// An NVTX range for the lifetime of the object.
class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name) { nvtx_push(name); }
  ~NvtxRange() { nvtx_pop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace ablate::profiling
