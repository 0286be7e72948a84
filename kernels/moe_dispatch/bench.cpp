// kernels/moe_dispatch/bench.cpp: nam56r-small's E layer forward+backward under bf16 autocast: 16384
// tokens, d 1024, 16 experts, top-2, expert FFN 768, dropless, a skewed router (expert loads 0.3x-2.5x
// the mean, as early in training); counters TFLOP/s (the three expert matmuls, 18 * T * k * d * f for
// forward + backward) and peak_extra_MiB (the reference pads every expert to the largest load).
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=moe_dispatch
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void moe_dispatch_bench(benchmark::State& st, std::string backend) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().moe_dispatch.at(backend);
  constexpr int64_t T = 16384, d = 1024, E = 16, k = 2, f = 768;
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({T, d}, opts.dtype(torch::kBFloat16)).requires_grad_(true);
  auto w1 = (0.02 * torch::randn({E, f, d}, opts)).requires_grad_(true);
  auto w3 = (0.02 * torch::randn({E, f, d}, opts)).requires_grad_(true);
  auto w2 = (0.02 * torch::randn({E, d, f}, opts)).requires_grad_(true);
  // A per-expert bias skews the loads the way an untrained router does.
  const auto logits = torch::randn({T, E}, opts) + torch::linspace(-1.0, 1.0, E, opts);
  const auto [top_w, top_idx] = logits.softmax(-1).topk(k, -1);
  const auto weights = top_w / top_w.sum(-1, true);
  auto step = [&] {
    const auto y =
        under_bf16_autocast([&] { return fn(x, top_idx, weights, w1, w3, w2, /*capacity_factor=*/0.0, nullptr); });
    torch::autograd::grad({y.to(torch::kFloat).square().mean()}, {x, w1, w3, w2});
  };
  const double extra_mib = peak_extra_mib(step);
  timed(st, 0.0, step);
  st.counters["peak_extra_MiB"] = extra_mib;
  st.counters["TFLOP/s"] = 18.0 * T * k * d * f / (st.counters["median_us"] * 1e-6) / 1e12;
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(moe_dispatch) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "grouped_mm"})
    benchmark::RegisterBenchmark(("moe_dispatch/" + backend + "/fwd_bwd/autocast").c_str(), moe_dispatch_bench, backend)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
