// kernels/ssm_scan/reference.h: the reference of seam `ssm_scan` in LibTorch ops (chunked, CPU and GPU;
// the registered backend) and its per-timestep form, the obviously-correct definition the parity tests
// compare against. Signatures and semantics: SsmScanFn in kernels/seams.h.
#pragma once
#include <torch/torch.h>

#include "kernels/seams.h"

namespace ablate::kernels::reference {

// Mamba-3 SISO scan, chunked (docs/model.md "The chunked form"), differentiable through autograd; all of
// SsmScanInputs (z, h0, x_prev/k_prev optional), chunk = inputs.chunk.
SsmScanOutputs ssm_scan_chunked(const SsmScanInputs& inputs);
// The per-timestep recurrence of docs/model.md, literally (slow; tests only; any dtype incl. fp64); ignores chunk.
SsmScanOutputs ssm_scan_stepwise(const SsmScanInputs& inputs);

}  // namespace ablate::kernels::reference
