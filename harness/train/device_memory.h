// harness/train/device_memory.h: a run's GPU memory posture and what it used. train.memory_limit_gib caps
// LibTorch's CUDA caching allocator on the rank's device (setMemoryFraction), so a run answers "does this
// fit a GPU of N GiB?" on a larger one: an allocation past the cap fails out of memory as it would there.
// train.expandable_segments has the allocator map segments that grow in place (PyTorch's
// expandable_segments) instead of fixed-size ones, so memory freed between a step's phases is not lost to
// fragmentation; the segments the run ended with say whether it took (observed, not assumed). What the
// cap cannot hold is the memory beside the allocator (the CUDA context, NCCL's buffers, library
// handles): it is measured instead (DeviceMemoryUse) and recorded with the run, so a receipt says what
// the run needed of a GPU in all: the allocator's reserved peak plus that.
// Tests: tests/harness/device_memory_test.cpp (the GPU cases skip themselves without a GPU); the runner's
// side in tests/harness/runner_test.cpp.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ablate::harness {

// The posture for the life of the object, the allocator's defaults again when it ends (a process that
// runs several experiments, as the tests do, starts each as it was).
class DeviceMemoryPosture {
 public:
  // limit_gib 0: no cap. Throws std::invalid_argument for either setting on the CPU, or a cap above the
  // device's memory.
  DeviceMemoryPosture(double limit_gib, bool expandable_segments, const torch::Device& device);
  ~DeviceMemoryPosture();
  DeviceMemoryPosture(const DeviceMemoryPosture&) = delete;
  DeviceMemoryPosture& operator=(const DeviceMemoryPosture&) = delete;

  std::int64_t limit_bytes() const { return limit_bytes_; }  // 0: none
  // "" without a cap; else what a failure out of memory should say about it.
  std::string describe() const;

 private:
  int index_ = -1;
  double limit_gib_ = 0;
  std::int64_t limit_bytes_ = 0, device_bytes_ = 0;
  bool expandable_set_ = false;  // this posture turned expandable segments on
};

// The rank's device memory now (CUDA only).
struct DeviceMemoryUse {
  std::int64_t device_bytes = 0;             // the GPU's memory
  std::int64_t outside_allocator_bytes = 0;  // in use on the device and not reserved by this allocator
  bool expandable_segments = false;          // a segment the allocator holds on the device is expandable
};
DeviceMemoryUse device_memory_use(const torch::Device& device);

}  // namespace ablate::harness
