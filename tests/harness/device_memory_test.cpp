// tests/harness/device_memory_test.cpp: train.memory_limit_gib's cap (harness/train/device_memory.h) on
// the GPU: an allocation past it fails out of memory while the cap lives and succeeds once it is lifted;
// a cap above the device or on the CPU is refused; what lies beside the allocator is measured. The
// runner's side (a run that does not fit fails with its receipt) is in runner_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include "harness/train/device_memory.h"

using namespace ablate;

namespace {
constexpr int64_t kGiB = int64_t{1} << 30;
}

TEST(DeviceMemoryLimit, OnTheCpuIsRefusedWithTheFix) {
  try {
    harness::DeviceMemoryLimit limit(40, torch::Device(torch::kCPU));
    ADD_FAILURE() << "a cap on the CPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("set train.memory_limit_gib = 0"), std::string::npos) << e.what();
  }
  const harness::DeviceMemoryLimit none(0, torch::Device(torch::kCPU));  // no cap: nothing to refuse
  EXPECT_EQ(none.limit_bytes(), 0);
  EXPECT_EQ(none.describe(), "");
}

TEST(DeviceMemoryLimit, CapsTheAllocatorUntilItEnds) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto before = harness::device_memory_use(cuda);
  ASSERT_GT(before.device_bytes, 4 * kGiB);
  EXPECT_GT(before.outside_allocator_bytes, 0) << "the CUDA context lives beside the allocator";
  EXPECT_THROW(harness::DeviceMemoryLimit(static_cast<double>(before.device_bytes) / kGiB + 1, cuda),
               std::invalid_argument);
  c10::cuda::CUDACachingAllocator::emptyCache();
  {
    const harness::DeviceMemoryLimit limit(1.0, cuda);
    EXPECT_EQ(limit.limit_bytes(), kGiB);
    EXPECT_NE(limit.describe().find("train.memory_limit_gib = 1"), std::string::npos) << limit.describe();
    const auto fits = torch::empty({kGiB / 4}, torch::TensorOptions(cuda).dtype(torch::kByte));
    EXPECT_THROW(torch::empty({2 * kGiB}, torch::TensorOptions(cuda).dtype(torch::kByte)), c10::OutOfMemoryError);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  // Lifted: the same request is served.
  const auto served = torch::empty({2 * kGiB}, torch::TensorOptions(cuda).dtype(torch::kByte));
  EXPECT_EQ(served.numel(), 2 * kGiB);
}
