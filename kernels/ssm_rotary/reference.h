// kernels/ssm_rotary/reference.h: the reference of seam `ssm_rotary` (Mamba-3's data-dependent rotary
// keys and queries) in LibTorch ops, and the pieces every backend of the seam shares: the argument
// checks and the angle steps and phi0 of Phi (an inclusive cumulative sum over time: LibTorch's cumsum
// here, fused_cuda its own scan). Contract:
// SsmRotaryFn in kernels/seams.h.
#pragma once
#include <torch/torch.h>

#include "kernels/seams.h"

namespace ablate::kernels::reference {

struct SsmRotaryDims {
  int64_t B, T, H, N, S;
};
// Checks shapes (throws c10::Error naming the input, its expected and its actual shape).
SsmRotaryDims check_ssm_rotary_args(const SsmRotaryInputs& inputs);
// The angle steps [B,T,H,S] in dtype `dt`: delta * pi * tanh(theta) (contiguous).
torch::Tensor ssm_rotary_angle_steps(const SsmRotaryInputs& inputs, at::ScalarType dt);
// `phi` plus phi0 on every step when phi0 is given (continued sequences), else `phi`.
torch::Tensor with_initial_angle(const SsmRotaryInputs& inputs, const torch::Tensor& phi);
// Phi [B,T,H,S] in dtype `dt`: cumsum over T of the steps, plus phi0 when given.
torch::Tensor ssm_rotary_angles(const SsmRotaryInputs& inputs, at::ScalarType dt);
// Phi_{T-1} [B,H,S] from the angles (phi0, or zeros, when T == 0).
torch::Tensor ssm_rotary_last_angle(const SsmRotaryInputs& inputs, const torch::Tensor& phi, const SsmRotaryDims& d);

// The registered reference: q, k (in qk_dtype when set), phi_last in fp32 (fp64 for fp64 inputs),
// differentiable through autograd.
SsmRotaryOutputs ssm_rotary(const SsmRotaryInputs& inputs);

}  // namespace ablate::kernels::reference
