// kernels/loss/bench.cpp: the LM head + cross-entropy backends, forward+backward under bf16 autocast
// at N 16384, d 1024, V 32768 (hidden bf16, head fp32), and the fused heads (bf16 and FP8) at d 2048;
// counters TFLOP/s (the three GEMMs, 6 N d V), pct_of_peak (of the dense datasheet peak of the precision
// the GEMMs run in: H100 SXM bf16 989, FP8 1979 TFLOP/s; the FP8 head's quantisation included) and
// peak_extra_MiB (allocator peak during forward + backward above what was allocated before: logits,
// softmax, gradients included). Targets for fused_cuda: peak_extra_MiB <= 1/16 of the reference's,
// median_us <= the reference's.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=loss
// loss/fused_cuda/fwd_bwd/autocast/chunk_rows:R: the same with R rows a chunk (the default takes ~256 MiB
// of logits: 4096 rows here). dW is accumulated in fp32 once a chunk, [V, d] = 128 MiB read and written
// each time (4 times at the default): bigger chunks trade transient logits memory for that traffic.
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
#include "kernels/loss/fused_cuda.h"

namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

// chunk_rows > 0: fused_cuda through its entry point with that many rows a chunk (the seam's contract
// otherwise). d: the model width (1024 nam56r-small, 2048 nam56r-medium).
void loss_bench(benchmark::State& st, std::string backend, int64_t chunk_rows, int64_t d) {
  const torch::Device cuda(torch::kCUDA, 0);
  const LossFn seam_fn = implementations().loss.at(backend);
  const LossFn fn = chunk_rows > 0 ? LossFn([chunk_rows](const Tensor& h, const Tensor& w, const Tensor& t, const Tensor& m) {
    return fused::linear_cross_entropy(h, w, t, m, fused::LossReduction::mean, chunk_rows);
  })
                                   : seam_fn;
  constexpr int64_t N = 16384, V = 32768;
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
  const double flops_per_second = 6.0 * N * d * V / (st.counters["median_us"] * 1e-6);
  st.counters["TFLOP/s"] = flops_per_second / 1e12;
  const bool fp8 = find_backend("loss", backend)->fp8_gemms;
  st.counters["pct_of_peak"] =
      100.0 * flops_per_second / (fp8 ? kFp8DatasheetFlopsPerSecond : kBf16DatasheetFlopsPerSecond);
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(loss) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "chunked", "fused_cuda", "fused_cuda_fp8_rowwise"}) {
    if (!ablate::kernels::has_implementation("loss", backend)) continue;
    benchmark::RegisterBenchmark(("loss/" + backend + "/fwd_bwd/autocast").c_str(), loss_bench, backend, 0, 1024)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  }
  // nam56r-medium's head (d 2048): the bf16 and FP8 fused heads.
  for (const std::string backend : {"fused_cuda", "fused_cuda_fp8_rowwise"}) {
    if (!ablate::kernels::has_implementation("loss", backend)) continue;
    benchmark::RegisterBenchmark(("loss/" + backend + "/fwd_bwd/autocast/d:2048").c_str(), loss_bench, backend, 0,
                                 2048)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  }
  if (!ablate::kernels::has_implementation("loss", "fused_cuda")) return;
  for (const int64_t rows : {1024, 2048, 8192})
    benchmark::RegisterBenchmark(("loss/fused_cuda/fwd_bwd/autocast/chunk_rows:" + std::to_string(rows)).c_str(),
                                 loss_bench, std::string("fused_cuda"), rows, 1024)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
