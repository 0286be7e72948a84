// tests/harness/shard_layout_test.cpp: the data-parallel bucket layout (harness/shard_layout.cpp):
// unsharded buckets as the all-reduce path has them; sharded buckets aligned, padded to split evenly,
// decayed parameters first, and every element of every parameter owned by exactly one rank's runs.
// Run: build/tests/harness_tests --gtest_filter='ShardLayout*'
#include "harness/shard_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <vector>

namespace ablate::harness {
namespace {

std::vector<ParamShape> model_like() {
  // An embedding, norms and biases (1-D), matrices: odd sizes so that shard edges cut parameters.
  return {{1000, 2}, {7, 1}, {33, 2}, {5, 1}, {129, 2}, {3, 1}, {64, 2}, {1, 1}, {250, 2}};
}

TEST(ShardLayout, UnshardedBucketsAreTheParametersBackToBackInReverse) {
  const auto params = model_like();
  const auto layout = plan_buckets(params, /*bucket_bytes=*/4 * 300, /*sharded=*/false, 2, 1);
  ASSERT_FALSE(layout.sharded);
  // Reverse order, a bucket closed once it holds 300 fp32 or more: {250, 1, 64}, then the rest (the
  // embedding of 1000 closes the second).
  ASSERT_EQ(layout.buckets.size(), 2u);
  EXPECT_EQ(layout.buckets[0].params, (std::vector<size_t>{8, 7, 6}));
  EXPECT_EQ(layout.buckets[0].offsets, (std::vector<int64_t>{0, 250, 251}));
  EXPECT_EQ(layout.buckets[0].numel, 315);
  EXPECT_EQ(layout.buckets[1].params, (std::vector<size_t>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(layout.buckets[1].offsets, (std::vector<int64_t>{0, 3, 132, 137, 170, 177}));
  EXPECT_EQ(layout.padding, 0);
  EXPECT_EQ(layout.bucket_of[4], 1u);
  for (const auto& b : layout.buckets) {
    EXPECT_EQ(b.shard_numel, b.numel);
    EXPECT_TRUE(b.runs.empty());
  }
}

TEST(ShardLayout, DevicesNeverShareABucket) {
  const std::vector<ParamShape> params = {{10, 2, 0}, {10, 2, 1}, {10, 2, 1}};
  const auto layout = plan_buckets(params, 1 << 20, true, 2, 0);
  ASSERT_EQ(layout.buckets.size(), 2u);
  EXPECT_EQ(layout.buckets[0].params, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(layout.buckets[1].params, (std::vector<size_t>{0}));
}

// Every world from 1 to 5 and two bucket sizes: the ranks' runs cover each parameter element exactly
// once and nothing else but alignment gaps, with the decay flag of the parameter it belongs to.
TEST(ShardLayout, EveryElementIsOwnedByExactlyOneRank) {
  const auto params = model_like();
  for (int64_t world = 1; world <= 5; ++world)
    for (int64_t bucket_bytes : {int64_t{4 * 300}, int64_t{1} << 20}) {
      std::vector<ShardLayout> ranks;
      for (int64_t r = 0; r < world; ++r) ranks.push_back(plan_buckets(params, bucket_bytes, true, world, r));
      const auto& any = ranks.front();
      for (size_t b = 0; b < any.buckets.size(); ++b) {
        const auto& bucket = any.buckets[b];
        SCOPED_TRACE(testing::Message() << "world " << world << ", bucket " << b << " of " << bucket_bytes << " bytes");
        EXPECT_EQ(bucket.numel % (world * kShardAlign), 0);
        EXPECT_EQ(bucket.shard_numel * world, bucket.numel);
        // Decayed parameters first; every parameter aligned.
        bool seen_plain = false;
        for (size_t k = 0; k < bucket.params.size(); ++k) {
          EXPECT_EQ(bucket.offsets[k] % kShardAlign, 0);
          const bool decay = params[bucket.params[k]].dim >= 2;
          EXPECT_FALSE(seen_plain && decay) << "a decayed parameter after a plain one";
          seen_plain = seen_plain || !decay;
        }
        // Which parameter (and kind) each element of the bucket is, -1 for padding.
        std::vector<int64_t> owner(static_cast<size_t>(bucket.numel), -1);
        for (size_t k = 0; k < bucket.params.size(); ++k)
          for (int64_t e = 0; e < params[bucket.params[k]].numel; ++e)
            owner[static_cast<size_t>(bucket.offsets[k] + e)] = static_cast<int64_t>(bucket.params[k]);
        std::vector<int> covered(owner.size(), 0);
        for (int64_t r = 0; r < world; ++r) {
          const auto& mine = ranks[static_cast<size_t>(r)].buckets[b];
          EXPECT_LE(mine.runs.size(), 2u);
          for (const auto& run : mine.runs) {
            EXPECT_GE(run.offset, 0);
            EXPECT_LE(run.offset + run.length, mine.shard_numel);
            for (int64_t e = 0; e < run.length; ++e) {
              const auto at = static_cast<size_t>(r * mine.shard_numel + run.offset + e);
              ++covered[at];
              if (owner[at] >= 0) {
                EXPECT_EQ(params[static_cast<size_t>(owner[at])].dim >= 2, run.decay);
              }
            }
          }
        }
        for (size_t at = 0; at < owner.size(); ++at) {
          if (owner[at] >= 0) {
            EXPECT_EQ(covered[at], 1) << "element " << at << " of parameter " << owner[at];
          }
          EXPECT_LE(covered[at], 1) << "element " << at;
        }
      }
      int64_t used = 0, total = 0;
      for (const auto& p : params) used += p.numel;
      for (const auto& b : any.buckets) total += b.numel;
      EXPECT_EQ(any.padding, total - used);
    }
}

TEST(ShardLayout, RefusesImpossibleWorldsAndBuckets) {
  const auto params = model_like();
  EXPECT_THROW(plan_buckets(params, 1 << 20, true, 0, 0), std::invalid_argument);
  EXPECT_THROW(plan_buckets(params, 1 << 20, true, 2, 2), std::invalid_argument);
  EXPECT_THROW(plan_buckets(params, 1 << 20, true, 2, -1), std::invalid_argument);
  EXPECT_THROW(plan_buckets(params, 0, false, 1, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ablate::harness
