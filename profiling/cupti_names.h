// profiling/cupti_names.h: CUPTI's raw names turned into the ones the PyTorch profiler (Kineto) writes,
// at conversion time in profiling/cupti_tracer.cpp, so the store, the catalog's kernel patterns, the
// family rules (profiling/attribution.h) and the trace all see what Perfetto and Holistic Trace Analysis
// users know. Plain C++ (no CUPTI): tests call these directly.
//   demangle_kernel_name("_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE")
//     -> "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
//   api_name_without_version("cudaLaunchKernel_v7000") -> "cudaLaunchKernel"
// Tests: tests/profiling/cupti_names_test.cpp (profiling_tests).
#pragma once
#include <string>
#include <string_view>

namespace ablate::profiling {

// CUPTI reports kernel names as the compiler emitted them: mangled C++ symbols ("_ZN..."), or plain
// names for extern "C" and JIT kernels (nvjet_*, sm90_xmma_*, cudnn_generated_*). A mangled name comes
// back demangled (abi::__cxa_demangle, as Kineto does: "void pytorch_flash::flash_fwd_kernel<...>(...)").
// Names nested deeper than libstdc++'s demangler goes (CUTLASS 3 GEMMs: each of the 182
// cutlass::device_kernel symbols of torch 2.11's libtorch_cuda.so) are demangled by libiberty without
// that limit where the build found it (deep_demangling_available(): libiberty-dev, installed by
// scripts/bootstrap.sh); Kineto leaves them mangled, and so does a build without libiberty. Anything
// else, a name that does not demangle, or one longer than 16 KiB comes back unchanged. Null gives "".
std::string demangle_kernel_name(const char* raw);
// Whether the build has libiberty's demangler for the names libstdc++'s gives up on.
bool deep_demangling_available();

// cuptiGetCallbackName gives a runtime API name with the version of its callback id
// ("cudaLaunchKernel_v7000", "cudaLaunchKernel_ptsz_v7000", "cudaSignalExternalSemaphoresAsync_v2_v11020")
// and some driver names with the symbol's version ("cuMemcpyHtoDAsync_v2"). Kineto and HTA use the API's
// name, which HTA matches exactly (cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync...): every
// trailing "_v<digits>" is dropped, the per-thread-stream suffixes "_ptsz" / "_ptds" stay (Kineto's
// cudaLaunchKernel_ptsz). A name that is only a suffix stays as it is.
std::string api_name_without_version(std::string_view cupti_name);

}  // namespace ablate::profiling
