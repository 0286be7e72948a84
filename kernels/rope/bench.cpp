// kernels/rope/bench.cpp: MLA rope at nam56r-small's shape (B 8, T 2048, H 16, dn 64, dr 32, bf16),
// inputs the strided views the model's projections produce; forward and forward+backward. Target: the
// fused forward >= 80 % of the copy ceiling.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=rope
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

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

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(rope) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "fused_cuda"}) {
    if (!ablate::kernels::has_implementation("rope", backend)) continue;
    for (const bool backward : {false, true})
      benchmark::RegisterBenchmark(("rope/" + backend + (backward ? "/fwd_bwd" : "/fwd") + "/bf16").c_str(),
                                   rope_bench, backend, backward)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  }
}
#endif  // ABLATE_HAVE_CUDA
