// kernels/copy_blocks_bench.cpp: copy_blocks (kernels/copy_blocks.h) against the LibTorch pass it
// replaces in the data-parallel sync's gradient hook: at::div_out of a bf16 expert-weight gradient into
// its fp32 bucket slot, divided by 2 ranks, at nam56r-large's E layer under EP 2 (8 experts a rank, f
// 3584, d 4096). `w1` is the gate projection's gradient, a strided view of the stacked [8, 2f, d]
// gate/up gradient (what the grouped GEMM's backward hands each weight); `w2` the down projection's, a
// contiguous [8, d, f]. Bytes: bf16 read, fp32 written. Timed with CUDA events after an L2 flush.
// Run: build/bench/kernels_bench --benchmark_filter=copy_blocks
#include <ATen/ScalarOps.h>

#include "kernels/bench_util.h"
#include "kernels/copy_blocks.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

void gradient_slot_bench(benchmark::State& st, bool fused, bool gate) {
  constexpr int64_t E = 8, f = 3584, d = 4096;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const auto grad = gate ? torch::randn({E, 2 * f, d}, bf16).narrow(1, 0, f) : torch::randn({E, d, f}, bf16);
  auto slot = torch::empty(grad.sizes(), bf16.dtype(torch::kFloat));
  const auto divisor = at::native::wrapped_scalar_tensor(2.0);
  const double bytes = double(grad.numel()) * (2 + 4);
  timed(st, bytes, [&] {
    if (fused) copy_blocks({{slot, grad}}, 0.5);
    else at::div_out(slot, grad, divisor);
  });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(copy_blocks) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const bool gate : {true, false})
    for (const bool fused : {false, true})
      benchmark::RegisterBenchmark((std::string("copy_blocks/gradient_slot/") + (gate ? "w1_view" : "w2") +
                                    (fused ? "/copy_blocks" : "/div_out"))
                                       .c_str(),
                                   gradient_slot_bench, fused, gate)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
