// kernels/causal_conv/bench.cpp: the R block's causal depthwise convolution at nam56r-small's shape (8 x 2048
// steps, 1024 channels, 4 taps): x a bf16 slice of the [B, T, 2C] input projection, as the block passes
// it, fp32 weight and bias (out fp32, as the reference promotes), forward and forward+backward, each
// backend; GB/s against the copy ceiling (floor: x read once, out written, and backward dout read, x
// read again, dx written).
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=causal_conv
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void causal_conv_bench(benchmark::State& st, std::string backend, bool backward) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().causal_conv.at(backend);
  constexpr int64_t B = 8, T = 2048, C = 1024, K = 4;
  const auto opts = torch::TensorOptions(cuda);
  auto projection = torch::randn({B, T, 2 * C}, opts.dtype(torch::kBFloat16)).requires_grad_(backward);
  auto weight = (0.5 * torch::randn({C, K}, opts)).requires_grad_(backward);
  auto bias = torch::randn({C}, opts).requires_grad_(backward);
  const auto g = torch::randn({B, T, C}, opts);
  const double elems = double(B) * T * C;
  const double bytes = elems * (2 + 4) + (backward ? elems * (4 + 2 + 2) : 0.0);
  c10::AutoGradMode grad_mode(backward);
  timed(st, bytes, [&] {
    auto out = fn(projection.narrow(-1, C, C), weight, bias);
    if (backward) torch::autograd::grad({out}, {projection, weight, bias}, {g});
  });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(causal_conv) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("causal_conv", backend)) continue;
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark(("causal_conv/" + backend + (backward ? "/fwd_bwd" : "/fwd") + "/bf16x").c_str(),
                                   causal_conv_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
}
#endif  // ABLATE_HAVE_CUDA
