// model/blocks_bench.cpp: one block of nam56r-small forward + backward on the GPU, as the model runs it
// (bf16 autocast, fp32 parameters, 8 x 2048 tokens), replayed from a CUDA graph as the fastest posture's
// captured step does: what a layer costs with its seams and its glue, beside kernels_bench's seam-only
// cases. moe_layer/<moe_router backend>: the E layer (its pre-norm, the router, the load-balancing loss,
// the grouped_mm dispatch),
// the layer issue #14 measures against 1.8 ms. Counters: median_us, peak_extra_MiB.
// Timed with CUDA events, an L2 flush before each iteration (kernels/bench_util.h). Run:
// build/bench/blocks_bench [--benchmark_filter=moe_layer]
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#if defined(ABLATE_HAVE_CUDA)
#include "kernels/bench_util.h"
#include "kernels/dispatch.h"
#include "model/blocks.h"
#include "model/config.h"

namespace {

using namespace ablate;

void moe_layer(benchmark::State& st, const std::string& router) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto config = *model::named_config("nam56r-small");
  const std::map<std::string, std::string> backends = {
      {"moe_router", router}, {"moe_dispatch", "grouped_mm"}, {"residual_norm", "fused_cuda"}};
  const auto dispatcher = std::make_shared<const kernels::Dispatcher>(
      backends, kernels::describe_device(cuda, torch::kBFloat16), /*strict=*/true);
  model::SeededInit init(/*seed=*/1234, config.init_std);
  auto block = std::make_shared<model::MoeBlock>(config, dispatcher, init);
  block->to(cuda);
  auto x = torch::randn({8, 2048, config.d_model}, torch::TensorOptions(cuda).dtype(torch::kBFloat16)).requires_grad_(true);
  auto inputs = block->parameters();
  inputs.push_back(x);
  auto step = [&] {
    const auto loss = kernels::bench::under_bf16_autocast([&] {
      // The layer's pre-norm (HybridModel applies it with the block's own `norm` weight), then the block.
      const auto out = block->forward(dispatcher->residual_norm(torch::Tensor(), x, block->norm, config.norm_eps).first);
      return out.y.to(torch::kFloat).square().mean() + config.moe.aux_coef * out.aux;
    });
    torch::autograd::grad({loss}, inputs);
  };
  const double extra_mib = kernels::bench::peak_extra_mib(step);
  kernels::bench::timed_graph(st, 0.0, step);
  st.counters["peak_extra_MiB"] = extra_mib;
}

}  // namespace
#endif  // ABLATE_HAVE_CUDA

int main(int argc, char** argv) {
#if defined(ABLATE_HAVE_CUDA)
  if (torch::cuda::is_available())
    for (const std::string router : {"reference", "fused_cuda"})
      if (ablate::kernels::has_implementation("moe_router", router))
        benchmark::RegisterBenchmark(("moe_layer/" + router + "/graph").c_str(), moe_layer, router)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(20);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
