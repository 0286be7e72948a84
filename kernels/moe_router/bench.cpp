// kernels/moe_router/bench.cpp: nam56r-small's router forward and forward+backward (16384 tokens, d 1024,
// 16 experts, top-2; x bf16 as under autocast, the weight fp32), each backend; GB/s against the copy
// ceiling (floor: x read once forward; backward x read again and dx written; probs, top-k and dW are
// < 3 % of it). The whole E layer (router, loss, dispatch) is model/blocks_bench.cpp's moe_layer.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=moe_router
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

void moe_router_bench(benchmark::State& st, std::string backend, bool backward) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().moe_router.at(backend);
  constexpr int64_t T = kRows, d = kWidth, E = 16, k = 2;
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({T, d}, opts.dtype(torch::kBFloat16)).requires_grad_(backward);
  auto weight = (0.02 * torch::randn({E, d}, opts)).requires_grad_(backward);
  const auto g_probs = torch::randn({T, E}, opts), g_top = torch::randn({T, k}, opts);
  const double x_bytes = double(T) * d * 2;
  c10::AutoGradMode grad_mode(backward);
  timed(st, backward ? 3 * x_bytes : x_bytes, [&] {
    const auto out = fn(x, weight, k);
    if (backward) torch::autograd::grad({out.probs, out.top_w}, {x, weight}, {g_probs, g_top});
  });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(moe_router) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("moe_router", backend)) continue;
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark(("moe_router/" + backend + (backward ? "/fwd_bwd" : "/fwd") + "/bf16x").c_str(),
                                   moe_router_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
}
#endif  // ABLATE_HAVE_CUDA
