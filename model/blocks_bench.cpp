// model/blocks_bench.cpp: one block of nam56r-small forward + backward on the GPU, as the model runs it
// (bf16 autocast, fp32 parameters, 8 x 2048 tokens), replayed from a CUDA graph as the fastest posture's
// captured step does: what a layer costs with its seams and its glue, beside kernels_bench's seam-only
// cases. moe_layer/<moe_router backend>/graph: the E layer (its pre-norm, the router, the load-balancing
// loss, the grouped_mm dispatch) forward, and backward from a given gradient of its output (random, fixed)
// and of the aux loss (its coefficient): the layer issue #14 measures against 1.8 ms. .../graph_square_loss:
// the same with the gradient made by a scalar loss, mean(y^2) in fp32 (what this benchmark timed before b465fde: its
// cast, square and mean and their backward, ~0.38 ms on the H100, are not the layer's). Counters: median_us,
// peak_extra_MiB. moe_layer_weights/<config>/<fp32|bf16>: the E layer of nam56r-medium and nam56r-large
// (d 2048, 4096; their batch x T) with its GEMM weights fp32 (autocast casts them, the expert weights in
// one copy_blocks each way) against bf16 (as distributed.param_dtype = "bf16" keeps them): what the
// casts cost a layer; the gradients come back in the weights' dtype (a data-parallel sync then reads
// 2 bytes an element of the bf16 ones where it reads 4, not timed here). model_weights/<model>/<fp32|bf16>:
// the whole model's forward (to the loss) and backward the same way, nam56r-medium and nam56r-large cut
// to its first 12 layers (4.2 B parameters), with every fast backend of their experiments: a rank's
// compute without its optimizer and collectives. Timed with CUDA events, an L2 flush before each
// iteration (kernels/bench_util.h). Run:
// build/bench/blocks_bench [--benchmark_filter=moe_layer]
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#if defined(ABLATE_HAVE_CUDA)
#include "kernels/bench_util.h"
#include "kernels/dispatch.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/hybrid_model.h"

namespace {

using namespace ablate;

// How the backward gets its output gradient.
enum class Upstream { given_gradient, square_loss };

void moe_layer(benchmark::State& st, const std::string& router, Upstream upstream, const std::string& config_name,
               bool bf16_weights) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto config = *model::named_config(config_name);
  const std::map<std::string, std::string> backends = {
      {"moe_router", router}, {"moe_dispatch", "grouped_mm"}, {"residual_norm", "fused_cuda"}};
  const auto dispatcher = std::make_shared<const kernels::Dispatcher>(
      backends, kernels::describe_device(cuda, torch::kBFloat16), /*strict=*/true);
  model::SeededInit init(/*seed=*/1234, config.init_std);
  auto block = std::make_shared<model::MoeBlock>(config, dispatcher, init);
  block->to(cuda);
  if (bf16_weights)
    for (auto w : block->gemm_weights()) w.set_data(w.detach().to(torch::kBFloat16));
  const auto bf16 = torch::TensorOptions(cuda).dtype(torch::kBFloat16);
  const int64_t B = config.batch_size, T = config.seq_len;
  auto x = torch::randn({B, T, config.d_model}, bf16).requires_grad_(true);
  // A loss's gradient of the layer output has the scale 1 / tokens; its values do not change the work.
  const auto dy = torch::randn({B, T, config.d_model}, bf16) / static_cast<double>(B * T);
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

// The whole model of `config_name` (`pattern` when not empty) forward to the loss and backward to every
// parameter, graph-replayed, its GEMM weights fp32 or bf16.
void model_weights(benchmark::State& st, const std::string& config_name, const std::string& pattern,
                   bool bf16_weights) {
  const torch::Device cuda(torch::kCUDA, 0);
  auto config = *model::named_config(config_name);
  if (!pattern.empty()) config.pattern = pattern;
  const std::map<std::string, std::string> backends = {
      {"attention", "sdpa_cudnn"},    {"rope", "fused_cuda"},       {"residual_norm", "fused_cuda"},
      {"moe_dispatch", "grouped_mm"}, {"moe_router", "fused_cuda"}, {"ssm_rotary", "fused_cuda"},
      {"ssm_scan", "fused_cuda"},     {"causal_conv", "fused_cuda"}, {"recurrent_scan", "fused_cuda"},
      {"loss", "fused_cuda"}};
  const auto dispatcher = std::make_shared<const kernels::Dispatcher>(
      backends, kernels::describe_device(cuda, torch::kBFloat16), /*strict=*/true);
  model::HybridModel m(config, dispatcher, /*seed=*/1234);
  m->to(cuda);
  if (bf16_weights)
    for (auto w : m->gemm_weights()) w.set_data(w.detach().to(torch::kBFloat16));
  const int64_t B = config.batch_size, T = config.seq_len;
  const auto ids = torch::randint(config.vocab, {B, T + 1}, torch::TensorOptions(cuda).dtype(torch::kLong));
  const auto mask = torch::ones({B, T}, torch::TensorOptions(cuda).dtype(torch::kFloat));
  const auto params = m->parameters();
  auto step = [&] {
    const auto loss = kernels::bench::under_bf16_autocast(
        [&] { return m->forward(ids.narrow(1, 0, T), ids.narrow(1, 1, T), mask).loss; });
    torch::autograd::grad({loss}, params);
  };
  const double extra_mib = kernels::bench::peak_extra_mib(step);
  kernels::bench::timed_graph(st, 0.0, step);
  st.counters["peak_extra_MiB"] = extra_mib;
}

}  // namespace
#endif  // ABLATE_HAVE_CUDA

int main(int argc, char** argv) {
#if defined(ABLATE_HAVE_CUDA)
  if (torch::cuda::is_available()) {
    for (const std::string router : {"reference", "fused_cuda"})
      if (ablate::kernels::has_implementation("moe_router", router))
        for (const auto& [label, upstream] : {std::pair{"graph", Upstream::given_gradient},
                                              std::pair{"graph_square_loss", Upstream::square_loss}})
          benchmark::RegisterBenchmark(("moe_layer/" + router + "/" + label).c_str(), moe_layer, router, upstream,
                                       std::string("nam56r-small"), false)
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond)
              ->Iterations(20);
    for (const std::string config : {"nam56r-medium", "nam56r-large"})
      for (const bool bf16_weights : {false, true})
        benchmark::RegisterBenchmark(
            ("moe_layer_weights/" + config + "/" + (bf16_weights ? "bf16" : "fp32")).c_str(), moe_layer,
            std::string("fused_cuda"), Upstream::given_gradient, config, bf16_weights)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(20);
    for (const auto& [label, config, pattern] :
         {std::tuple{"nam56r-medium", "nam56r-medium", ""}, std::tuple{"nam56r-large-12", "nam56r-large", "AEMEAEMEAEMR"}})
      for (const bool bf16_weights : {false, true})
        benchmark::RegisterBenchmark(
            (std::string("model_weights/") + label + "/" + (bf16_weights ? "bf16" : "fp32")).c_str(), model_weights,
            std::string(config), std::string(pattern), bf16_weights)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(10);
  }
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
