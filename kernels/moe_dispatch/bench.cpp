// kernels/moe_dispatch/bench.cpp: an E layer's expert dispatch forward+backward under bf16 autocast,
// dropless, a skewed router (expert loads 0.3x-2.5x the mean, as early in training), at nam56r-small's
// expert shapes (16384 tokens, d 1024, 16 experts, top-2, expert FFN 768: moe_dispatch/<backend>/fwd_bwd/
// autocast) and nam56r-medium's (16384 tokens, d 2048, f 1536: moe_dispatch/<backend>/medium/...);
// forward alone too for the grouped backends (/fwd/). Counters TFLOP/s (the three expert matmuls, 6 * T *
// k * d * f forward, three times that with backward), pct_of_peak (of the datasheet's dense peak of the
// precision the GEMMs run in: grouped_mm_fp8_rowwise's all six are FP8, so the FP8 peak) and
// peak_extra_MiB (the reference pads every expert to the largest load). grouped_mm_fp8_rowwise's times
// include its quantisation passes; grouped_mm's its casts of the fp32 master weights.
// moe_dispatch/slot_moves/{scatter_add,gather}: the data movement around the GEMMs alone, forward +
// backward at nam56r-small's shapes: token rows into expert order (bf16) and the weighted slots back into
// token order (fp32 in both forms), once as index_select + index_add (grouped_mm before 2026-11-25: its
// backward and its combine scatter-add) and once as grouped_mm moves rows now (gather_slot_rows and
// combine_slot_rows: a gather one way, a k-row sum the other, fused on CUDA), in one call.
// moe_dispatch/gather_rows_or_zero/{ops,fused}: expert parallelism's padded row movement at nam56r-large's
// E layer (EP 2), LibTorch's append-then-index_select against the one CUDA pass, replayed from a graph.
// moe_dispatch/group_by_expert/{ops,counting_sort}: the slots' grouping by expert alone (the 32768 slots
// of an E layer, skewed loads): LibTorch's ops (stable radix sort, scatters, cumsum) against the one-launch
// counting sort; replayed from a CUDA graph, as in the captured step, so launch gaps do not hide it.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration; the grouped cases also replayed from a CUDA graph (`/graph`: no
// host launch gaps, as inside the fastest posture's captured step). Run:
// build/bench/kernels_bench --benchmark_filter=moe_dispatch
#include "kernels/bench_util.h"
#include "kernels/dispatch.h"
#include "kernels/moe_dispatch/expert_exchange.h"
#include "kernels/moe_dispatch/expert_groups.h"

#include <map>

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

// An E layer's expert shapes: tokens T (batch x sequence), d, E experts, top k, expert FFN f.
struct ExpertShapes {
  const char* label;  // "" for nam56r-small (the names this benchmark had before it had shapes)
  int64_t T, d, E, k, f;
};
constexpr ExpertShapes kSmall{"", 8 * 2048, 1024, 16, 2, 768}, kMedium{"medium/", 4 * 4096, 2048, 16, 2, 1536};

void moe_dispatch_bench(benchmark::State& st, std::string backend, ExpertShapes s, bool backward, bool graph) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().moe_dispatch.at(backend);
  const int64_t T = s.T, d = s.d, E = s.E, k = s.k, f = s.f;
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({T, d}, opts.dtype(torch::kBFloat16)).requires_grad_(backward);
  auto w1 = (0.02 * torch::randn({E, f, d}, opts)).requires_grad_(backward);
  auto w3 = (0.02 * torch::randn({E, f, d}, opts)).requires_grad_(backward);
  auto w2 = (0.02 * torch::randn({E, d, f}, opts)).requires_grad_(backward);
  // A per-expert bias skews the loads the way an untrained router does.
  const auto logits = torch::randn({T, E}, opts) + torch::linspace(-1.0, 1.0, E, opts);
  const auto [top_w, top_idx] = logits.softmax(-1).topk(k, -1);
  const auto weights = top_w / top_w.sum(-1, true);
  c10::AutoGradMode grad_mode(backward);
  auto step = [&] {
    const auto y =
        under_bf16_autocast([&] { return fn(x, top_idx, weights, w1, w3, w2, /*capacity_factor=*/0.0, nullptr, nullptr); });
    if (backward) torch::autograd::grad({y.to(torch::kFloat).square().mean()}, {x, w1, w3, w2});
  };
  const double extra_mib = peak_extra_mib(step);
  graph ? timed_graph(st, 0.0, step) : timed(st, 0.0, step);
  const double flops = 6.0 * T * k * d * f * (backward ? 3.0 : 1.0), median = st.counters["median_us"] * 1e-6;
  const bool fp8 = find_backend("moe_dispatch", backend)->fp8_gemms;
  st.counters["peak_extra_MiB"] = extra_mib;
  st.counters["TFLOP/s"] = flops / median / 1e12;
  st.counters["pct_of_peak"] = 100.0 * flops / median / (fp8 ? kFp8DatasheetFlopsPerSecond : kBf16DatasheetFlopsPerSecond);
}

