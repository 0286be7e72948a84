// model/recurrent_block.cpp: block R, the Griffin RG-LRU recurrent block (docs/model.md "R"):
// [g ; u] = W_in x, u through a causal depthwise conv of width 4 (the `causal_conv` seam), gate logits
// W_a u + b_a and W_x u + b_x; the `recurrent_scan` seam turns them, u and Lambda into the gates (r, i, decay
// log a = -8 r softplus(-Lambda), input scale sqrt(1 - a^2)) and runs the recurrence in fp32;
// out = W_out (gelu(g) * h).
// Tests: model_tests --gtest_filter='*Recurrent*' (tests/model/blocks_test.cpp: vs a per-timestep loop
// in fp64, gradients by central differences, the Lambda initialisation range).
#include <cmath>

#include "kernels/gelu_gate.h"
#include "kernels/join_last_dim.h"
#include "model/blocks.h"

namespace ablate::model {
namespace {

constexpr double kLambdaInitLow = 0.9, kLambdaInitHigh = 0.999;  // range of sigmoid(Lambda) at init

}  // namespace

RecurrentBlock::RecurrentBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher,
                               SeededInit& init)
    : Block('R', config, std::move(dispatcher)) {
  const int64_t d = config.d_model, w = config.recurrent.width, taps = config.recurrent.conv_width;
  w_in = register_parameter("w_in", init.normal({2 * w, d}));
  // A conv tap is not a linear layer of width d: uniform(+-1/sqrt(K)) as for a depthwise conv with fan-in K.
  const double bound = 1.0 / std::sqrt(static_cast<double>(taps));
  conv_weight = register_parameter("conv_weight", init.uniform({w, taps}, -bound, bound));
  conv_bias = register_parameter("conv_bias", SeededInit::constant({w}, 0.0));
  w_a = register_parameter("w_a", init.normal({w, w}));
  b_a = register_parameter("b_a", SeededInit::constant({w}, 0.0));
  w_x = register_parameter("w_x", init.normal({w, w}));
  b_x = register_parameter("b_x", SeededInit::constant({w}, 0.0));
  // sigmoid(Lambda) ~ U[0.9, 0.999]: Lambda = logit of that draw.
  const auto a0 = init.uniform({w}, kLambdaInitLow, kLambdaInitHigh);
  lambda = register_parameter("lambda", torch::log(a0) - torch::log1p(-a0));
  w_out = register_parameter("w_out", init.normal({d, w}));
}

BlockOutput RecurrentBlock::forward(const torch::Tensor& x) {
  const int64_t w = config_.recurrent.width;
  // split, not two narrows: one join backward instead of two zero-filled copies and an add.
  const auto gu = kernels::split_last_dim(dispatcher_->dense_gemm(x, w_in), {w, w});
  const auto& g = gu[0];
  const auto u = dispatcher_->causal_conv(gu[1], conv_weight, conv_bias);  // the `causal_conv` seam
  const auto gate_a = dispatcher_->dense_gemm(u, w_a, b_a), gate_x = dispatcher_->dense_gemm(u, w_x, b_x);

  // The gates (r, i, a, sqrt(1 - a^2)) and the recurrence are one seam call: it takes the gate logits as
  // the projections hand them over (bf16 under autocast) and computes in fp32.
  const auto h = dispatcher_->recurrent_scan({.gate_a = gate_a, .gate_x = gate_x, .u = u, .lambda = lambda, .h0 = {}}).h;
  // gelu(g) * h in fp32, in g's dtype (bf16 under autocast: what the projection takes); one pass each way on CUDA.
  const auto gated = kernels::gelu_gate(g, h);
  return {dispatcher_->dense_gemm(gated, w_out), {}, {}};
}

}  // namespace ablate::model
