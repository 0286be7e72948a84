// kernels/gelu_gate_bench.cpp: gelu_gate (kernels/gelu_gate.h) against its LibTorch ops at the R block's
// shape in nam56r-small (8 x 2048 tokens, width 1024): g a bf16 view of the first half of the input
// projection's [.., 2048] rows, h fp32. fwd: the gate; fwd_bwd: the gate and its backward from a bf16
// output gradient. Bytes: g, h read and the output written (forward; the backward adds d read, dg and
// dh written). Timed with CUDA events after an L2 flush (bench_util.h).
// Run: build/bench/kernels_bench --benchmark_filter=gelu_gate
#include "kernels/bench_util.h"
#include "kernels/gelu_gate.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

void gelu_gate_bench(benchmark::State& st, bool fused, bool backward) {
  constexpr int64_t B = 8, T = 2048, W = 1024;
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const auto gu = torch::randn({B, T, 2 * W}, cuda.dtype(torch::kBFloat16));
  const auto g_view = gu.narrow(-1, 0, W);
  const auto h = torch::randn({B, T, W}, cuda.dtype(torch::kFloat));
  const auto d = torch::randn({B, T, W}, cuda.dtype(torch::kBFloat16));
  const double n = double(B * T * W);
  const double bytes = backward ? n * (2 + 4 + 2) + n * (2 + 2 + 4 + 2 + 4) : n * (2 + 4 + 2);
  const auto gate = [&](const torch::Tensor& gg, const torch::Tensor& hh) {
    return fused ? gelu_gate(gg, hh) : gelu_gate_ops(gg, hh);
  };
  if (!backward) {
    timed(st, bytes, [&] { benchmark::DoNotOptimize(gate(g_view, h)); });
    return;
  }
  const auto gl = g_view.detach().requires_grad_(true), hl = h.detach().requires_grad_(true);
  timed(st, bytes, [&] { benchmark::DoNotOptimize(torch::autograd::grad({gate(gl, hl)}, {gl, hl}, {d})); });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(gelu_gate) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const bool backward : {false, true})
    for (const bool fused : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("gelu_gate/") + (fused ? "fused_cuda" : "ops") + (backward ? "/fwd_bwd" : "/fwd")).c_str(),
          gelu_gate_bench, fused, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
