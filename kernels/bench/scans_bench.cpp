// kernels/bench/scans_bench.cpp: timings of the reference scans (kernels/ssm_scan/reference.h, kernels/recurrent_scan/reference.h), forward
// and forward+backward, at the `tiny` config's shapes on the CPU and at `nam56r-small`'s on the GPU
// (MODEL.md "Named configurations"): M layers B=8, T=2048, H=32, P=64, N=128, chunk 64; the R layer
// B=8, T=2048, W=1024 at several chunk lengths (its chunked form holds B*T*W*L elements transiently,
// so the chunk is a memory/time trade worth seeing). Counters: tokens/s (B*T per iteration) and, on
// CUDA, peak_GiB (the caching allocator's peak allocated bytes during the timed loop).
// Run: bench/scans_bench [--benchmark_filter=...]; CUDA cases register only when a GPU is visible.
// Inputs are random with the model's ranges; the reference has no data-dependent work, so values do
// not affect timing.
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernels/recurrent_scan/reference.h"
#include "kernels/ssm_scan/reference.h"

namespace ref = ablate::kernels::reference;
using torch::Tensor;

namespace {

struct SsmShape {
  int64_t B, T, H, P, N, L;
};
struct RecShape {
  int64_t B, T, W, L;
};

std::vector<Tensor> ssm_inputs(const SsmShape& s, torch::Device dev) {
  auto gen = at::detail::createCPUGenerator(7);
  auto rn = [&](at::IntArrayRef sz) { return torch::randn(sz, gen, torch::kFloat); };
  const auto delta = torch::softplus(rn({s.B, s.T, s.H}) - 4);
  const auto log_alpha = delta * (-torch::softplus(rn({s.B, s.T, s.H}))).clamp_max(-1e-4);
  const auto lambda = torch::sigmoid(rn({s.B, s.T, s.H}));
  std::vector<Tensor> in = {rn({s.B, s.T, s.H, s.P}),
                            rn({s.B, s.T, s.H, s.N}),
                            rn({s.B, s.T, s.H, s.N}),
                            log_alpha,
                            (1 - lambda) * delta * log_alpha.exp(),
                            lambda * delta,
                            torch::ones({s.H})};
  for (auto& t : in) t = t.to(dev).requires_grad_(true);
  return in;
}

std::vector<Tensor> rec_inputs(const RecShape& s, torch::Device dev) {
  auto gen = at::detail::createCPUGenerator(8);
  auto rn = [&](at::IntArrayRef sz) { return torch::randn(sz, gen, torch::kFloat); };
  const auto a = (-8 * torch::sigmoid(rn({s.B, s.T, s.W})) * 0.05).exp();
  std::vector<Tensor> in = {a, (1 - a * a).sqrt() * rn({s.B, s.T, s.W})};
  for (auto& t : in) t = t.to(dev).requires_grad_(true);
  return in;
}

void sync(torch::Device dev) {
  if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
}

// Runs `step` (one forward or forward+backward) in the timed loop, reports tokens/s and CUDA peak.
template <class Step>
void timed(benchmark::State& st, torch::Device dev, int64_t tokens, Step step) {
  step();  // warm-up: allocator pools, cuBLAS handles, one-time dispatch
  sync(dev);
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
  for (auto _ : st) {
    step();
    sync(dev);
  }
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  if (dev.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    st.counters["peak_GiB"] = static_cast<double>(stats.allocated_bytes[agg].peak) / (1 << 30);
  }
}

void ssm_bench(benchmark::State& st, SsmShape s, torch::Device dev, bool backward, bool stepwise) {
  const auto in = ssm_inputs(s, dev);
  const auto g = torch::randn({s.B, s.T, s.H, s.P}, torch::TensorOptions(dev));
  timed(st, dev, s.B * s.T, [&] {
    const auto y = stepwise ? ref::ssm_scan_stepwise(in[0], in[1], in[2], in[3], in[4], in[5], in[6])
                            : ref::ssm_scan_chunked(in[0], in[1], in[2], in[3], in[4], in[5], in[6], s.L);
    if (backward) {
      torch::autograd::grad({(y * g).sum()}, in);
    }
  });
}

void rec_bench(benchmark::State& st, RecShape s, torch::Device dev, bool backward, bool stepwise) {
  const auto in = rec_inputs(s, dev);
  const auto g = torch::randn({s.B, s.T, s.W}, torch::TensorOptions(dev));
  timed(st, dev, s.B * s.T, [&] {
    const auto h =
        stepwise ? ref::recurrent_scan_stepwise(in[0], in[1]) : ref::recurrent_scan_chunked(in[0], in[1], s.L);
    if (backward) {
      torch::autograd::grad({(h * g).sum()}, in);
    }
  });
}

std::string ssm_name(const char* what, const SsmShape& s, torch::Device dev) {
  return std::string(what) + "/" + (dev.is_cuda() ? "cuda" : "cpu") + "/B" + std::to_string(s.B) + "_T" +
         std::to_string(s.T) + "_H" + std::to_string(s.H) + "_P" + std::to_string(s.P) + "_N" + std::to_string(s.N) +
         "_L" + std::to_string(s.L);
}
std::string rec_name(const char* what, const RecShape& s, torch::Device dev) {
  return std::string(what) + "/" + (dev.is_cuda() ? "cuda" : "cpu") + "/B" + std::to_string(s.B) + "_T" +
         std::to_string(s.T) + "_W" + std::to_string(s.W) + "_L" + std::to_string(s.L);
}

void register_all() {
  const torch::Device cpu(torch::kCPU);
  // `tiny`: d = 64, expand 2 -> d_inner 128, P 16 -> H 8, N 16, chunk 16; R width 64; T x batch 128 x 4.
  const SsmShape ssm_tiny{4, 128, 8, 16, 16, 16};
  const RecShape rec_tiny{4, 128, 64, 16};
  for (bool bwd : {false, true}) {
    const char* fb = bwd ? "fwd_bwd" : "fwd";
    benchmark::RegisterBenchmark(ssm_name((std::string("ssm_chunked_") + fb).c_str(), ssm_tiny, cpu).c_str(), ssm_bench,
                                 ssm_tiny, cpu, bwd, false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(ssm_name((std::string("ssm_stepwise_") + fb).c_str(), ssm_tiny, cpu).c_str(),
                                 ssm_bench, ssm_tiny, cpu, bwd, true)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(rec_name((std::string("rec_chunked_") + fb).c_str(), rec_tiny, cpu).c_str(), rec_bench,
                                 rec_tiny, cpu, bwd, false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(rec_name((std::string("rec_stepwise_") + fb).c_str(), rec_tiny, cpu).c_str(),
                                 rec_bench, rec_tiny, cpu, bwd, true)
        ->Unit(benchmark::kMillisecond);
  }
  if (!torch::cuda::is_available()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  // `nam56r-small`: d_inner 2048, P 64 -> H 32, N 128, chunk 64; R width 1024; T x batch 2048 x 8.
  for (int64_t L : {32, 64, 128}) {
    const SsmShape s{8, 2048, 32, 64, 128, L};
    for (bool bwd : {false, true})
      benchmark::RegisterBenchmark(ssm_name(bwd ? "ssm_chunked_fwd_bwd" : "ssm_chunked_fwd", s, gpu).c_str(), ssm_bench,
                                   s, gpu, bwd, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
  for (int64_t L : {8, 16, 32, 64}) {
    const RecShape s{8, 2048, 1024, L};
    for (bool bwd : {false, true})
      benchmark::RegisterBenchmark(rec_name(bwd ? "rec_chunked_fwd_bwd" : "rec_chunked_fwd", s, gpu).c_str(), rec_bench,
                                   s, gpu, bwd, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
  // The per-timestep forms at full size, for scale (one timestep = a handful of small kernels).
  const SsmShape s{8, 2048, 32, 64, 128, 64};
  benchmark::RegisterBenchmark(ssm_name("ssm_stepwise_fwd", s, gpu).c_str(), ssm_bench, s, gpu, false, true)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  const RecShape r{8, 2048, 1024, 64};
  benchmark::RegisterBenchmark(rec_name("rec_stepwise_fwd_bwd", r, gpu).c_str(), rec_bench, r, gpu, true, true)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
