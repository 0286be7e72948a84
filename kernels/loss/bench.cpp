// kernels/loss/bench.cpp: the LM head + cross-entropy backends, forward+backward under bf16 autocast
// at N 16384, d 1024, V 32768 (hidden bf16, head fp32); counters TFLOP/s (the three GEMMs, 6 N d V) and
// peak_extra_MiB (allocator peak during forward + backward above what was allocated before: logits,
// softmax, gradients included). Targets for fused_cuda: peak_extra_MiB <= 1/16 of the reference's,
// median_us <= the reference's.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=loss
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void loss_bench(benchmark::State& st, std::string backend) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().loss.at(backend);
  constexpr int64_t N = 16384, d = 1024, V = 32768;
  auto hidden = torch::randn({N, d}, torch::TensorOptions(cuda).dtype(torch::kBFloat16)).requires_grad_(true);
  auto weight = (0.02 * torch::randn({V, d}, torch::TensorOptions(cuda))).requires_grad_(true);
  const auto targets = torch::randint(V, {N}, torch::TensorOptions(cuda).dtype(torch::kLong));
  const auto mask = (torch::rand({N}, torch::TensorOptions(cuda)) > 0.05).to(torch::kUInt8);
  auto step = [&] {
    const auto loss = under_bf16_autocast([&] { return fn(hidden, weight, targets, mask); });
    torch::autograd::grad({loss}, {hidden, weight});
  };
  // The gradients of hidden and weight (the same for every backend) are inside the peak.
  const double extra_mib = peak_extra_mib(step);
  timed(st, 0.0, step);
  st.counters["peak_extra_MiB"] = extra_mib;
  st.counters["TFLOP/s"] = 6.0 * N * d * V / (st.counters["median_us"] * 1e-6) / 1e12;
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(loss) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "chunked", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("loss", backend)) continue;
    benchmark::RegisterBenchmark(("loss/" + backend + "/fwd_bwd/autocast").c_str(), loss_bench, backend)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  }
}
#endif  // ABLATE_HAVE_CUDA
