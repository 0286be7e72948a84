// harness/shard_layout.cpp: see shard_layout.h. Tests: tests/harness/shard_layout_test.cpp.
#include "harness/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace ablate::harness {
namespace {

int64_t round_up(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

// Places a closed bucket's parameters: back to back, or decayed first and aligned, padded to split evenly.
ShardBucket place(const std::vector<ParamShape>& params, std::vector<size_t> members, bool sharded, int64_t world) {
  ShardBucket b;
  if (sharded)
    std::stable_partition(members.begin(), members.end(), [&](size_t i) { return params[i].dim >= 2; });
  int64_t offset = 0;
  for (size_t i : members) {
    if (sharded) offset = round_up(offset, kShardAlign);
    b.params.push_back(i);
    b.offsets.push_back(offset);
    offset += params[i].numel;
  }
  b.numel = sharded ? round_up(std::max<int64_t>(offset, 1), world * kShardAlign) : offset;
  b.shard_numel = sharded ? b.numel / world : b.numel;
  return b;
}

// The rank's shard of `b` as runs of decayed / not decayed elements (padding between or after
// parameters belongs to no run; adjacent parts of one kind join).
std::vector<ShardRun> runs_of(const std::vector<ParamShape>& params, const ShardBucket& b, int64_t rank) {
  const int64_t lo = rank * b.shard_numel, hi = lo + b.shard_numel;
  std::vector<ShardRun> runs;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const int64_t start = std::max(lo, b.offsets[k]), end = std::min(hi, b.offsets[k] + params[b.params[k]].numel);
    if (start >= end) continue;
    const bool decay = params[b.params[k]].dim >= 2;
    ShardRun run{start - lo, end - start, decay};
    if (!runs.empty() && runs.back().decay == decay) {
      // Alignment padding between two parameters of one kind joins the run: it is zero in the
      // gradient and the parameter buffers, so the update leaves it zero.
      runs.back().length = run.offset + run.length - runs.back().offset;
    } else {
      runs.push_back(run);
    }
  }
  return runs;
}

}  // namespace

ShardingStage sharding_stage(const std::string& name) {
  if (name == "none") return ShardingStage::none;
  if (name == "optimizer") return ShardingStage::optimizer;
  if (name == "gradients") return ShardingStage::gradients;
  if (name == "full") return ShardingStage::full;
  throw std::invalid_argument(fmt::format("distributed.sharding = \"{}\" is not a sharding stage", name));
}

ShardLayout plan_buckets(const std::vector<ParamShape>& params, int64_t bucket_bytes, bool sharded, int64_t world,
                         int64_t rank) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument(fmt::format("shard layout: rank {} of a world of {}", rank, world));
  if (bucket_bytes < 1) throw std::invalid_argument(fmt::format("shard layout: bucket of {} bytes", bucket_bytes));
  ShardLayout layout;
  layout.sharded = sharded;
  layout.world = world;
  layout.rank = rank;
  layout.bucket_of.assign(params.size(), 0);
  layout.offset_of.assign(params.size(), 0);
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  auto close = [&] {
    if (current.empty()) return;
    for (size_t i : current) layout.bucket_of[i] = layout.buckets.size();
    layout.buckets.push_back(place(params, current, sharded, world));
    current.clear();
    current_bytes = 0;
  };
  for (size_t n = params.size(); n-- > 0;) {
    if (!current.empty() &&
        (params[n].device != params[current.front()].device || params[n].group != params[current.front()].group))
      close();
    current.push_back(n);
    current_bytes += params[n].numel * 4;
    if (current_bytes >= bucket_bytes) close();
  }
  close();
  for (auto& b : layout.buckets) {
    for (size_t k = 0; k < b.params.size(); ++k) layout.offset_of[b.params[k]] = b.offsets[k];
    int64_t used = 0;
    for (size_t i : b.params) used += params[i].numel;
    layout.padding += b.numel - used;
    if (sharded) b.runs = runs_of(params, b, rank);
  }
  return layout;
}

}  // namespace ablate::harness
