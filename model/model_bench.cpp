// model/model_bench.cpp: building a named model on the CPU, which every run does before moving it to
// its device: the seeded initialiser's draws (SeededInit) dominate, 290 M parameters for nam56r-small.
// Counters: parameters and M params/s. Threads: LibTorch's intra-op pool (the machine's cores), as in
// a run. Run: build/bench/model_bench
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <string>

#include "model/config.h"
#include "model/hybrid_model.h"

namespace {

void build_model(benchmark::State& st, const std::string& name) {
  const auto config = ablate::model::named_config(name);
  if (!config) {
    st.SkipWithError(("no named model config " + name).c_str());
    return;
  }
  int64_t parameters = 0;
  for (auto _ : st) {
    ablate::model::HybridModel model(*config, nullptr, /*seed=*/1234);
    parameters = 0;
    for (const auto& p : model->parameters()) parameters += p.numel();
    benchmark::DoNotOptimize(parameters);
  }
  st.counters["parameters"] = static_cast<double>(parameters);
  st.counters["Mparams/s"] = benchmark::Counter(static_cast<double>(parameters) * st.iterations() / 1e6,
                                                benchmark::Counter::kIsRate);
  st.counters["threads"] = at::get_num_threads();
}

}  // namespace

BENCHMARK_CAPTURE(build_model, tiny, std::string("tiny"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(build_model, nam56r_small, std::string("nam56r-small"))->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_MAIN();
