// harness/train/expert_parallel.h: expert parallelism over c10d (distributed.expert_parallel = N). The
// job's W ranks form W/N expert groups of N consecutive ranks (job rank g N + r is place r of group g),
// each holding one copy of every E layer's experts, E/N a place (model::ExpertPlacement), and N
// expert-data-parallel groups, the ranks at one place of every group (r, N + r, ...), which hold the same
// experts and average their gradients (a GradientSync over that group, divided by W: the loss is the
// job's mean; sharded over that group at the run's distributed.sharding stage). ExpertParallel is the kernels::ExpertExchange the moe_dispatch seam exchanges rows through:
// all-to-alls on the expert group's own communicator, started and later waited for in stream order
// (NCCL: the compute stream waits on NCCL's) or on the host (Gloo), and timed like every other collective (the step's all-to-alls, from the backend's timing).
// Tests: tests/harness/distributed_test.cpp (2 and 4 Gloo ranks: expert_parallel N trains as 1 does,
// sharded as unsharded; its checkpoints resume at any expert_parallel and sharding stage).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "harness/train/data_parallel.h"
#include "kernels/moe_dispatch/expert_exchange.h"
#include "model/blocks.h"

namespace ablate::harness {

class ExpertParallel : public kernels::ExpertExchange {
 public:
  // Every rank of `job` constructs it with the same `ranks` (which divides the job's size); the
  // subgroups' communicators are created here (a rendezvous through the job's store).
  // `chunks`: distributed.expert_exchange_chunks.
  ExpertParallel(const ProcessGroup& job, int64_t ranks, int64_t chunks = 1);
  ~ExpertParallel() override;  // where c10d::Work is complete

  int64_t ranks() const override { return experts_->world_size(); }
  int64_t rank() const override { return experts_->rank(); }
  int64_t chunks() const override { return chunks_; }
  void start_all_to_all(int64_t key, torch::Tensor& out, const torch::Tensor& in,
                        const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) const override;
  torch::Tensor wait_all_to_all(int64_t key) const override;

  model::ExpertPlacement placement() const { return {ranks(), rank()}; }
  // Sums a device tensor over this rank's expert group in place, waited for (the norm of the expert
  // weights' gradient is spread over the group).
  void sum_over_group(torch::Tensor& t) const;
  // Checkpoints hold every expert, as one process does. gather_experts: every place's rows of `mine` (this
  // rank's part of an expert tensor: its experts first), in place order, on the host; a collective over
  // the expert group. own_experts: this rank's rows of such a whole tensor, checked against `mine`'s shape
  // (std::invalid_argument: a checkpoint of another model).
  torch::Tensor gather_experts(const torch::Tensor& mine) const;
  torch::Tensor own_experts(const torch::Tensor& whole, const torch::Tensor& mine) const;
  // The ranks that hold this rank's experts, one in each expert group.
  ProcessGroup& expert_data_group() const { return *expert_data_; }

  void begin_step();  // the step's all-to-alls are counted from here
  // After the step's host sync: the step's all-to-alls by the backend's timing (NaN: not timed, or none).
  double all_to_all_ms() const;
  // Bytes this rank sent by all-to-all in the last step (its own rows included), forward and backward.
  int64_t all_to_all_bytes() const { return step_bytes_; }

 private:
  std::unique_ptr<ProcessGroup> experts_, expert_data_;
  int64_t chunks_ = 1;
  mutable std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  struct Started {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor out;
  };
  mutable std::unordered_map<int64_t, Started> started_;  // by key, until waited for
  mutable int64_t step_bytes_ = 0;
};

}  // namespace ablate::harness
