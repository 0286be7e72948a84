// kernels/moe_dispatch/expert_exchange.h: expert parallelism as the moe_dispatch seam sees it
// (distributed.expert_parallel = N; docs/architecture.md "Expert parallelism"). The N ranks of an expert
// group each hold E/N of every E layer's experts (place r: experts [r E/N, (r+1) E/N)) and see their own
// tokens; a token's rows travel to the ranks of its experts and back by all-to-alls: with variable splits
// (dropless), or with a fixed capacity of rows for each expert (under a capacity factor).
// ExpertExchange is that one collective; the harness implements it over c10d (harness/train/
// expert_parallel.h), and exchange_expert_rows() / exchange_capacity_rows() are the dispatches around it
// that the grouped backends run.
// Tests: tests/harness/distributed_test.cpp (expert_parallel 2 against 1 on Gloo ranks).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/moe_dispatch/expert_groups.h"

namespace ablate::kernels {

class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int64_t ranks() const = 0;  // N, the ranks sharing the experts
  virtual int64_t rank() const = 0;   // this rank's place among them
  // Rows of `in` to the ranks in order (the first in_splits[0] rows to place 0, ...); `out` receives
  // out_splits[q] rows from place q, in place order. Both contiguous, the same dtype and row shape.
  // Started, not waited for: `key` (one of new_key()'s, one exchange in flight a key) names it until
  // wait_all_to_all(key), which returns `out` once it may be read in stream order (NCCL: the compute
  // stream waits; Gloo: done). Every rank starts its exchanges in the same order.
  virtual void start_all_to_all(int64_t key, torch::Tensor& out, const torch::Tensor& in,
                                const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) const = 0;
  virtual torch::Tensor wait_all_to_all(int64_t key) const = 0;
  int64_t new_key() const { return next_key_++; }
  // Started and waited for.
  void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                  const std::vector<int64_t>& in_splits) const {
    const int64_t key = new_key();
    start_all_to_all(key, out, in, out_splits, in_splits);
    wait_all_to_all(key);
  }
  // distributed.expert_exchange_chunks: the chunks of its experts both exchanges pipeline
  // (expert_chunk_sizes); 1: one exchange each way.
  virtual int64_t chunks() const { return 1; }

 private:
  mutable int64_t next_key_ = 0;
};

// The rows of a local dispatch, in global expert order, through the experts of the whole group:
// rows [S, dp] (this rank's slots sorted by expert, S = sum of `load`), weight [S] their routing weights
// (fp32, differentiable), load [E] int64 slots per global expert. Sends each rank the rows of its
// experts, runs `local_experts(rows, weight, group_end, chunk)` on what arrives (rows in local expert order,
// group_end [E/N] int32 group ends), and brings the output rows back in the input's order: [S, dp].
// Reads the loads on the host once (the splits of an all-to-all are host values). Differentiable:
// the backward runs the same exchanges with the splits swapped, on every rank in the same order.
// Pipelined over the chunks of `chunk_experts` as exchange_capacity_rows below is, each chunk's splits
// from the same host counts (`local_experts(rows, weight, group_end, c)` on chunk c's experts).
using LocalExperts = std::function<torch::Tensor(const torch::Tensor& rows, const torch::Tensor& weight,
                                                 const torch::Tensor& group_end, int64_t chunk)>;
torch::Tensor exchange_expert_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                   const torch::Tensor& weight, const torch::Tensor& load,
                                   const std::vector<int64_t>& chunk_experts, const LocalExperts& local_experts);

// The same exchange under a capacity (model.moe.capacity_factor > 0, which keeps each expert's first
// `capacity` slots of a rank): every rank sends every expert exactly `capacity` rows, its kept slots then
// zero rows of weight 0, so each split is capacity x E/N rows: no host read, the same collectives every
// step (a CUDA graph can capture them), at the price of E x capacity rows a rank (~capacity_factor x its
// slots) on the wire. A fixed all-to-all of each expert's kept count (E/N numbers a place, first) lets
// the receiver pack the kept rows expert by expert on the device, so `local_experts` gets group ends
// over the kept rows only: rows past group_end's last entry are padding, whose output is never read
// (the grouped GEMMs leave them uncomputed). `groups` orders
// `rows` (the dispatch's ExpertGroups over the group's E experts), `rank` is rank_in_expert(groups) (the
// dispatch has it for its kept mask); a dropped slot's output row is zero (its weight is zero either
// way). Differentiable like exchange_expert_rows.
// Pipelined over the chunks of `chunk_experts` (expert_chunk_sizes: consecutive local experts, summing
// to E/N; {E/N} for one chunk): chunk c carries the rows of its experts only, so it arrives as groups
// of its own and `local_experts(rows, weight, group_end, c)` runs those experts whole (each expert's
// rows in one GEMM: the same sums as one chunk). Every chunk is started out at once, each chunk's
// experts run as soon as it has arrived and its output starts home at once: a chunk travels while
// another chunk's GEMMs run (Tutel's pipelined all-to-all), and only the first chunk out and the last
// one home wait alone. The backward goes the same way: the autograd engine runs the nodes of the chunk
// made last first, and every start precedes the wait that reads it.
torch::Tensor exchange_capacity_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                     const torch::Tensor& weight, const ExpertGroups& groups,
                                     const torch::Tensor& rank, int64_t capacity,
                                     const std::vector<int64_t>& chunk_experts, const LocalExperts& local_experts);

// E/N local experts in `chunks` consecutive chunks of near-equal size (the first E/N % chunks one
// larger); c10::Error unless 1 <= chunks <= local_experts.
std::vector<int64_t> expert_chunk_sizes(int64_t local_experts, int64_t chunks);

}  // namespace ablate::kernels
