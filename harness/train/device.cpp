// harness/train/device.cpp: the live device as the catalog sees it, and the device half of the
// environment fingerprint (GPU model/count, CUDA runtime, cuDNN, LibTorch, NCCL).
#include "harness/train/device.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/csrc/cuda/nccl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "harness/train/runner.h"

namespace ablate::harness {

kernels::DeviceInfo live_device_info() {
  kernels::DeviceInfo d;
  d.cuda = torch::cuda::is_available();
  if (d.cuda) {
    const auto* p = at::cuda::getCurrentDeviceProperties();
    d.sm_major = p->major;
    d.sm_minor = p->minor;
  }
  return d;
}

Fingerprint device_fingerprint() {
  Fingerprint f;
  f["libtorch"] = TORCH_VERSION;
  f["cuda_available"] = torch::cuda::is_available() ? "true" : "false";
  f["gpu_count"] = std::to_string(torch::cuda::device_count());
  if (!torch::cuda::is_available()) {
    f["gpu_model"] = "none";
    return f;
  }
  const auto* p = at::cuda::getCurrentDeviceProperties();
  f["gpu_model"] = p->name;
  f["gpu_compute_capability"] = std::to_string(p->major) + "." + std::to_string(p->minor);
  f["gpu_memory_bytes"] = std::to_string(p->totalGlobalMem);
  f["gpu_sm_count"] = std::to_string(p->multiProcessorCount);
  const long rt = at::detail::getCUDAHooks().versionCUDART();  // e.g. 13000
  f["cuda_runtime"] = std::to_string(rt / 1000) + "." + std::to_string((rt % 1000) / 10);
  f["cudnn"] = std::to_string(at::detail::getCUDAHooks().versionCuDNN());
  const uint64_t nccl = torch::cuda::nccl::version();  // major << 32 | minor << 16 | patch
  f["nccl"] = std::to_string(nccl >> 32) + "." + std::to_string((nccl >> 16) & 0xffff) + "." + std::to_string(nccl & 0xffff);
  return f;
}

}  // namespace ablate::harness
