// kernels/bench/fused_bench.cpp: the fused CUDA backends (kernels/cuda/, catalog rows `fused_cuda`)
// against their references, forward and forward+backward, at nam56r-small's shapes (MODEL.md: 8 x 2048
// tokens = 16384 rows, d 1024, dense FFN 2816):
//   residual_norm/<backend>/<fwd|fwd_bwd>/<mix>: 16384 x 1024; mix `autocast` is the model's (x bf16,
//     residual and weight fp32: y bf16, s fp32), `bf16` has every tensor bf16;
//   swiglu/<backend>/<fwd|fwd_bwd>/bf16: 16384 x 2816;
//   rope/<backend>/<fwd|fwd_bwd>/bf16: B 8, T 2048, H 16, dn 64, dr 32, inputs the strided views the
//     model's projections produce (target: forward >= 80 % of the ceiling);
//   loss/<backend>/fwd_bwd/autocast: N 16384, d 1024, V 32768, hidden bf16, head fp32, autocast on;
//     counters TFLOP/s (the three GEMMs, 6 N d V) and peak_extra_MiB (allocator peak during forward +
//     backward above what was allocated before: logits, softmax, gradients included). Targets for
//     fused_cuda: peak_extra_MiB <= 1/16 of reference's, median_us <= reference's.
//   moe_dispatch/<backend>/fwd_bwd/autocast: nam56r-small's E layer, 16384 tokens, d 1024, 16 experts,
//     top-2, expert FFN 768, dropless, a skewed router (expert loads 0.3x-2.5x the mean, as early in
//     training); counters TFLOP/s (the three expert matmuls, 18 * T * k * d * f for forward + backward)
//     and peak_extra_MiB (the reference pads every expert to the largest load).
//   optimizer/<backend>/step: one AdamW update of a parameter set shaped like nam56r-small's (12 layers
//     of four 1024 x 4096 matrices and six small vectors, a 32768 x 1024 embedding: 235 M fp32
//     parameters in 121 tensors); bytes = 7 x 4 per parameter (read p, g, m, v; write p, m, v).
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
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/dispatch.h"
#if defined(ABLATE_HAVE_CUDA)
#include "kernels/cuda/fused.h"
#endif

namespace {

using ablate::kernels::implementations;
using torch::Tensor;

constexpr double kCopyCeilingBytesPerSecond = 3.0e12;  // H100, read + write (shared/GPU.md)
constexpr int64_t kRows = 8 * 2048, kWidth = 1024, kFfn = 2816;

#if defined(ABLATE_HAVE_CUDA)
// Runs `step` in the timed loop: CUDA events around each iteration on the current stream, reported
// as manual time; counters from the median iteration (robust to the odd slow one).
// Before each iteration a 256 MiB buffer is zeroed: it evicts the inputs from L2 (50 MiB on H100), so
// every iteration reads HBM, and it keeps the GPU busy while the host enqueues the start event, the
// op's launches and the stop event, so the events time GPU work only, not the host's launch latency
// (a few microseconds a launch: 5-15 % of a kernel of 60-90 us).
template <class Step>
void timed(benchmark::State& st, double bytes, Step step) {
  for (int i = 0; i < 3; ++i) step();  // warm-up: allocator pools, first-launch module loading
  auto flush = torch::empty({int64_t{256} << 20}, torch::TensorOptions(torch::kCUDA).dtype(torch::kUInt8));
  torch::cuda::synchronize();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);  // default flags disable timing
  std::vector<double> seconds;
  for (auto _ : st) {
    const auto stream = c10::cuda::getCurrentCUDAStream();
    flush.zero_();
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
  if (bytes <= 0) return;  // a compute-bound case reports its own rate
  st.counters["GB/s"] = bytes / median / 1e9;
  st.counters["pct_of_copy_ceiling"] = 100.0 * bytes / median / kCopyCeilingBytesPerSecond;
}

// Peak allocated memory of one call of `step` above what is allocated before it (inputs, allocator
// state), in MiB; `step` runs once before to warm the allocator's pools.
template <class Step>
double peak_extra_mib(Step step) {
  step();
  torch::cuda::synchronize();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  const auto before = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  step();
  torch::cuda::synchronize();
  const auto after = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return double(after.allocated_bytes[agg].peak - before.allocated_bytes[agg].current) / (1 << 20);
}

// `forward()` under bf16 autocast on CUDA, as the model's forward runs; the cast cache is cleared after.
template <class Forward>
torch::Tensor under_bf16_autocast(Forward forward) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);  // the CUDA default is fp16
  auto out = forward();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  return out;
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

