// kernels/numerics.h: small numeric helpers that the reference backends and the model share: the
// dtype arithmetic happens in, an autocast exclusion for code whose contract is fp32 arithmetic, and
// the adjacent-pair rotation used by the rope seam and by Mamba-3's Rot(Phi).
// Tests: kernels_tests (parity of the rope reference) and model_tests.
#pragma once
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

namespace ablate::kernels {

// The dtype arithmetic happens in: fp32 for fp32/bf16/fp16 inputs, fp64 for fp64 inputs (tests).
inline at::ScalarType compute_dtype(const torch::Tensor& t) { return at::promote_types(t.scalar_type(), at::kFloat); }
// The same over a seam's inputs (undefined ones skipped) for a reference whose contract is fp32
// arithmetic: fp32, or fp64 when an input is fp64; any other promotion is refused, naming the seam.
at::ScalarType compute_dtype(const char* seam, std::initializer_list<const torch::Tensor*> inputs);

// While alive, autocast is off on every device: for code whose contract is fp32 arithmetic (matmuls
// under autocast would silently run in bf16). Restores the previous state on destruction.
class NoAutocastScope {
 public:
  NoAutocastScope() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// Rotates adjacent pairs (x[2i], x[2i+1]) of the last dim by angles whose cos/sin are given with the
// last dim halved (broadcast against x's leading dims): (a, b) -> (a cos - b sin, a sin + b cos).
// Arithmetic in compute_dtype(x); the result has x's dtype. Used by the rope seam and Mamba-3's Rot(Phi).
torch::Tensor rotate_adjacent_pairs(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace ablate::kernels
