// kernels/loss/loss_inputs.h: what the LibTorch-op backends of seam `loss` share (reference.cpp,
// chunked.cpp): the LossFn contract's shape checks and the target-logit gather.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels {

// logits[r, targets[r]] for logits [n, V] and int64 targets [n].
inline torch::Tensor target_logit(const torch::Tensor& logits, const torch::Tensor& targets) {
  return logits.gather(1, targets.unsqueeze(1)).squeeze(1);
}

inline void check_loss_inputs(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                       const torch::Tensor& mask) {
  TORCH_CHECK(hidden.dim() == 2 && head_weight.dim() == 2 && hidden.size(1) == head_weight.size(1),
              "loss: hidden must be [N, d] and head_weight [V, d]");
  TORCH_CHECK(
      targets.dim() == 1 && mask.dim() == 1 && targets.size(0) == hidden.size(0) && mask.size(0) == hidden.size(0),
      "loss: targets and mask must be [N]");
}

}  // namespace ablate::kernels