// An exchange of `ranks` places in one process that mirrors: every place sends this rank what this rank
// sends it (at a capacity the splits are symmetric), so the rank's GEMMs see expert parallelism's shapes
// (E/N experts, N x capacity rows each) and an exchange costs one device copy: the pipelined exchange's
// compute without its communication (the rows are not what a real job would compute on).
class MirrorExchange : public ExpertExchange {
 public:
  MirrorExchange(int64_t ranks, int64_t chunks) : ranks_(ranks), chunks_(chunks) {}
  int64_t ranks() const override { return ranks_; }
  int64_t rank() const override { return 0; }
  int64_t chunks() const override { return chunks_; }
  void start_all_to_all(int64_t key, Tensor& out, const Tensor& in, const std::vector<int64_t>&,
                        const std::vector<int64_t>&) const override {
    out.copy_(in);
    started_[key] = out;
  }
  Tensor wait_all_to_all(int64_t key) const override {
    auto out = std::move(started_.at(key));
    started_.erase(key);
    return out;
  }

 private:
  int64_t ranks_, chunks_;
  mutable std::map<int64_t, Tensor> started_;
};

// One rank of nam56r-medium's E layer at expert_parallel 4 (4 of the 16 experts) through the mirror, at a
// capacity of 1.25 (4 x 2560 rows an expert) or dropless (capacity_factor 0: the rows the router gives,
// the counts exchanged and read on the host, so eager only), the rank's experts in `chunks` pipelined
// chunks: what the exchange's own passes and cutting the GEMMs into chunks cost, against which the
// overlap the chunks buy on real GPUs is weighed. TFLOP/s counts the rows the experts run (capacity: E x
// capacity, padding included; dropless: the rank's slots, as the mirror returns them).
void expert_pipeline_bench(benchmark::State& st, int64_t chunks, bool graph, double capacity_factor) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto& fn = implementations().moe_dispatch.at("grouped_mm");
  const ExpertShapes s = kMedium;
  constexpr int64_t kRanks = 4;
  const int64_t local = s.E / kRanks;
  const auto opts = torch::TensorOptions(cuda);
  auto x = torch::randn({s.T, s.d}, opts.dtype(torch::kBFloat16)).requires_grad_(true);
  auto w1 = (0.02 * torch::randn({local, s.f, s.d}, opts)).requires_grad_(true);
  auto w3 = (0.02 * torch::randn({local, s.f, s.d}, opts)).requires_grad_(true);
  auto w2 = (0.02 * torch::randn({local, s.d, s.f}, opts)).requires_grad_(true);
  const auto logits = torch::randn({s.T, s.E}, opts) + torch::linspace(-1.0, 1.0, s.E, opts);
  const auto [top_w, top_idx] = logits.softmax(-1).topk(s.k, -1);
  const auto weights = top_w / top_w.sum(-1, true);
  const MirrorExchange exchange(kRanks, chunks);
  auto step = [&] {
    const auto y = under_bf16_autocast(
        [&] { return fn(x, top_idx, weights, w1, w3, w2, capacity_factor, nullptr, &exchange); });
    torch::autograd::grad({y.to(torch::kFloat).square().mean()}, {x, w1, w3, w2});
  };
  graph ? timed_graph(st, 0.0, step) : timed(st, 0.0, step);
  const int64_t rows = capacity_factor > 0 ? s.E * expert_capacity(capacity_factor, s.T * s.k, s.E) : s.T * s.k;
  const double flops = 6.0 * rows * s.d * s.f * 3.0, median = st.counters["median_us"] * 1e-6;
  st.counters["TFLOP/s"] = flops / median / 1e12;
  st.counters["pct_of_peak"] = 100.0 * flops / median / kBf16DatasheetFlopsPerSecond;
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

