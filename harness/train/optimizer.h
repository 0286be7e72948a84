// harness/train/optimizer.h: the run's AdamW (decoupled weight decay on every parameter of 2 or more
// dimensions: the matrices, and also Mamba's [H, N] biases b_B, b_C and the RG-LRU's [w, K] conv weight;
// 1-D parameters (norms, biases, dt_bias, D, Lambda) are not decayed; docs/model.md "Training
// defaults"), whose update goes through the `optimizer` seam (kernels/dispatch.h)
// so its backend is chosen, recorded, observed and gated like every other seam. All of its state lives
// beside the parameters: moments, one fp32 step count per parameter and the learning rate are tensors,
// so step() reads nothing on the host and a CUDA graph can capture it. set_lr() writes the rate before
// each step, outside any graph. Checkpoints store the state as named tensors (save/load).
// Tests: tests/harness/optimizer_test.cpp (clipping), runner_test.cpp (checkpoint + resume bitwise on
// the CPU), tests/kernels/optimizer_test.cpp and parity_test.cpp (the seam's backends).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "spec/spec.h"
#include "kernels/dispatch.h"

namespace ablate::harness {

// Global-norm gradient clipping in place, without a host sync: returns the norm of every gradient
// together (fp32, a device tensor until the step's one read) and, when max_norm > 0, scales every
// gradient by min(1, max_norm / (norm + 1e-6)). Multi-tensor ops (_foreach_norm, _foreach_mul_): a
// launch or two for all parameters, not three a parameter (on the H100 the per-parameter form took
// 2.6 ms of nam56r-small's step for 89 parameters). Tests: tests/harness/optimizer_test.cpp.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

class AdamW {
 public:
  AdamW(const std::vector<torch::Tensor>& params, const TrainSection& train, const kernels::Dispatcher& dispatcher);

  void set_lr(double lr);  // on the device, before step(); not inside a captured graph
  void zero_grad();        // gradients to none (the next backward allocates them)
  // One update of every parameter that has a gradient. Throws std::logic_error when a parameter has
  // none: every parameter of the model takes part in every step, so a missing gradient is a bug.
  void step();

  void save(torch::serialize::OutputArchive& archive) const;
  // Throws std::invalid_argument when the archive does not hold this optimizer's state.
  void load(torch::serialize::InputArchive& archive);

 private:
  struct Group {
    std::vector<torch::Tensor> params, exp_avgs, exp_avg_sqs, steps;
    kernels::AdamWHyper hyper;
  };
  const kernels::Dispatcher& dispatcher_;
  std::vector<Group> groups_;  // decayed matrices, then the rest
  torch::Tensor lr_;
};

}  // namespace ablate::harness
