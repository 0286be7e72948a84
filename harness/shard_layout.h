// harness/shard_layout.h: how data parallel lays the parameters out in flat fp32 buckets, and, under
// distributed.sharding (ZeRO-1 and ZeRO-2), which contiguous slice of each bucket a rank owns.
// Plain arithmetic over parameter shapes (no LibTorch, no process group), so every layout rule is
// tested on its own: tests/harness/shard_layout_test.cpp.
//
// Buckets: the parameters in reverse order (backward reaches the last ones first), a bucket closed once
// it holds bucket_bytes of fp32 or the next parameter is on another device. Unsharded, a bucket is the
// parameters back to back (what the all-reduce path has always used). Sharded, each bucket puts its
// decayed parameters (2 or more dimensions) before the rest, starts every parameter at a multiple of
// kShardAlign elements (64 bytes: the fused optimizer's 16-byte vector path stays on), and pads its
// length to a multiple of world x kShardAlign, so that it splits into `world` equal shards; rank r owns
// [r S, (r + 1) S). A shard may cut through a parameter: the optimizer sees the rank's part of each
// bucket as at most two runs (decayed, not decayed), padding left out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ablate::harness {

// distributed.sharding: what each rank keeps of the whole. optimizer (ZeRO-1): the AdamW moments of its
// shard; gradients (ZeRO-2): also only its shard of the reduced gradients (the full-size gradient
// buckets are transient, one reduce-scatter in flight); full (ZeRO-3): also only its shard of the fp32
// parameters, each unit's whole parameters gathered just before use and freed after (one bucket a unit).
enum class ShardingStage { none, optimizer, gradients, full };
// Throws std::invalid_argument for a name the spec does not allow (the spec checked it already).
ShardingStage sharding_stage(const std::string& name);

// A parameter as the layout sees it.
struct ParamShape {
  int64_t numel = 0;
  int64_t dim = 0;     // decayed when >= 2 (harness/train/optimizer.h)
  int64_t device = 0;  // any id: parameters on different devices never share a bucket
  int64_t group = 0;   // any id: parameters of different groups (full: units) never share a bucket
};

// Elements a sharded bucket aligns every parameter and every shard to.
inline constexpr int64_t kShardAlign = 16;

// A contiguous part of a rank's shard of one bucket, every element in it decayed or none.
struct ShardRun {
  int64_t offset = 0;  // in the rank's shard (0 .. shard_numel)
  int64_t length = 0;
  bool decay = false;
};

struct ShardBucket {
  std::vector<size_t> params;    // indices into the parameter list, in the bucket's order
  std::vector<int64_t> offsets;  // params[k] starts at offsets[k] in the bucket
  int64_t numel = 0;             // the bucket's length (padded when sharded)
  int64_t shard_numel = 0;       // numel / world when sharded, else numel
  std::vector<ShardRun> runs;    // the planning rank's shard as runs; empty when unsharded
};

struct ShardLayout {
  bool sharded = false;
  int64_t world = 1, rank = 0;
  std::vector<ShardBucket> buckets;
  std::vector<size_t> bucket_of;   // parameter index -> bucket
  std::vector<int64_t> offset_of;  // parameter index -> its start in that bucket
  int64_t padding = 0;            // elements of all buckets that belong to no parameter
};

// The layout of `params` for data parallel over `world` ranks, seen from `rank`. Throws
// std::invalid_argument when world < 1, rank is outside [0, world) or bucket_bytes < 1.
ShardLayout plan_buckets(const std::vector<ParamShape>& params, int64_t bucket_bytes, bool sharded, int64_t world,
                         int64_t rank);

}  // namespace ablate::harness
