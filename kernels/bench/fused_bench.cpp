// kernels/bench/fused_bench.cpp: the fused CUDA backends (kernels/cuda/, catalog rows `fused_cuda`)
// against their references, forward and forward+backward, at nam56r-small's shapes (MODEL.md: 8 x 2048
// tokens = 16384 rows, d 1024, dense FFN 2816):
//   residual_norm/<backend>/<fwd|fwd_bwd>/<mix>: 16384 x 1024; mix `autocast` is the model's (x bf16,
//     residual and weight fp32: y bf16, s fp32), `bf16` has every tensor bf16;
//   swiglu/<backend>/<fwd|fwd_bwd>/bf16: 16384 x 2816.
// Timed with CUDA events on the current stream after warm-up (manual time); counters from the median
// iteration: GB/s = the bytes the op must move (counted beside each case) / time, and
// pct_of_copy_ceiling = GB/s against the H100's measured device-to-device copy, 3.0 TB/s counting read
// + write (shared/GPU.md). Targets: residual_norm forward >= 90 % of the ceiling; forward+backward
// >= 3x faster than the reference (compare the two rows' median_us).
// Run: bench/fused_bench [--benchmark_filter=residual_norm]; registers nothing without a GPU.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/dispatch.h"

namespace {

using ablate::kernels::implementations;
using torch::Tensor;

constexpr double kCopyCeilingBytesPerSecond = 3.0e12;  // H100, read + write (shared/GPU.md)
constexpr int64_t kRows = 8 * 2048, kWidth = 1024, kFfn = 2816;

#if defined(ABLATE_HAVE_CUDA)
// Runs `step` in the timed loop: CUDA events around each iteration on the current stream, reported
// as manual time; counters from the median iteration (robust to the odd slow one).
template <class Step>
void timed(benchmark::State& st, double bytes, Step step) {
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator pools, first-launch module loading
  torch::cuda::synchronize();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);  // default flags disable timing
  std::vector<double> seconds;
  for (auto _ : st) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    start.record(stream);
    step();
    stop.record(stream);
    stop.synchronize();
    seconds.push_back(start.elapsed_time(stop) / 1e3);
    st.SetIterationTime(seconds.back());
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  const double median = seconds[seconds.size() / 2];
  st.counters["median_us"] = median * 1e6;
  st.counters["GB/s"] = bytes / median / 1e9;
  st.counters["pct_of_copy_ceiling"] = 100.0 * bytes / median / kCopyCeilingBytesPerSecond;
}

double size_of(torch::ScalarType t) { return static_cast<double>(c10::elementSize(t)); }

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

void register_all() {
  if (!torch::cuda::is_available()) return;
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
      benchmark::RegisterBenchmark(("swiglu/" + backend + dir + "/bf16").c_str(), swiglu_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}
#else
void register_all() { std::fprintf(stderr, "fused_bench: built without CUDA, nothing to run\n"); }
#endif

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
