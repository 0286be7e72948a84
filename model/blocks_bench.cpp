// model/blocks_bench.cpp: one block of nam56r-small forward + backward on the GPU, as the model runs it
// (bf16 autocast, fp32 parameters, 8 x 2048 tokens), replayed from a CUDA graph as the fastest posture's
// captured step does: what a layer costs with its seams and its glue, beside kernels_bench's seam-only
// cases. moe_layer/<moe_router backend>/graph: the E layer (its pre-norm, the router, the load-balancing
// loss, the grouped_mm dispatch) forward, and backward from a given gradient of its output (random, fixed)
// and of the aux loss (its coefficient): the layer issue #14 measures against 1.8 ms. .../graph_square_loss:
// the same with the gradient made by a scalar loss, mean(y^2) in fp32 (what this benchmark timed before b465fde: its
// cast, square and mean and their backward, ~0.38 ms on the H100, are not the layer's). Counters: median_us,
// peak_extra_MiB. Timed with CUDA events, an L2 flush before each iteration (kernels/bench_util.h). Run:
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

// How the backward gets its output gradient.
enum class Upstream { given_gradient, square_loss };

void moe_layer(benchmark::State& st, const std::string& router, Upstream upstream) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto config = *model::named_config("nam56r-small");
  const std::map<std::string, std::string> backends = {
      {"moe_router", router}, {"moe_dispatch", "grouped_mm"}, {"residual_norm", "fused_cuda"}};
  const auto dispatcher = std::make_shared<const kernels::Dispatcher>(
      backends, kernels::describe_device(cuda, torch::kBFloat16), /*strict=*/true);
  model::SeededInit init(/*seed=*/1234, config.init_std);
  auto block = std::make_shared<model::MoeBlock>(config, dispatcher, init);
  block->to(cuda);
  const auto bf16 = torch::TensorOptions(cuda).dtype(torch::kBFloat16);
  auto x = torch::randn({8, 2048, config.d_model}, bf16).requires_grad_(true);
  // A loss's gradient of the layer output has the scale 1 / tokens; its values do not change the work.
  const auto dy = torch::randn({8, 2048, config.d_model}, bf16) / (8.0 * 2048.0);
  const auto daux = torch::full({}, config.moe.aux_coef, torch::TensorOptions(cuda).dtype(torch::kFloat));
  auto inputs = block->parameters();
  inputs.push_back(x);
  auto step = [&] {
    // The layer's pre-norm (HybridModel applies it with the block's own `norm` weight), then the block.
    const auto forward = [&] {
      return block->forward(dispatcher->residual_norm(torch::Tensor(), x, block->norm, config.norm_eps).first);
    };
    if (upstream == Upstream::given_gradient) {
      const auto out = kernels::bench::under_bf16_autocast(forward);
      torch::autograd::grad({out.y, out.aux}, inputs, {dy, daux});
    } else {
      const auto loss = kernels::bench::under_bf16_autocast([&] {
        const auto out = forward();
        return out.y.to(torch::kFloat).square().mean() + config.moe.aux_coef * out.aux;
      });
      torch::autograd::grad({loss}, inputs);
    }
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
        for (const auto& [label, upstream] : {std::pair{"graph", Upstream::given_gradient},
                                              std::pair{"graph_square_loss", Upstream::square_loss}})
          benchmark::RegisterBenchmark(("moe_layer/" + router + "/" + label).c_str(), moe_layer, router, upstream)
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
