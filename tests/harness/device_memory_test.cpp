// tests/harness/device_memory_test.cpp: the GPU memory posture (harness/train/device_memory.h): under
// train.memory_limit_gib's cap an allocation past it fails out of memory, and succeeds once the posture
// ends; a cap above the device or either setting on the CPU is refused; train.expandable_segments makes
// the allocator's new segments expandable while it lasts, as the segments themselves say; what lies
// beside the allocator is measured. The runner's side (a run that does not fit fails with its receipt)
// is in runner_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/cuda/CUDACachingAllocator.h>

#include "harness/train/device_memory.h"

using namespace ablate;

namespace {
constexpr int64_t kGiB = int64_t{1} << 30;
const auto kBytes = torch::TensorOptions(torch::kCUDA).dtype(torch::kByte);
}  // namespace

TEST(DeviceMemoryPosture, OnTheCpuIsRefusedWithTheFix) {
  for (const auto& [limit, expandable, key] :
       {std::tuple{40.0, false, "train.memory_limit_gib = 40"}, std::tuple{0.0, true, "train.expandable_segments"}}) {
    try {
      harness::DeviceMemoryPosture posture(limit, expandable, torch::Device(torch::kCPU));
      ADD_FAILURE() << key << " on the CPU was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("leave it out"), std::string::npos) << e.what();
    }
  }
  const harness::DeviceMemoryPosture none(0, false, torch::Device(torch::kCPU));  // nothing asked: nothing to refuse
  EXPECT_EQ(none.limit_bytes(), 0);
  EXPECT_EQ(none.describe(), "");
}

TEST(DeviceMemoryPosture, CapsTheAllocatorUntilItEnds) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  const auto before = harness::device_memory_use(cuda);
  ASSERT_GT(before.device_bytes, 4 * kGiB);
  EXPECT_GT(before.outside_allocator_bytes, 0) << "the CUDA context lives beside the allocator";
  EXPECT_THROW(harness::DeviceMemoryPosture(static_cast<double>(before.device_bytes) / kGiB + 1, false, cuda),
               std::invalid_argument);
  {
    const harness::DeviceMemoryPosture posture(1.0, false, cuda);
    EXPECT_EQ(posture.limit_bytes(), kGiB);
    EXPECT_NE(posture.describe().find("train.memory_limit_gib = 1 "), std::string::npos) << posture.describe();
    const auto fits = torch::empty({kGiB / 4}, kBytes);
    EXPECT_THROW(torch::empty({2 * kGiB}, kBytes), c10::OutOfMemoryError);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  // Lifted: the same request is served.
  const auto served = torch::empty({2 * kGiB}, kBytes);
  EXPECT_EQ(served.numel(), 2 * kGiB);
}

TEST(DeviceMemoryPosture, ExpandableSegmentsWhileItLasts) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  c10::cuda::CUDACachingAllocator::emptyCache();
  {
    const harness::DeviceMemoryPosture posture(0, true, cuda);
    const auto held = torch::empty({64 << 20}, kBytes);
    EXPECT_TRUE(harness::device_memory_use(cuda).expandable_segments);
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  const auto held = torch::empty({64 << 20}, kBytes);
  EXPECT_FALSE(harness::device_memory_use(cuda).expandable_segments) << "the default came back with the posture's end";
}
