// kernels/join_last_dim_bench.cpp: join_last_dim (kernels/join_last_dim.h) against at::cat at the A
// block's gradient joins in nam56r-small (B 8, T 2048, 16 heads, bf16): `q` joins d(q_nope) (a narrow of
// the rope seam's [.., 96] dq) and d(q_rope) [.., 32]; `kv` joins d(k_nope) (a narrow of dk) and dv (a
// narrow of the attention's head-padded [B, H, T, 96] gradient, transposed to [B, T, H, 64]). Bytes: the
// parts read and the joined tensor written. Timed with CUDA events after an L2 flush (bench_util.h).
// Run: build/bench/kernels_bench --benchmark_filter=join_last_dim
#include "kernels/bench_util.h"
#include "kernels/join_last_dim.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

void join_bench(benchmark::State& st, bool fused, bool kv) {
  constexpr int64_t B = 8, T = 2048, H = 16;
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const auto dq = torch::randn({B, T, H, 96}, opts);
  const auto first = dq.narrow(-1, 0, 64);
  const auto second = kv ? torch::randn({B, H, T, 96}, opts).narrow(-1, 0, 64).transpose(1, 2)
                         : torch::randn({B, T, H, 32}, opts);
  const std::vector<torch::Tensor> parts = {first, second};
  const std::vector<int64_t> widths = {64, second.size(-1)};
  const double bytes = 2.0 * double(first.numel() + second.numel()) * 2;
  timed(st, bytes, [&] { benchmark::DoNotOptimize(fused ? join_last_dim(parts, widths) : torch::cat(parts, -1)); });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(join_last_dim) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const bool kv : {false, true})
    for (const bool fused : {false, true})
      benchmark::RegisterBenchmark(
          (std::string("join_last_dim/") + (fused ? "join" : "cat") + (kv ? "/kv" : "/q")).c_str(), join_bench, fused, kv)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
