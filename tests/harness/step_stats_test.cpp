// tests/harness/step_stats_test.cpp: medians, MAD outliers, the LR schedule and MFU peaks against
// values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/step_stats.h"

using namespace ablate::harness;

TEST(StepStats, MedianAndMad) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
  // |x - 3| = 2 1 0 1 7 -> sorted 0 1 1 2 7 -> MAD 1
  EXPECT_DOUBLE_EQ(median_absolute_deviation({1, 2, 3, 4, 10}), 1.0);
}

TEST(StepStats, SlowOutliersUseMedianPlusThreeMad) {
  // median 10, MAD 1 -> limit 13: 13 is not an outlier, 13.5 and 40 are; a fast 1.0 is not flagged.
  const std::vector<double> v = {10, 9, 11, 10, 13, 13.5, 40, 1.0, 10, 9, 11};
  EXPECT_EQ(slow_outliers(v), (std::vector<size_t>{5, 6}));
  EXPECT_TRUE(slow_outliers({5, 5}).empty());
}

TEST(StepStats, LearningRateWarmupThenCosineToMinRatio) {
  // peak 1, warm-up 10 of 110 steps, min 0.1
  EXPECT_DOUBLE_EQ(learning_rate(0, 110, 10, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(9, 110, 10, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 110, 10, 1.0, 0.1), 1.0);
  EXPECT_NEAR(learning_rate(60, 110, 10, 1.0, 0.1), 0.55, 1e-12);  // half way: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(learning_rate(110, 110, 10, 1.0, 0.1), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate(500, 110, 10, 1.0, 0.1), 0.1, 1e-12);  // clamped past the end
  EXPECT_DOUBLE_EQ(learning_rate(0, 5, 0, 2.0, 0.5), 2.0);          // no warm-up
}

TEST(StepStats, MfuOnlyForKnownPeaks) {
  EXPECT_EQ(dense_bf16_peak_flops("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_EQ(dense_bf16_peak_flops("NVIDIA H200"), 989.4e12);
  EXPECT_EQ(dense_bf16_peak_flops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(dense_bf16_peak_flops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_FALSE(dense_bf16_peak_flops("NVIDIA H100 NVL").has_value());
  EXPECT_FALSE(dense_bf16_peak_flops("cpu").has_value());
  // 1e9 FLOPs/token at 98940 tokens/s on an H200 = 10 %
  EXPECT_NEAR(*model_flops_utilization(1e9, 98940, "NVIDIA H200"), 0.1, 1e-12);
  EXPECT_FALSE(model_flops_utilization(1e9, 1e5, "Tesla T4").has_value());
}

// flops-v2: FP8 GEMMs' FLOPs against the FP8 peak, the rest against the bf16 one.
TEST(StepStats, MfuDividesEachPrecisionsFlopsByItsOwnPeak) {
  EXPECT_EQ(dense_fp8_peak_flops("NVIDIA H100 80GB HBM3"), 1978.9e12);
  EXPECT_EQ(dense_fp8_peak_flops("NVIDIA H200"), 1978.9e12);
  EXPECT_FALSE(dense_fp8_peak_flops("NVIDIA A100-SXM4-80GB").has_value());  // no FP8 tensor cores
  // 6e8 bf16 + 4e8 FP8 FLOPs/token at 1e5 tokens/s against peaks of 1e15 and 2e15: 6 % of the bf16
  // peak's time + 2 % of the FP8 one's.
  EXPECT_NEAR(*flops_utilization(6e8, 4e8, 1e5, 1e15, 2e15), 0.06 + 0.02, 1e-12);
  // Without FP8 FLOPs it is flops-v1's MFU, whatever the FP8 peak.
  EXPECT_NEAR(*flops_utilization(1e9, 0.0, 98940, 989.4e12, std::nullopt), 0.1, 1e-12);
  // FP8 FLOPs on a GPU without a known FP8 peak: unknown, never divided by the bf16 peak.
  EXPECT_FALSE(flops_utilization(6e8, 4e8, 98940, 989.4e12, std::nullopt).has_value());
}
