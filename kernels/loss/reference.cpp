// kernels/loss/reference.cpp: the reference backend of seam `loss` (LM head + masked mean
// cross-entropy, LossFn in kernels/seams.h): the full [N, V] logits, then log-sum-exp in fp32 (fp64 for
// fp64 inputs). Tests: kernels_tests (parity_test.cpp rows with masked rows).
#include "kernels/loss/loss_inputs.h"
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

torch::Tensor loss_full_logits(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                               const torch::Tensor& targets, const torch::Tensor& mask) {
  check_loss_inputs(hidden, head_weight, targets, mask);
  const auto logits = torch::matmul(hidden, head_weight.t());
  const auto logits_c = logits.to(compute_dtype(logits));
  const auto ce = torch::logsumexp(logits_c, 1) - target_logit(logits_c, targets.to(torch::kLong));
  const auto mask_f = mask.to(ce.scalar_type());
  return (ce * mask_f).sum() / mask_f.sum().clamp_min(1);
}

}  // namespace

ABLATE_REGISTER_BACKENDS(loss_reference) {
  registry.loss("reference", &loss_full_logits);
}

}  // namespace ablate::kernels
