// harness/train/optimizer.h: the run's AdamW (decoupled weight decay on every parameter of 2 or more
// dimensions: the matrices, and also Mamba's [H, N] biases b_B, b_C and the RG-LRU's [w, K] conv weight;
// 1-D parameters (norms, biases, dt_bias, D, Lambda) are not decayed; docs/model.md "Training
// defaults"), whose update goes through the `optimizer` seam (kernels/dispatch.h)
// so its backend is chosen, recorded, observed and gated like every other seam. All of its state lives
// beside the parameters: moments, one fp32 step count per parameter and the learning rate are tensors,
// so step() reads nothing on the host and a CUDA graph can capture it. set_lr() writes the rate before
// each step, outside any graph. Checkpoints store the state as named tensors (save/load).
// Tests: tests/harness/optimizer_test.cpp (clipping through the step), runner_test.cpp (checkpoint + resume bitwise on
// the CPU), tests/kernels/optimizer_test.cpp and parity_test.cpp (the seam's backends).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "spec/spec.h"
#include "kernels/dispatch.h"

namespace ablate::harness {

// Global-norm gradient clipping without a host sync and without a pass of its own over the gradients:
// `norm` is the norm of every gradient together (fp32, a device tensor until the step's one read);
// when max_norm > 0, `scale` is what the optimizer divides every gradient by as it reads it,
// max(1, (norm + 1e-6) / max_norm): 1 / torch's clip coefficient min(1, max_norm / (norm + 1e-6)).
// The gradients are not touched here (a separate multiply of them all took 0.85 ms of nam56r-small's
// 47 ms step on the H100, 2026-11-26, 6ca02c1). The norm is one multi-tensor op (_foreach_norm) a dtype, not
// three launches a parameter. Tests: tests/harness/optimizer_test.cpp.
struct GradNorm {
  torch::Tensor norm;   // 0-dim fp32
  torch::Tensor scale;  // 0-dim fp32, or undefined when max_norm <= 0 (measure only)
};
GradNorm measure_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

// What the step executor asks of the run's optimizer: AdamW (every rank the whole state) or
// ShardedAdamW (distributed.sharding = "optimizer": each rank its shard).
class ExpertParallel;

class TrainOptimizer {
 public:
  virtual ~TrainOptimizer() = default;
  virtual void set_lr(double lr) = 0;  // on the device, before step(); not inside a captured graph
  virtual void zero_grad() = 0;        // gradients to none (the next backward allocates them)
  // The norm of the whole gradient (every rank's part) and, when max_norm > 0, the clipping scale.
  virtual GradNorm grad_norm(double max_norm) = 0;
  // One update of every parameter, each gradient divided by grad_scale first when it is defined
  // (grad_norm's scale: clipping), and left divided.
  virtual void step(const torch::Tensor& grad_scale) = 0;
  virtual void save(torch::serialize::OutputArchive& archive) const = 0;
  // Throws std::invalid_argument when the archive does not hold this optimizer's state.
  virtual void load(torch::serialize::InputArchive& archive) = 0;
  // Bytes of this rank's AdamW moments.
  virtual int64_t state_bytes() const = 0;
};

class AdamW : public TrainOptimizer {
 public:
  AdamW(const std::vector<torch::Tensor>& params, const TrainSection& train, const kernels::Dispatcher& dispatcher);

  void set_lr(double lr) override;
  void zero_grad() override;
  GradNorm grad_norm(double max_norm) override;
  // Expert parallelism: the `experts` parameters (some of this optimizer's) hold this rank's rows of each
  // expert tensor, `group` the rest. grad_norm() is then the norm of the whole model's gradient, every
  // rank's experts counted once (summed over the group); save() gathers their moments whole (a
  // collective: every rank of the group calls it) and load() takes this rank's rows, so the checkpoint's
  // layout is AdamW's without expert parallelism.
  void partition_experts(const std::vector<torch::Tensor>& experts, const ExpertParallel& group);
  // Throws std::logic_error when a parameter has no gradient: every parameter of the model takes part
  // in every step, so a missing gradient is a bug.
  void step(const torch::Tensor& grad_scale) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t state_bytes() const override;