// Expert parallelism's padded row movement at nam56r-large's E layer at EP 2 (a rank's 16384 slot rows of
// d 4096 in bf16 into 16 experts x 1280 capacity places, a fifth of them padding): the LibTorch form
// (append a zero row to a copy of the rows, then index_select) against the one CUDA pass; bytes = the
// gathered rows written and the kept ones read.
void gather_rows_or_zero_bench(benchmark::State& st, bool fused) {
  const torch::Device cuda(torch::kCUDA, 0);
  constexpr int64_t n = 16384, d = 4096, places = 16 * 1280;
  const auto x = torch::randn({n, d}, torch::TensorOptions(cuda).dtype(torch::kBFloat16));
  const auto index = torch::where(torch::arange(places, cuda) < n, torch::randperm(places, cuda) % n,
                                  torch::full({places}, n, torch::TensorOptions(cuda).dtype(torch::kLong)));
  timed_graph(st, 2.0 * (places + n) * d, [&] {
    if (fused) return (void)gather_rows_or_zero(x, index);
    (void)torch::cat({x, torch::zeros({1, d}, x.options())}).index_select(0, index);
  });
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
  using namespace ablate::kernels;
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  // Eager, and replayed from a CUDA graph as the fastest posture runs it (the reference pads to the
  // largest load, read on the host: it cannot be captured; nor is it run at the medium shapes).
  const auto device = describe_device(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
  for (const std::string backend : {"reference", "grouped_mm", "grouped_mm_fp8_rowwise"}) {
    if (!has_implementation("moe_dispatch", backend) || !why_unavailable(*find_backend("moe_dispatch", backend), device).empty())
      continue;
    const bool grouped = backend != "reference";
    for (const auto& shapes : {kSmall, kMedium})
      for (const bool backward : {true, false})
        for (const bool graph : {false, true}) {
          if (!grouped && (graph || !backward || shapes.label[0] != '\0')) continue;
          const std::string name = "moe_dispatch/" + backend + "/" + shapes.label + (backward ? "fwd_bwd" : "fwd") +
                                   "/autocast" + (graph ? "/graph" : "");
          benchmark::RegisterBenchmark(name.c_str(), moe_dispatch_bench, backend, shapes, backward, graph)
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond)
              ->Iterations(20);
        }
  }
  if (has_implementation("moe_dispatch", "grouped_mm"))
    for (const double capacity_factor : {1.25, 0.0})
      for (const int64_t chunks : {1, 2, 4})
        for (const bool graph : {false, true}) {
          if (capacity_factor == 0 && graph) continue;  // the dropless exchange reads its counts on the host
          const std::string name = std::string("moe_dispatch/grouped_mm/medium/ep4_mirror") +
                                   (capacity_factor > 0 ? "" : "/dropless") + "/chunks:" + std::to_string(chunks) +
                                   "/fwd_bwd/autocast" + (graph ? "/graph" : "");
          benchmark::RegisterBenchmark(name.c_str(), expert_pipeline_bench, chunks, graph, capacity_factor)
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
  for (const bool fused : {false, true})
    benchmark::RegisterBenchmark(fused ? "moe_dispatch/gather_rows_or_zero/fused" : "moe_dispatch/gather_rows_or_zero/ops",
                                 gather_rows_or_zero_bench, fused)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
}
#endif  // ABLATE_HAVE_CUDA
