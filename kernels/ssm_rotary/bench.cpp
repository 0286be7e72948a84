// kernels/ssm_rotary/bench.cpp: Mamba-3's rotary keys and queries at nam56r-small's shape (B 8, T 2048,
// H 32, N 128, S 32; computed in fp32 as the M block does), forward and forward+backward, every backend,
// q and k returned in fp32 or (`/bf16`, qk_dtype: what the M block asks under autocast) in bf16; and with
// bf16 q and k at nam56r-medium's (`/medium`: B 4, T 4096, H 64) and nam56r-large's (`/large`: B 2,
// T 4096, H 128) shapes, where the heads a row grow with the width.
// The floor is the fused kernels' own traffic: forward writes q and k (2 x B T H N in their dtype) and reads Phi
// (B T H S) plus b, c; backward reads dq, dk and Phi and writes dPhi, db, dc. Phi's sum over time and its
// backward (LibTorch's cumsum in the reference, fused_cuda's own scan) are timed but not counted in the
// bytes.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration; `peak_extra_MiB`: the allocator's peak above what was allocated
// before the step; `forward_live_MiB` (fwd_bwd): what a forward leaves allocated until its backward, the
// outputs q, k (2 x 268 MiB here) and everything saved for backward. Run: build/bench/kernels_bench
// --benchmark_filter=ssm_rotary
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

struct RotaryBenchShape {
  const char* suffix;  // "" for nam56r-small's
  int64_t B, T, H;
};
constexpr int64_t N = 128, S = 32;  // every named configuration's state dims and turned pairs

void ssm_rotary_bench(benchmark::State& st, std::string backend, bool backward, torch::Dtype qk_dtype,
                      RotaryBenchShape shape) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().ssm_rotary.at(backend);
  const auto opts = torch::TensorOptions(cuda).dtype(torch::kFloat);
  const int64_t B = shape.B, T = shape.T, H = shape.H;
  auto b = torch::randn({B, T, N}, opts).requires_grad_(backward);
  auto c = torch::randn({B, T, N}, opts).requires_grad_(backward);
  auto b_bias = (1 + 0.5 * torch::randn({H, N}, opts)).requires_grad_(backward);
  auto c_bias = (1 + 0.5 * torch::randn({H, N}, opts)).requires_grad_(backward);
  auto delta = torch::softplus(torch::randn({B, T, H}, opts) - 4).requires_grad_(backward);
  auto theta = torch::randn({B, T, S}, opts).requires_grad_(backward);
  const auto gq = torch::randn({B, T, H, N}, opts.dtype(qk_dtype)), gk = torch::randn({B, T, H, N}, opts.dtype(qk_dtype));
  const double f32 = 4.0, qk = double(B) * T * H * N, angles = double(B) * T * H * S, rows = double(B) * T * N;
  const double qk_bytes = qk_dtype == torch::kBFloat16 ? 2.0 : 4.0;
  double bytes = 2 * qk_bytes * qk + f32 * (angles + 2 * rows);
  if (backward) bytes += 2 * qk_bytes * qk + f32 * (2 * angles + 4 * rows);
  const SsmRotaryInputs inputs{.b = b, .c = c, .b_bias = b_bias, .c_bias = c_bias, .delta = delta, .theta = theta,
                               .phi0 = {}, .qk_dtype = qk_dtype};
  c10::AutoGradMode grad_mode(backward);
  const auto step = [&] {
    const auto out = fn(inputs);
    if (backward) torch::autograd::grad({out.q, out.k}, {b, c, b_bias, c_bias, delta, theta}, {gq, gk});
  };
  st.counters["peak_extra_MiB"] = peak_extra_mib(step);
  if (backward) {
    const auto allocated = [] {
      const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
      return double(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[agg].current);
    };
    torch::cuda::synchronize();
    const double before = allocated();
    const auto out = fn(inputs);
    torch::cuda::synchronize();
    st.counters["forward_live_MiB"] = (allocated() - before) / (1 << 20);
  }
  timed(st, bytes, step);
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(ssm_rotary) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  const RotaryBenchShape small{"", 8, 2048, 32}, medium{"/medium", 4, 4096, 64}, large{"/large", 2, 4096, 128};
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("ssm_rotary", backend)) continue;
    const auto add = [&](bool backward, torch::Dtype qk_dtype, RotaryBenchShape shape) {
      benchmark::RegisterBenchmark(("ssm_rotary/" + backend + (backward ? "/fwd_bwd" : "/fwd") +
                                    (qk_dtype == torch::kFloat ? "/fp32" : "/bf16") + shape.suffix)
                                       .c_str(),
                                   ssm_rotary_bench, backend, backward, qk_dtype, shape)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    };
    for (const bool backward : {false, true})
      for (const auto qk_dtype : {torch::kFloat, torch::kBFloat16}) add(backward, qk_dtype, small);
    for (const auto& shape : {medium, large})
      for (const bool backward : {false, true}) add(backward, torch::kBFloat16, shape);
  }
}
#endif  // ABLATE_HAVE_CUDA
