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
  // Returns once `out` may be read in stream order (NCCL: the compute stream waits; Gloo: done).
  virtual void all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                          const std::vector<int64_t>& in_splits) const = 0;
};

// The rows of a local dispatch, in global expert order, through the experts of the whole group:
// rows [S, dp] (this rank's slots sorted by expert, S = sum of `load`), weight [S] their routing weights
// (fp32, differentiable), load [E] int64 slots per global expert. Sends each rank the rows of its
// experts, runs `local_experts(rows, weight, group_end)` on what arrives (rows in local expert order,
// group_end [E/N] int32 group ends), and brings the output rows back in the input's order: [S, dp].
// Reads the loads on the host once (the splits of an all-to-all are host values). Differentiable:
// the backward runs the same exchanges with the splits swapped, on every rank in the same order.
using LocalExperts = std::function<torch::Tensor(const torch::Tensor& rows, const torch::Tensor& weight,
                                                 const torch::Tensor& group_end)>;
torch::Tensor exchange_expert_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                   const torch::Tensor& weight, const torch::Tensor& load,
                                   const LocalExperts& local_experts);

// The same exchange under a capacity (model.moe.capacity_factor > 0, which keeps each expert's first
// `capacity` slots of a rank): every rank sends every expert exactly `capacity` rows, its kept slots then
// zero rows of weight 0, so each split is capacity x E/N rows and the groups arriving are fixed: no
// count exchange, no host read, the same collectives every step (a CUDA graph can capture them), at the
// price of E x capacity rows a rank (~capacity_factor x its slots) through the experts. `groups` orders
// `rows` (the dispatch's ExpertGroups over the group's E experts), `rank` is rank_in_expert(groups) (the
// dispatch has it for its kept mask); a dropped slot's output row is zero (its weight is zero either
// way). Differentiable like exchange_expert_rows.
torch::Tensor exchange_capacity_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                     const torch::Tensor& weight, const ExpertGroups& groups,
                                     const torch::Tensor& rank, int64_t capacity, const LocalExperts& local_experts);

}  // namespace ablate::kernels
