// kernels/ssm_scan/reference.h: the reference of seam `ssm_scan` in LibTorch ops (chunked, CPU and GPU;
// the registered backend) and its per-timestep form, the obviously-correct definition the parity tests
// compare against. Signatures and semantics: SsmScanFn in kernels/seams.h.
#pragma once
#include <torch/torch.h>

namespace ablate::kernels::reference {

// Mamba-3 SISO scan, chunked (MODEL.md "Chunked identity"), differentiable through autograd.
torch::Tensor ssm_scan_chunked(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& log_alpha, const torch::Tensor& beta,
                               const torch::Tensor& gamma, const torch::Tensor& D, int64_t chunk);
// The per-timestep recurrence of MODEL.md, literally (slow; tests only; any dtype incl. fp64).
torch::Tensor ssm_scan_stepwise(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& log_alpha, const torch::Tensor& beta,
                                const torch::Tensor& gamma, const torch::Tensor& D);

}  // namespace ablate::kernels::reference