// The residual_norm forward with a forced row layout (vectors per thread), to pick the built-in rule.
void residual_norm_layout_bench(benchmark::State& st, int iters, torch::ScalarType r_dtype) {
  ablate::kernels::fused::tuning::residual_norm_forward_iters(iters);
  residual_norm_bench(st, "fused_cuda", false, torch::kBFloat16, r_dtype);
  ablate::kernels::fused::tuning::residual_norm_forward_iters(0);
}

void rope_bench(benchmark::State& st, std::string backend, bool backward) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().rope.at(backend);
  const auto opts = torch::TensorOptions(cuda).dtype(torch::kBFloat16);
  constexpr int64_t B = 8, T = 2048, H = 16, dn = 64, dr = 32, dv = 64, kv_lora = 256;
  auto q = torch::randn({B, T, H, dn + dr}, opts).requires_grad_(backward);
  auto kv_down = torch::randn({B, T, kv_lora + dr}, opts).requires_grad_(backward);
  auto kv = torch::randn({B, T, H, dn + dv}, opts).requires_grad_(backward);
  const auto angle = torch::randn({T, dr / 2}, torch::TensorOptions(cuda));
  const auto cos = angle.cos(), sin = angle.sin();
  const auto gq = torch::randn({B, T, H, dn + dr}, opts), gk = torch::randn({B, T, H, dn + dr}, opts);
  const double rows = double(B) * T * H;
  // Forward: read q (nope and rope), k_nope, the shared k_r; write q and k. Backward (the seam's own
  // work): read the rope columns of dq and dk, write d(q_rope), d(k_rope). Autograd's accumulation of
  // the narrowed views' gradients into the leaves is in the time of both backends, not in the bytes.
  double bytes = 2.0 * (rows * (dn + dr) + rows * dn + B * T * dr + 2 * rows * (dn + dr));
  if (backward) bytes += 2.0 * (2 * rows * dr + rows * dr + B * T * dr);
  c10::AutoGradMode grad_mode(backward);
  timed(st, bytes, [&] {
    auto [qf, kf] = fn(q.narrow(-1, 0, dn), q.narrow(-1, dn, dr), kv.narrow(-1, 0, dn),
                       kv_down.narrow(-1, kv_lora, dr).unsqueeze(2), cos, sin);
    if (backward) torch::autograd::grad({qf, kf}, {q, kv_down, kv}, {gq, gk});
  });
}

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

// The optimizer seam: the state lives on the GPU, lr and step counts are device tensors (the seam's
// contract); each timed iteration is one update of every tensor of the set.
void optimizer_bench(benchmark::State& st, const std::string& backend) {
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat);
  std::vector<std::vector<int64_t>> shapes = {{32768, 1024}};
  for (int layer = 0; layer < 12; ++layer) {
    for (int m = 0; m < 4; ++m) shapes.push_back({m % 2 ? 1024 : 4096, m % 2 ? 4096 : 1024});
    for (const int64_t n : {1024, 1024, 16, 16, 64, 1024}) shapes.push_back({n});
  }
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  double elements = 0;
  for (const auto& shape : shapes) {
    params.push_back(torch::randn(shape, opts));
    grads.push_back(torch::randn(shape, opts) * 1e-2);
    exp_avgs.push_back(torch::zeros(shape, opts));
    exp_avg_sqs.push_back(torch::zeros(shape, opts));
    steps.push_back(torch::zeros({}, opts));
    elements += static_cast<double>(params.back().numel());
  }
  const auto lr = torch::full({}, 3e-4, opts);
  const ablate::kernels::AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  const auto& update = implementations().optimizer.at(backend);
  timed(st, 7.0 * 4.0 * elements, [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, hyper); });
  st.counters["parameters_M"] = elements / 1e6;
}

void register_all() {
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "grouped_mm"})
    benchmark::RegisterBenchmark(("moe_dispatch/" + backend + "/fwd_bwd/autocast").c_str(), moe_dispatch_bench, backend)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  for (const std::string backend : {"reference", "fused_adamw"})
    benchmark::RegisterBenchmark(("optimizer/" + backend + "/step").c_str(), optimizer_bench, backend)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  for (const std::string backend : {"reference", "chunked", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("loss", backend)) continue;
    benchmark::RegisterBenchmark(("loss/" + backend + "/fwd_bwd/autocast").c_str(), loss_bench, backend)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(20);
  }
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
    if (!ablate::kernels::has_implementation("rope", backend)) continue;
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark(("rope/" + backend + (backward ? "/fwd_bwd" : "/fwd") + "/bf16").c_str(),
                                   rope_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
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
