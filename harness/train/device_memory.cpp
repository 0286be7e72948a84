// harness/train/device_memory.cpp: see device_memory.h.
#include "harness/train/device_memory.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace ablate::harness {
namespace {
constexpr double kGiB = 1024.0 * 1024 * 1024;

int cuda_index(const torch::Device& device) { return device.index() < 0 ? 0 : device.index(); }

// The caching allocator is made with CUDA's lazy initialisation (the first tensor on the device); before
// that it refuses a fraction or its statistics for the device.
void initialise_cuda() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }

void refuse_on_the_cpu(const std::string& setting) {
  throw std::invalid_argument(fmt::format(
      "{} sets a GPU's memory and this run is on the CPU (train.device = \"auto\" found no CUDA device): run it on "
      "a GPU machine or leave it out",
      setting));
}
}  // namespace

DeviceMemoryPosture::DeviceMemoryPosture(double limit_gib, bool expandable_segments, const torch::Device& device) {
  if (limit_gib <= 0 && !expandable_segments) return;
  if (!device.is_cuda())
    refuse_on_the_cpu(limit_gib > 0 ? fmt::format("train.memory_limit_gib = {}", limit_gib)
                                    : std::string("train.expandable_segments = true"));
  index_ = cuda_index(device);
  initialise_cuda();
  if (expandable_segments && !c10::CachingAllocator::AcceleratorAllocatorConfig::use_expandable_segments()) {
    // Read as each new segment is made: set before the run's first allocation.
    c10::CachingAllocator::setAllocatorSettings("expandable_segments:True");
    expandable_set_ = true;
  }
  if (limit_gib <= 0) return;
  limit_gib_ = limit_gib;
  const auto* props = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index_));
  device_bytes_ = static_cast<std::int64_t>(props->totalGlobalMem);
  limit_bytes_ = static_cast<std::int64_t>(limit_gib * kGiB);
  if (limit_bytes_ > device_bytes_)
    throw std::invalid_argument(fmt::format(
        "train.memory_limit_gib = {} is more than the {:.2f} GiB of this {} (cuda:{}): a cap stands in for a "
        "smaller GPU; lower it or set train.memory_limit_gib = 0",
        limit_gib, device_bytes_ / kGiB, props->name, index_));
  // Blocks cached from earlier work in this process would serve allocations without meeting the cap
  // (it is checked when the allocator asks the device for more): given back first.
  c10::cuda::CUDACachingAllocator::emptyCache();
  // The allocator compares what it has reserved, plus the request, with fraction x the device's memory.
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(limit_bytes_) / device_bytes_,
                                                     static_cast<c10::DeviceIndex>(index_));
}

DeviceMemoryPosture::~DeviceMemoryPosture() {
  if (limit_bytes_ > 0) c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, static_cast<c10::DeviceIndex>(index_));
  if (expandable_set_) c10::CachingAllocator::setAllocatorSettings("expandable_segments:False");
}

std::string DeviceMemoryPosture::describe() const {
  if (limit_bytes_ == 0) return "";
  return fmt::format("under train.memory_limit_gib = {} (the allocator capped at {:.2f} GiB of the device's {:.2f})",
                     limit_gib_, limit_bytes_ / kGiB, device_bytes_ / kGiB);
}

DeviceMemoryUse device_memory_use(const torch::Device& device) {
  DeviceMemoryUse use;
  if (!device.is_cuda()) return use;
  const auto index = static_cast<c10::DeviceIndex>(cuda_index(device));
  initialise_cuda();
  c10::cuda::CUDAGuard guard(index);
  size_t free_bytes = 0, total_bytes = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  use.device_bytes = static_cast<std::int64_t>(total_bytes);
  const auto in_use = static_cast<std::int64_t>(total_bytes - free_bytes);
  use.outside_allocator_bytes = std::max<std::int64_t>(0, in_use - stats.reserved_bytes[0].current);
  for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot({0, 0}, /*include_traces=*/false).segments)
    if (segment.device == index && segment.is_expandable) use.expandable_segments = true;
  return use;
}

}  // namespace ablate::harness
