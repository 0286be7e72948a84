// kernels/moe_dispatch/bench.cpp: nam56r-small's E layer forward+backward under bf16 autocast: 16384
// tokens, d 1024, 16 experts, top-2, expert FFN 768, dropless, a skewed router (expert loads 0.3x-2.5x
// the mean, as early in training); counters TFLOP/s (the three expert matmuls, 18 * T * k * d * f for
// forward + backward) and peak_extra_MiB (the reference pads every expert to the largest load).
// moe_dispatch/slot_moves/{scatter_add,gather}: the data movement around the GEMMs alone, forward +
// backward at the same shapes: token rows into expert order (bf16) and the weighted slots back into token
// order (fp32 in both forms), once as index_select + index_add (grouped_mm before 2026-11-25: its
// backward and its combine scatter-add) and once as grouped_mm moves rows now (gather_slot_rows and
// combine_slot_rows: a gather one way, a k-row sum the other, fused on CUDA), in one call.
// moe_dispatch/group_by_expert/{ops,counting_sort}: the slots' grouping by expert alone (the 32768 slots
// of an E layer, skewed loads): LibTorch's ops (stable radix sort, scatters, cumsum) against the one-launch
// counting sort; replayed from a CUDA graph, as in the captured step, so launch gaps do not hide it.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration; the grouped_mm case also replayed from a CUDA graph (`/graph`: no
// host launch gaps, as inside the fastest posture's captured step). Run:
// build/bench/kernels_bench --benchmark_filter=moe_dispatch
#include "kernels/bench_util.h"
#include "kernels/moe_dispatch/expert_groups.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

void moe_dispatch_bench(benchmark::State& st, std::string backend, bool graph) {
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
        under_bf16_autocast([&] { return fn(x, top_idx, weights, w1, w3, w2, /*capacity_factor=*/0.0, nullptr, nullptr); });
    torch::autograd::grad({y.to(torch::kFloat).square().mean()}, {x, w1, w3, w2});
  };
  const double extra_mib = peak_extra_mib(step);
  graph ? timed_graph(st, 0.0, step) : timed(st, 0.0, step);
  st.counters["peak_extra_MiB"] = extra_mib;
  st.counters["TFLOP/s"] = 18.0 * T * k * d * f / (st.counters["median_us"] * 1e-6) / 1e12;
}

void slot_moves_bench(benchmark::State& st, bool gather) {
  const torch::Device cuda(torch::kCUDA, 0);
  constexpr int64_t T = 16384, d = 1024, E = 16, k = 2, S = T * k;
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({T, d}, opts.dtype(torch::kBFloat16)).requires_grad_(true);
  auto expert_out = torch::randn({S, d}, opts).requires_grad_(true);  // fp32, as the weighted slots
  const auto groups = group_by_expert(torch::randint(E, {T, k}, opts.dtype(torch::kLong)), E);
  const auto token_of_slot = torch::div(groups.by_expert, k, "floor");
  // Bytes the gather form must move at least: rows in and out (bf16), slots in and y out (fp32), and
  // the same again in backward.
  const double bytes = 2.0 * (2.0 * S * d * 2 + S * d * 4 + T * d * 4);
  auto step = [&] {
    Tensor rows, y;
    if (gather) {
      rows = gather_slot_rows(x, groups.by_expert, groups.position, k);
      y = combine_slot_rows(expert_out, groups.by_expert, groups.position, k, torch::kFloat);
    } else {
      rows = x.index_select(0, token_of_slot);
      y = torch::zeros({T, d}, opts).index_add(0, token_of_slot, expert_out);
    }
    torch::autograd::grad({rows.to(torch::kFloat).sum() + y.sum()}, {x, expert_out});
  };
  timed(st, bytes, step);
}

void group_by_expert_bench(benchmark::State& st, bool counting_sort) {
  const torch::Device cuda(torch::kCUDA, 0);
  constexpr int64_t T = 16384, E = 16, k = 2;
  const auto logits = torch::randn({T, E}, torch::TensorOptions(cuda)) + torch::linspace(-1.0, 1.0, E, cuda);
  const auto top_idx = std::get<1>(logits.topk(k, -1));
  // Bytes at least: the ids read, by_expert, position and sorted_expert written (int64).
  timed_graph(st, 4.0 * T * k * 8, [&] {
    benchmark::DoNotOptimize(counting_sort ? group_by_expert(top_idx, E) : group_by_expert_ops(top_idx, E));
  });
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(moe_dispatch) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  // Eager, and replayed from a CUDA graph as the fastest posture runs it (the reference pads to the
  // largest load, read on the host: it cannot be captured).
  for (const std::string backend : {"reference", "grouped_mm"})
    for (const bool graph : {false, true}) {
      if (graph && backend == "reference") continue;
      benchmark::RegisterBenchmark(("moe_dispatch/" + backend + "/fwd_bwd/autocast" + (graph ? "/graph" : "")).c_str(),
                                   moe_dispatch_bench, backend, graph)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
    }
  for (const bool counting_sort : {false, true})
    benchmark::RegisterBenchmark(counting_sort ? "moe_dispatch/group_by_expert/counting_sort"
                                               : "moe_dispatch/group_by_expert/ops",
                                 group_by_expert_bench, counting_sort)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  for (const bool gather : {false, true})
    benchmark::RegisterBenchmark(gather ? "moe_dispatch/slot_moves/gather" : "moe_dispatch/slot_moves/scatter_add",
                                 slot_moves_bench, gather)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
}
#endif  // ABLATE_HAVE_CUDA
