// kernels/optimizer/bench.cpp: one AdamW update of a parameter set shaped like nam56r-small's (12 layers
// of four 1024 x 4096 matrices and six small vectors, a 32768 x 1024 embedding: 235 M fp32 parameters in
// 121 tensors); bytes = 7 x 4 per parameter (read p, g, m, v; write p, m, v), counted 8 x 4 with a
// gradient scale (the clipping's, folded into the update: fused_adamw writes the divided gradient back;
// fused_cuda does not, so its GB/s there reads 8/7 high). `clip_then_step`
// times what that fold replaces: the clipping's separate multiply of every gradient, then the update;
// `step_rounded` and `step_then_round` the bf16 copies written in the update or in a pass after it.
// Timed with CUDA events after warm-up, an L2 flush before each iteration (kernels/bench_util.h);
// counters from the median iteration. Run: build/bench/kernels_bench --benchmark_filter=optimizer
#include "kernels/bench_util.h"

#if defined(ABLATE_HAVE_CUDA)
namespace ablate::kernels::bench {
namespace {

using torch::Tensor;

// The optimizer seam: the state lives on the GPU, lr and step counts are device tensors (the seam's
// contract); each timed iteration is one update of every tensor of the set. `step_rounded` also writes
// each updated parameter rounded to bf16 (the seam's `rounded`: a sharded stage's GEMM weights kept in
// bf16, 30 bytes a parameter); `step_then_round` times what that replaces, the update and then a
// separate rounding pass (34 bytes).
enum class Variant { step, step_scaled, clip_then_step, step_rounded, step_then_round };

void optimizer_bench(benchmark::State& st, const std::string& backend, Variant variant) {
  const auto opts = torch::TensorOptions(torch::kCUDA).dtype(torch::kFloat);
  std::vector<std::vector<int64_t>> shapes = {{32768, 1024}};
  for (int layer = 0; layer < 12; ++layer) {
    for (int m = 0; m < 4; ++m) shapes.push_back({m % 2 ? 1024 : 4096, m % 2 ? 4096 : 1024});
    for (const int64_t n : {1024, 1024, 16, 16, 64, 1024}) shapes.push_back({n});
  }
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, steps, rounded;
  double elements = 0;
  for (const auto& shape : shapes) {
    params.push_back(torch::randn(shape, opts));
    grads.push_back(torch::randn(shape, opts) * 1e-2);
    exp_avgs.push_back(torch::zeros(shape, opts));
    exp_avg_sqs.push_back(torch::zeros(shape, opts));
    steps.push_back(torch::zeros({}, opts));
    rounded.push_back(torch::empty(shape, opts.dtype(torch::kBFloat16)));
    elements += static_cast<double>(params.back().numel());
  }
  const auto lr = torch::full({}, 3e-4, opts);
  const ablate::kernels::AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
  const auto& update = implementations().optimizer.at(backend);
  // A scale of 1 keeps the gradients as they are across iterations; the kernels divide all the same.
  const auto one = torch::ones({}, opts);
  switch (variant) {
    case Variant::step:
      timed(st, 28.0 * elements, [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper, {}); });
      break;
    case Variant::step_scaled:
      timed(st, 32.0 * elements, [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, one, hyper, {}); });
      break;
    case Variant::clip_then_step:
      timed(st, 36.0 * elements, [&] {
        at::_foreach_mul_(grads, one);
        update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper, {});
      });
      break;
    case Variant::step_rounded:
      timed(st, 30.0 * elements,
            [&] { update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper, rounded); });
      break;
    case Variant::step_then_round:
      timed(st, 34.0 * elements, [&] {
        update(params, grads, exp_avgs, exp_avg_sqs, steps, lr, {}, hyper, {});
        at::_foreach_copy_(rounded, params);
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
    for (const auto& [label, variant] :
         {std::pair{"step", Variant::step}, std::pair{"step_scaled", Variant::step_scaled},
          std::pair{"clip_then_step", Variant::clip_then_step}, std::pair{"step_rounded", Variant::step_rounded},
          std::pair{"step_then_round", Variant::step_then_round}})
      benchmark::RegisterBenchmark(("optimizer/" + backend + "/" + label).c_str(), optimizer_bench, backend, variant)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(20);
}
#endif  // ABLATE_HAVE_CUDA
