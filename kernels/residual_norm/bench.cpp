// kernels/residual_norm/bench.cpp: the residual_norm backends at nam56r-small's shape (16384 x 1024),
// forward and forward+backward: mix `autocast` is the model's (x bf16, residual and weight fp32: y bf16,
// s fp32), `bf16` has every tensor bf16; GB/s and pct_of_copy_ceiling count the bytes each direction
// must move. Also the fused forward with each forced row layout (iters: vectors a thread holds), which
// chose the built-in rule. Targets: fused forward >= 90 % of the copy ceiling, forward+backward >= 3x
// faster than the reference.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=residual_norm
#include "kernels/bench_util.h"
#include "kernels/residual_norm/fused_cuda.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void residual_norm_bench(benchmark::State& st, std::string backend, bool backward, torch::ScalarType x_dtype,
                         torch::ScalarType r_dtype) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().residual_norm.at(backend);
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({kRows, kWidth}, opts.dtype(x_dtype)).requires_grad_(backward);
  auto r = torch::randn({kRows, kWidth}, opts.dtype(r_dtype)).requires_grad_(backward);
  auto w = (1 + 0.1 * torch::randn({kWidth}, opts.dtype(r_dtype))).requires_grad_(backward);
  const auto gy = torch::randn({kRows, kWidth}, opts.dtype(x_dtype));
  const auto gs = torch::randn({kRows, kWidth}, opts.dtype(r_dtype));
  const double n = double(kRows) * kWidth, sx = size_of(x_dtype), sr = size_of(r_dtype);
  // Forward: read x, residual, weight; write y (x's dtype), s (residual's), rstd (fp32 per row).
  double bytes = n * (sx + sr + sx + sr) + kWidth * sr + kRows * 4.0;
  // Backward: read dy, ds, s, weight, rstd; write d(residual), d(x) when its dtype differs (else the
  // same tensor serves both), dw. The dw partials (grid x d fp32) are overhead, not counted.
  if (backward) bytes += n * (sx + sr + sr + sr + (x_dtype != r_dtype ? sx : 0.0)) + kWidth * 2 * sr + kRows * 4.0;
  c10::AutoGradMode grad_mode(backward);
  timed(st, bytes, [&] {
    auto [y, s] = fn(x, r, w, 1e-6);
    if (backward) torch::autograd::grad({y, s}, {x, r, w}, {gy, gs});
  });
}

// The residual_norm forward with a forced row layout (vectors per thread), to pick the built-in rule.
void residual_norm_layout_bench(benchmark::State& st, int iters, torch::ScalarType r_dtype) {
  ablate::kernels::fused::tuning::residual_norm_forward_iters(iters);
  residual_norm_bench(st, "fused_cuda", false, torch::kBFloat16, r_dtype);
  ablate::kernels::fused::tuning::residual_norm_forward_iters(0);
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(residual_norm) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const int iters : {1, 2, 4})
    for (const auto r_dtype : {torch::kFloat, torch::kBFloat16})
      benchmark::RegisterBenchmark(("residual_norm/fused_cuda/fwd/" +
                                    std::string(r_dtype == torch::kFloat ? "autocast" : "bf16") +
                                    "/iters:" + std::to_string(iters))
                                       .c_str(),
                                   residual_norm_layout_bench, iters, r_dtype)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("residual_norm", backend)) continue;
    for (const bool backward : {false, true}) {
      const std::string dir = backward ? "/fwd_bwd" : "/fwd";
      benchmark::RegisterBenchmark(("residual_norm/" + backend + dir + "/autocast").c_str(), residual_norm_bench,
                                   backend, backward, torch::kBFloat16, torch::kFloat)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("residual_norm/" + backend + dir + "/bf16").c_str(), residual_norm_bench, backend,
                                   backward, torch::kBFloat16, torch::kBFloat16)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}
#endif  // ABLATE_HAVE_CUDA
