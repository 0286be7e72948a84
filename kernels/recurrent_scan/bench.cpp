// kernels/recurrent_scan/bench.cpp: the recurrent_scan seam's timings in build/bench/kernels_bench.
// - rec_<chunked|stepwise>_<fwd|fwd_bwd>/<cpu|cuda>/<shape>: the reference linear recurrence's two forms
//   (kernels/recurrent_scan/reference.h), at the `tiny` config's shapes on the CPU and at
//   `nam56r-small`'s R layer on the GPU (B=8, T=2048, W=1024) at several chunk lengths (its chunked
//   form holds B*T*W*L elements transiently, so the chunk is a memory/time trade worth seeing); timed on
//   the host clock (kernels/bench_util.h timed_host: tokens/s, peak_GiB on CUDA).
// - rglru/<backend>/<fwd|fwd_bwd>/<mix>: the seam (gates + recurrence) through the registry, reference
//   vs fused_cuda, at B 8, T 2048, W 1024; mix `bf16` has gate_a, gate_x and u in bf16, `autocast` the
//   model's (gate logits bf16 from the autocast projections, u fp32 from the conv). Timed with CUDA
//   events after an L2 flush (kernels/bench_util.h); counters median_us, GB/s, floor_us = the memory
//   floor (bytes / the copy ceiling, counting read + write) and x_floor = median / floor. Bytes: forward
//   reads gate_a, gate_x, u (S bytes an element together) and writes h (4): S + 4; backward reads dh
//   (4), gate_a, gate_x, u (S) and writes their gradients (S): 2S + 4; per-channel terms (lambda,
//   h_last) are counted too. bf16: 10 B forward, 26 B forward+backward an element. Target (issue 11):
//   fused_cuda forward+backward x_floor <= 2 on the H100.
// Run: build/bench/kernels_bench --benchmark_filter='rglru|rec_'; CUDA cases register only when a GPU
// is visible.
#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#include "kernels/bench_util.h"
#include "kernels/recurrent_scan/reference.h"
#if defined(ABLATE_HAVE_CUDA)
#include "kernels/recurrent_scan/fused_cuda.h"
#endif

namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

struct RecShape {
  int64_t B, T, W, L;
};

std::vector<Tensor> rec_inputs(const RecShape& s, torch::Device dev) {
  auto gen = at::detail::createCPUGenerator(8);
  auto rn = [&](at::IntArrayRef sz) { return torch::randn(sz, gen, torch::kFloat); };
  const auto a = (-8 * torch::sigmoid(rn({s.B, s.T, s.W})) * 0.05).exp();
  std::vector<Tensor> in = {a, (1 - a * a).sqrt() * rn({s.B, s.T, s.W})};
  for (auto& t : in) t = t.to(dev).requires_grad_(true);
  return in;
}

void rec_bench(benchmark::State& st, RecShape s, torch::Device dev, bool backward, bool stepwise) {
  const auto in = rec_inputs(s, dev);
  const auto g = torch::randn({s.B, s.T, s.W}, torch::TensorOptions(dev));
  timed_host(st, dev, s.B * s.T, [&] {
    const auto h = stepwise ? reference::linear_recurrence_stepwise(in[0], in[1], Tensor()).first
                            : reference::linear_recurrence_chunked(in[0], in[1], Tensor(), s.L).first;
    if (backward) {
      torch::autograd::grad({(h * g).sum()}, in);
    }
  });
}

std::string rec_name(const std::string& what, const RecShape& s, torch::Device dev) {
  return what + "/" + (dev.is_cuda() ? "cuda" : "cpu") + "/B" + std::to_string(s.B) + "_T" + std::to_string(s.T) +
         "_W" + std::to_string(s.W) + "_L" + std::to_string(s.L);
}

