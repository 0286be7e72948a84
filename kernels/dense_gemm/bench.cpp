// kernels/dense_gemm/bench.cpp: the blocks' projections, forward and forward+backward, each dense_gemm
// backend, at the widths of nam56r-small (d 1024) and nam56r-medium (d 2048) with 8 x 2048 tokens:
// TFLOP/s and the share of the dense peak of the precision the GEMMs run in (H100 SXM datasheet: bf16
// 989 TFLOP/s, FP8 1979), the FP8 rows' quantisation and casts included. And the FP8 quantisation alone
// (both orientations of an activation; current scaling's two passes, delayed scaling's one) against the
// copy ceiling.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=dense_gemm
#include "kernels/bench_util.h"
#include "kernels/dense_gemm/fp8_quantize.h"
#include "kernels/dispatch.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

struct Projection {
  const char* name;
  int64_t in, out;  // K, N
};
// The M block's W_in and W_out (its two largest GEMMs) and the A block's W_o, at both widths.
constexpr Projection kProjections[] = {
    {"small_mamba_in", 1024, 4480},  {"small_mamba_out", 2048, 1024}, {"small_attn_out", 1024, 1024},
    {"medium_mamba_in", 2048, 8672}, {"medium_mamba_out", 4096, 2048},
};

void dense_gemm_bench(benchmark::State& st, std::string backend, Projection p, bool backward) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().dense_gemm.at(backend);
  auto x = torch::randn({kRows, p.in}, torch::TensorOptions(cuda).dtype(torch::kBFloat16)).requires_grad_(backward);
  auto w = (torch::randn({p.out, p.in}, torch::TensorOptions(cuda)) / std::sqrt(double(p.in))).requires_grad_(backward);
  const auto g = torch::randn({kRows, p.out}, torch::TensorOptions(cuda).dtype(torch::kBFloat16));
  c10::AutoGradMode grad_mode(backward);
  timed(st, 0.0, [&] {
    auto y = under_bf16_autocast([&] { return fn(x, w, {}); });
    if (backward) torch::autograd::grad({y}, {x, w}, {g});
  });
  const double flops = 2.0 * double(kRows) * double(p.in) * double(p.out) * (backward ? 3.0 : 1.0);
  const double median = st.counters["median_us"] / 1e6;
  const bool fp8 = find_backend("dense_gemm", backend)->fp8_gemms;
  st.counters["TFLOP/s"] = flops / median / 1e12;
  st.counters["pct_of_peak"] = 100.0 * flops / median / (fp8 ? kFp8DatasheetFlopsPerSecond : kBf16DatasheetFlopsPerSecond);
}

void quantize_bench(benchmark::State& st, fp8::Scaling scaling, int64_t width) {
  const auto x = torch::randn({kRows, width}, torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16));
  fp8::QuantizeOptions o;
  o.scaling = scaling;
  // Two reads of x (amax, cast) and the two FP8 orientations written.
  const double bytes = double(kRows) * width * (2.0 * 2 + 2.0);
  timed(st, bytes, [&] { benchmark::DoNotOptimize(fp8::quantize(x, o)); });
}

// Delayed scaling's one pass: one read of x and the two orientations written.
void quantize_delayed_bench(benchmark::State& st, int64_t width) {
  const auto x = torch::randn({kRows, width}, torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16));
  const auto history = fp8::new_amax_history(x.device());
  const double bytes = double(kRows) * width * (2.0 + 2.0);
  timed(st, bytes, [&] { benchmark::DoNotOptimize(fp8::quantize_delayed(x, history, fp8::QuantizeOptions{})); });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(dense_gemm) {
  using namespace ablate::kernels;
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  const auto device = describe_device(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
  for (const std::string& backend : backend_names("dense_gemm")) {
    const auto* row = find_backend("dense_gemm", backend);
    if (!has_implementation("dense_gemm", backend) || !why_unavailable(*row, device).empty()) continue;
    for (const auto& p : kProjections)
      for (const bool backward : {false, true})
        benchmark::RegisterBenchmark(
            ("dense_gemm/" + backend + "/" + p.name + (backward ? "/fwd_bwd" : "/fwd")).c_str(), dense_gemm_bench,
            backend, p, backward)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
  }
  if (device.sm_major < 9) return;
  for (const auto& [label, scaling] : {std::pair{"tensorwise", fp8::Scaling::tensorwise}, std::pair{"rowwise", fp8::Scaling::rowwise}})
    for (const int64_t width : {int64_t{1024}, int64_t{4480}})
      benchmark::RegisterBenchmark(("fp8_quantize/" + std::string(label) + "/" + std::to_string(width)).c_str(),
                                   quantize_bench, scaling, width)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  for (const int64_t width : {int64_t{1024}, int64_t{4480}})
    benchmark::RegisterBenchmark(("fp8_quantize/delayed/" + std::to_string(width)).c_str(), quantize_delayed_bench, width)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
}
#endif  // ABLATE_HAVE_CUDA
