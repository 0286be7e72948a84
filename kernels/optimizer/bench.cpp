// kernels/optimizer/bench.cpp: one AdamW update of a parameter set shaped like nam56r-small's (12 layers
// of four 1024 x 4096 matrices and six small vectors, a 32768 x 1024 embedding: 235 M fp32 parameters in
// 121 tensors); bytes = 7 x 4 per parameter (read p, g, m, v; write p, m, v), counted 8 x 4 with a
// gradient scale (the clipping's, folded into the update: fused_adamw writes the divided gradient back;
// fused_cuda does not, so its GB/s there reads 8/7 high). `clip_then_step`
// times what that fold replaces: the clipping's separate multiply of every gradient, then the update.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=optimizer
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

// The optimizer seam: the state lives on the GPU, lr and step counts are device tensors (the seam's
// contract); each timed iteration is one update of every tensor of the set.
enum class Clipping { none, scaled, clip_then_step };

void optimizer_bench(benchmark::State& st, const std::string& backend, Clipping clipping) {
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat);
  std::vector<std::vector<int64_t>> shapes = {{32768, 1024}};
  for (int layer = 0; layer < 12; ++layer) {
    for (int m = 0; m < 4; ++m) shapes.push_back({m % 2 ? 1024 : 4096, m % 2 ? 4096 : 1024});
    for (const int64_t n : {1024, 1024, 16, 16, 64, 1024}) shapes.push_back({n});
  }
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  double elements = 0;
  for (const auto& shape : shapes) {
    params.push_back(torch::randn(shape, opts));
    grads.push_back(torch::randn(shape, opts) * 1e-2);
    exp_avgs.push_back(torch::zeros(shape, opts));
    exp_avg_sqs.push_back(torch::zeros(shape, opts));
    steps.push_back(torch::zeros({}, opts));
    elements += static_cast<double>(params.back().numel());
  }
  const auto lr = torch::full({}, 3e-4, opts);
  const ablate::kernels::AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  const auto& update = implementations().optimizer.at(backend);
  // A scale of 1 keeps the gradients as they are across iterations; the kernels divide all the same.
  const auto one = torch::ones({}, opts);
  switch (clipping) {
    case Clipping::none:
      timed(st, 7.0 * 4.0 * elements, [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper); });
      break;
    case Clipping::scaled:
      timed(st, 8.0 * 4.0 * elements, [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, one, hyper); });
      break;
    case Clipping::clip_then_step:
      timed(st, 9.0 * 4.0 * elements, [&] {
        at::_foreach_mul_(grads, one);
        update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper);
      });
      break;
  }
  st.counters["parameters_M"] = elements / 1e6;
}

}  // namespace
}  // namespace ablate::kernels::bench

ABLATE_BENCHMARKS(optimizer) {
  using namespace ablate::kernels::bench;
  if (!torch::cuda::is_available()) return;
  for (const std::string backend : {"reference", "fused_adamw", "fused_cuda"})
    for (const auto& [label, clipping] : {std::pair{"step", Clipping::none}, std::pair{"step_scaled", Clipping::scaled},
                                          std::pair{"clip_then_step", Clipping::clip_then_step}})
      benchmark::RegisterBenchmark(("optimizer/" + backend + "/" + label).c_str(), optimizer_bench, backend, clipping)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
