// kernels/reference/scans.h: reference implementations of the two recurrent seams in LibTorch ops
// (chunked, CPU and GPU), and their per-timestep forms, which are the obviously-correct definitions
// the parity tests compare against. Signatures and semantics: kernels/dispatch.h (SsmScanFn, RecurrentScanFn).
#pragma once
#include <torch/torch.h>

#include "kernels/dispatch.h"

namespace ablate::kernels::reference {

// Mamba-3 SISO scan, chunked (MODEL.md "Chunked identity"), differentiable through autograd; all of
// SsmScanInputs (z, h0, x_prev/k_prev optional), chunk = inputs.chunk.
SsmScanOutputs ssm_scan_chunked(const SsmScanInputs& inputs);
// The per-timestep recurrence of MODEL.md, literally (slow; tests only; any dtype incl. fp64); ignores chunk.
SsmScanOutputs ssm_scan_stepwise(const SsmScanInputs& inputs);

// RG-LRU linear recurrence h_t = a_t h_{t-1} + b_t, chunked and numerically stable for a in (0, 1].
// Default chunk 16: its decay matrix is per channel (B*T*W*chunk elements); on an H100 at B=8, T=2048,
// W=1024, chunk 16 ran forward+backward in 11 ms (1.9 GiB peak) against 31 ms (4.9 GiB) at 64.
torch::Tensor recurrent_scan_chunked(const torch::Tensor& a, const torch::Tensor& b, int64_t chunk = 16);
torch::Tensor recurrent_scan_stepwise(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace ablate::kernels::reference