 private:
  struct Group {
    std::vector<torch::Tensor> params, exp_avgs, exp_avg_sqs, steps;
    kernels::AdamWHyper hyper;
  };
  bool is_partitioned(size_t group, size_t index) const;  // groups_[group].params[index] is an expert's

  const kernels::Dispatcher& dispatcher_;
  std::vector<torch::Tensor> params_;  // in the model's order (the norm's summation order)
  std::vector<torch::Tensor> replicated_, partitioned_;  // partition_experts(): params_ split (in order)
  std::vector<std::vector<bool>> partitioned_in_group_;  // groups_[g].params[i] is one of partitioned_
  const ExpertParallel* expert_group_ = nullptr;
  std::vector<Group> groups_;  // decayed matrices, then the rest
  torch::Tensor lr_;
};

class GradientSync;

// ZeRO-1 AdamW: the rank updates its shard of each flat bucket (harness/shard_layout.h) through the same
// `optimizer` seam, the shard's decayed and not decayed parameters as two runs a bucket, each run a
// tensor of the seam's lists with moments and a step count of its own. The step executor then starts
// every bucket's parameter all-gather (GradientSync::gather_parameters: after the update, or at the next
// step's start when the step is captured; the forward waits for each bucket just before it reads it).
// Under expert parallelism the expert weights are a second sync's buckets, sharded over the ranks that
// hold the same experts; their runs join the same seam calls. The gradient norm is the sum of the
// ranks' shard norms squared (one all-reduce of one value over the job). Checkpoints hold the state as
// AdamW's, per parameter (the experts' whole, every place's rows, as AdamW::partition_experts writes
// them): save() all-gathers each bucket's moments (a collective: every rank calls it) and load() takes
// the rank's slices, so a checkpoint of any sharding stage, world size or expert_parallel resumes any
// other.
// Tests: tests/harness/distributed_test.cpp (two ranks against none; checkpoint and resume, across
// stages; expert parallelism sharded against unsharded, and its checkpoints).
// ShardedAdamW's second part under expert parallelism: the expert weights' sync over the ranks holding
// the same experts (built at the same stage) and the expert groups their rows are spread over.
struct ShardedExperts {
  GradientSync* sync = nullptr;
  const ExpertParallel* group = nullptr;
};

class ShardedAdamW : public TrainOptimizer {
 public:
  // `sync` (over the job) and experts.sync were built sharded; the optimizer keeps references to them.
  // `params`: the model's parameters in its order, which names each one's state in a checkpoint as
  // AdamW names it.
  ShardedAdamW(const std::vector<torch::Tensor>& params, GradientSync& sync, const TrainSection& train,
               const kernels::Dispatcher& dispatcher, const ShardedExperts& experts = {});

  void set_lr(double lr) override;
  void zero_grad() override;
  GradNorm grad_norm(double max_norm) override;
  void step(const torch::Tensor& grad_scale) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  int64_t state_bytes() const override;

 private:
  struct Group {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    std::vector<torch::Tensor> rounded;  // bf16 buckets' groups: where each update is written rounded
    kernels::AdamWHyper hyper;
  };
  // One sync's buckets and their moments.
  struct Part {
    Part(GradientSync* s, const ExpertParallel* e) : sync(s), experts(e) {}
    GradientSync* sync;
    const ExpertParallel* experts;  // set for the expert weights: their rows are spread over it
    std::vector<torch::Tensor> exp_avg_shards, exp_avg_sq_shards;  // one per bucket, the shard's length
    std::vector<std::string> state_keys;  // sync->params()[i]'s AdamW checkpoint key (group g, index in it)
  };
  const kernels::Dispatcher& dispatcher_;
  std::vector<Part> parts_;    // the job-wide sync's, then the experts' (expert parallelism)
  // Views of the parts' shard buffers: decayed runs, then the rest, of fp32 buckets; the same two of bf16
  // buckets (a seam call's rounded copies are all or none of its parameters).
  std::vector<Group> groups_;
  torch::Tensor lr_;
};

}  // namespace ablate::harness
