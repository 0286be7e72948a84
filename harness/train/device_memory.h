// harness/train/device_memory.h: a run's GPU memory. train.memory_limit_gib caps LibTorch's CUDA caching
// allocator on the rank's device (setMemoryFraction), so a run answers "does this fit a GPU of N GiB?" on
// a larger one: an allocation past the cap fails out of memory as it would there. What the cap cannot
// hold is the memory beside the allocator (the CUDA context, NCCL's buffers, library handles): it is
// measured instead (DeviceMemoryUse::outside_allocator_bytes) and recorded with the run, so a receipt
// says what the run needed of a GPU in all: the allocator's reserved peak plus that.
// Tests: tests/harness/device_memory_test.cpp (the GPU cases skip themselves without a GPU).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ablate::harness {

// The cap for the life of the object: the device's whole memory again when it ends (a process that
// runs several experiments, as the tests do, starts each uncapped).
class DeviceMemoryLimit {
 public:
  // limit_gib 0: no cap. Throws std::invalid_argument for a cap on the CPU or above the device's memory.
  DeviceMemoryLimit(double limit_gib, const torch::Device& device);
  ~DeviceMemoryLimit();
  DeviceMemoryLimit(const DeviceMemoryLimit&) = delete;
  DeviceMemoryLimit& operator=(const DeviceMemoryLimit&) = delete;

  std::int64_t limit_bytes() const { return limit_bytes_; }  // 0: none
  // "" without a cap; else what a failure out of memory should say about it.
  std::string describe() const;

 private:
  int index_ = -1;
  double limit_gib_ = 0;
  std::int64_t limit_bytes_ = 0, device_bytes_ = 0;
};

// The rank's device memory now (CUDA only).
struct DeviceMemoryUse {
  std::int64_t device_bytes = 0;             // the GPU's memory
  std::int64_t outside_allocator_bytes = 0;  // in use on the device and not reserved by this allocator
};
DeviceMemoryUse device_memory_use(const torch::Device& device);

}  // namespace ablate::harness
