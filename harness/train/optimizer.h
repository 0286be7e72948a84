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

class AdamW {
 public:
  AdamW(const std::vector<torch::Tensor>& params, const TrainSection& train, const kernels::Dispatcher& dispatcher);

  void set_lr(double lr);  // on the device, before step(); not inside a captured graph
  void zero_grad();        // gradients to none (the next backward allocates them)
  // One update of every parameter that has a gradient, each gradient divided by grad_scale first when
  // it is defined (measure_grad_norm's scale: clipping), and left divided. Throws std::logic_error when
  // a parameter has none: every parameter of the model takes part in every step, so a missing gradient
  // is a bug.
  void step(const torch::Tensor& grad_scale = {});

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