#if defined(ABLATE_HAVE_CUDA)
// The recurrent_scan seam at nam56r-small's R layer through the registry; u_dtype fp32 is the model's
// autocast mix. Gate logits N(0, 2^2), sigmoid(lambda) in [0.9, 0.999] as the block initialises it.
// vec > 0 forces fused_cuda's channels per thread (fused::tuning), restored to the built-in rule after.
void rglru_bench(benchmark::State& st, std::string backend, bool backward, torch::ScalarType u_dtype, int vec) {
  constexpr int64_t B = 8, T = 2048, W = 1024;
  const auto& fn = implementations().recurrent_scan.at(backend);
  const auto opts = torch::TensorOptions(torch::kCUDA);
  auto gate_a = (2 * torch::randn({B, T, W}, opts)).to(torch::kBFloat16).requires_grad_(backward);
  auto gate_x = (2 * torch::randn({B, T, W}, opts)).to(torch::kBFloat16).requires_grad_(backward);
  auto u = torch::randn({B, T, W}, opts).to(u_dtype).requires_grad_(backward);
  const auto decay = 0.9 + 0.099 * torch::rand({W}, opts);
  auto lambda = (torch::log(decay) - torch::log1p(-decay)).requires_grad_(backward);
  const auto dh = torch::randn({B, T, W}, opts);
  const double n = double(B) * T * W, s = 2.0 + 2.0 + size_of(u_dtype);
  double bytes = n * (s + 4.0) + W * 4.0 + B * W * 4.0;       // forward: gates, u, lambda -> h, h_last
  if (backward) bytes += n * (4.0 + 2.0 * s) + W * 2 * 4.0;  // backward: dh, gates, u, lambda -> gradients
  c10::AutoGradMode grad_mode(backward);
  fused::tuning::recurrent_scan_channels_per_thread(vec);
  timed(st, bytes, [&] {
    const auto out = fn({.gate_a = gate_a, .gate_x = gate_x, .u = u, .lambda = lambda, .h0 = Tensor()});
    if (backward) torch::autograd::grad({out.h}, {gate_a, gate_x, u, lambda}, {dh});
  });
  fused::tuning::recurrent_scan_channels_per_thread(0);
}
#endif

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(recurrent_scan) {
  using namespace ablate::kernels::bench;
  const torch::Device cpu(torch::kCPU);
  // `tiny`: R width 64, chunk 16; T x batch 128 x 4.
  const RecShape tiny{4, 128, 64, 16};
  for (bool bwd : {false, true}) {
    const std::string fb = bwd ? "fwd_bwd" : "fwd";
    benchmark::RegisterBenchmark(rec_name("rec_chunked_" + fb, tiny, cpu).c_str(), rec_bench, tiny, cpu, bwd, false)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(rec_name("rec_stepwise_" + fb, tiny, cpu).c_str(), rec_bench, tiny, cpu, bwd, true)
        ->Unit(benchmark::kMillisecond);
  }
  if (!torch::cuda::is_available()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  // `nam56r-small`: R width 1024; T x batch 2048 x 8.
  for (int64_t L : {8, 16, 32, 64}) {
    const RecShape s{8, 2048, 1024, L};
    for (bool bwd : {false, true})
      benchmark::RegisterBenchmark(rec_name(bwd ? "rec_chunked_fwd_bwd" : "rec_chunked_fwd", s, gpu).c_str(), rec_bench,
                                   s, gpu, bwd, false)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
  }
#if defined(ABLATE_HAVE_CUDA)
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("recurrent_scan", backend)) continue;
    for (bool bwd : {false, true})
      for (const auto u_dtype : {torch::kBFloat16, torch::kFloat}) {
        const std::string name =
            "rglru/" + backend + (bwd ? "/fwd_bwd/" : "/fwd/") + (u_dtype == torch::kBFloat16 ? "bf16" : "autocast");
        benchmark::RegisterBenchmark(name.c_str(), rglru_bench, backend, bwd, u_dtype, 0)
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
      }
  }
  // fused_cuda with 2 and 1 channels a thread forced (the default rule's choice against the other:
  // registers a thread against threads).
  if (ablate::kernels::has_implementation("recurrent_scan", "fused_cuda"))
    for (bool bwd : {false, true})
      for (int vec : {2, 1})
        benchmark::RegisterBenchmark(
            (std::string("rglru/fused_cuda/") + (bwd ? "fwd_bwd" : "fwd") + "/bf16/vec" + std::to_string(vec)).c_str(),
            rglru_bench, std::string("fused_cuda"), bwd, torch::kBFloat16, vec)
            ->Unit(benchmark::kMicrosecond)
            ->UseManualTime();
#endif
  // The per-timestep form at full size, for scale (one timestep = a handful of small kernels).
  const RecShape r{8, 2048, 1024, 64};
  benchmark::RegisterBenchmark(rec_name("rec_stepwise_fwd_bwd", r, gpu).c_str(), rec_bench, r, gpu, true, true)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}
