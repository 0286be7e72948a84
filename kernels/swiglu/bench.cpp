// kernels/swiglu/bench.cpp: silu(a) * b at nam56r-small's dense FFN shape (16384 x 2816, bf16),
// forward and forward+backward, each backend; GB/s against the copy ceiling.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=swiglu
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void swiglu_bench(benchmark::State& st, std::string backend, bool backward) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().swiglu.at(backend);
  const auto opts = torch::TensorOptions(cuda).dtype(torch::kBFloat16);
  auto a = torch::randn({kRows, kFfn}, opts).requires_grad_(backward);
  auto b = torch::randn({kRows, kFfn}, opts).requires_grad_(backward);
  const auto g = torch::randn({kRows, kFfn}, opts);
  // Forward: read a, b; write out. Backward: read a, b, dout; write da, db.
  const double bytes = double(kRows) * kFfn * 2.0 * (3 + (backward ? 5 : 0));
  c10::AutoGradMode grad_mode(backward);
  timed(st, bytes, [&] {
    auto out = fn(a, b);
    if (backward) torch::autograd::grad({out}, {a, b}, {g});
  });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(swiglu) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("swiglu", backend)) continue;
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark(("swiglu/" + backend + (backward ? "/fwd_bwd" : "/fwd") + "/bf16").c_str(),
                                   swiglu_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
}
#endif  // ABLATE_HAVE_CUDA
