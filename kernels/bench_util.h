// kernels/bench_util.h: what every seam's benchmark (kernels/<seam>/bench.cpp, one program:
// build/bench/kernels_bench) shares: the CUDA-event timed loop with an L2 flush, the host-clock loop
// (CPU or GPU, tokens/s), the allocator-peak probe, the bf16 autocast bracket, nam56r-small's shapes
// and the H100 ceilings (docs/gpu.md), and the registration of a seam's cases (ABLATE_BENCHMARKS), run
// by kernels/bench_main.cpp before the command line is parsed. CUDA cases register only when a GPU is visible.
// Run: build/bench/kernels_bench [--benchmark_filter=<seam>/...]
#pragma once
#include <benchmark/benchmark.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/registry.h"

namespace ablate::kernels::bench {

// Measured on the H100 (docs/gpu.md): device-to-device copy counting read + write, dense bf16 GEMM.
constexpr double kCopyCeilingBytesPerSecond = 3.0e12;
constexpr double kBf16PeakFlopsPerSecond = 790e12;
// The H100 SXM datasheet's dense peaks, against which a GEMM's share of its precision's peak is stated.
constexpr double kBf16DatasheetFlopsPerSecond = 989e12;
constexpr double kFp8DatasheetFlopsPerSecond = 1979e12;
// nam56r-small: 8 x 2048 tokens, d 1024, dense FFN 2816.
constexpr int64_t kRows = 8 * 2048, kWidth = 1024, kFfn = 2816;

inline double size_of(torch::ScalarType t) { return static_cast<double>(c10::elementSize(t)); }

// Adds a seam's benchmark cases; called by ABLATE_BENCHMARKS during static initialisation.
bool add_registrar(void (*register_cases)());

// Runs `step` (one forward, or forward+backward) in the timed loop on the host clock, the device
// synchronised after each iteration (CPU or GPU): counters tokens/s (`tokens` an iteration) and, on
// CUDA, peak_GiB (the caching allocator's peak allocated bytes during the loop). For cases that compare
// CPU and GPU forms, or whole calls with their host work (the reference scans' cases).
template <class Step>
inline void timed_host(benchmark::State& st, torch::Device dev, int64_t tokens, Step step) {
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index());
  };
  step();  // warm-up: allocator pools, cuBLAS handles, one-time dispatch
  sync();
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
  for (auto _ : st) {
    step();
    sync();
  }
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  if (dev.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    st.counters["peak_GiB"] = static_cast<double>(stats.allocated_bytes[agg].peak) / (1 << 30);
  }
}

#if defined(ABLATE_HAVE_CUDA)
// Runs `step` in the timed loop: CUDA events around each iteration on the current stream, reported
// as manual time; counters from the median iteration (robust to the odd slow one): median_us and, when
// `bytes` (what the op must move at least) is given, GB/s, pct_of_copy_ceiling, floor_us, x_floor.
// Before each iteration a 256 MiB buffer is zeroed: it evicts the inputs from L2 (50 MiB on H100), so
// every iteration reads HBM, and it keeps the GPU busy while the host enqueues the start event, the
// op's launches and the stop event, so the events time GPU work only, not the host's launch latency
// (a few microseconds a launch: 5-15 % of a kernel of 60-90 us).
template <class Step>
inline void timed(benchmark::State& st, double bytes, Step step) {
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
  // The memory floor: the bytes at the copy ceiling; x_floor = how far above it the op runs.
  const double floor = bytes / kCopyCeilingBytesPerSecond;
  st.counters["GB/s"] = bytes / median / 1e9;
  st.counters["pct_of_copy_ceiling"] = 100.0 * floor / median;
  st.counters["floor_us"] = floor * 1e6;
  st.counters["x_floor"] = median / floor;
}

// As timed(), with `step` captured once into a CUDA graph (after eager warm-up on a side stream, as the
// harness's whole-step capture does; autocast's cast cache off inside, as there) and each iteration a
// replay: the GPU time of the op's kernels without the host's launch gaps, which is what the op costs
// inside the fastest posture's captured step. An op of many small launches (a MoE layer: ~60 with its
// backward) can be host-bound eager; the two cases side by side tell how much.
template <class Step>
inline void timed_graph(benchmark::State& st, double bytes, Step step) {
  const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  c10::cuda::CUDAStreamGuard on_side(side);
  for (int i = 0; i < 3; ++i) step();  // allocator pools, cuBLAS/CUTLASS workspaces: outside the capture
  side.synchronize();
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  step();
  graph.capture_end();
  at::autocast::set_autocast_cache_enabled(cache);
  timed(st, bytes, [&] { graph.replay(); });
}

// Peak allocated memory of one call of `step` above what is allocated before it (inputs, allocator
// state), in MiB; `step` runs once before to warm the allocator's pools.
template <class Step>
inline double peak_extra_mib(Step step) {
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
inline auto under_bf16_autocast(Forward forward) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);  // the CUDA default is fp16
  auto out = forward();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  return out;
}
#endif  // ABLATE_HAVE_CUDA

}  // namespace ablate::kernels::bench

// Defines the function that registers a seam's benchmark cases (benchmark::RegisterBenchmark calls).
#define ABLATE_BENCHMARKS(id)                                                                         \
  static void ablate_benchmarks_##id();                                                             \
  [[maybe_unused]] static const bool ablate_benchmarks_registered_##id =                            \
      ::ablate::kernels::bench::add_registrar(&ablate_benchmarks_##id);                             \
  static void ablate_benchmarks_##id()
