// kernels/recurrent_scan/fused_cuda.h: the entry points of backend recurrent_scan/fused_cuda
// (kernels/recurrent_scan/fused_cuda.cu) for code that calls it beyond the seam: direct tests and the
// benchmark's layout knob. Defined only when nvcc compiled the .cu (ABLATE_HAVE_CUDA); CUDA tensors only.
#pragma once
#include "kernels/seams.h"

namespace ablate::kernels::fused {

// RecurrentScanFn: the RG-LRU gates and linear recurrence in chunked scans, forward and backward.
// gate_a, gate_x, u fp32 or bf16 (both gates are read in fp32 when their dtypes differ), lambda and h0
// fp32 or bf16; any B, T, W.
RecurrentScanOutputs recurrent_scan(const RecurrentScanInputs& inputs);

namespace tuning {
// For the benchmark and the tests: channels a thread of recurrent_scan owns (1, or 2 where W is even and
// the pointers are aligned; 0 restores the built-in rule). Not thread-safe.
void recurrent_scan_channels_per_thread(int vec);
}  // namespace tuning

}  // namespace ablate::kernels::fused
