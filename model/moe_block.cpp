// model/moe_block.cpp: block E, the mixture of SwiGLU experts (docs/model.md "E"): the router through the
// `moe_router` seam (softmax in fp32, top-k experts, weights renormalised over the k picks), the experts
// through the `moe_dispatch` seam (dropless unless model.moe.capacity_factor > 0), and the
// load-balancing loss L_aux = E * sum_e f_e P_e. The dropped-slot count stays a device tensor: no host sync here.
// Tests: model_tests --gtest_filter='*Moe*' (tests/model/blocks_test.cpp: vs a loop over tokens,
// dropless and with capacity drops; gradients by central differences).
#include <algorithm>

#include "model/blocks.h"

namespace ablate::model {

MoeBlock::MoeBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init)
    : Block('E', config, std::move(dispatcher)) {
  const auto& e = config.moe;
  const int64_t d = config.d_model;
  router = register_parameter("router", init.normal({e.experts, d}));
  w1 = register_parameter("w1", init.normal({e.experts, e.ffn, d}));
  w3 = register_parameter("w3", init.normal({e.experts, e.ffn, d}));
  w2 = register_parameter("w2", init.normal({e.experts, d, e.ffn}));
}

BlockOutput MoeBlock::forward(const torch::Tensor& x) {
  const auto& e = config_.moe;
  const int64_t batch = x.size(0), T = x.size(1), d = x.size(2), tokens = batch * T;
  const auto flat = x.reshape({tokens, d});

  // probs [tokens, E] in fp32; top_w, top_idx [tokens, k] (the moe_router seam).
  const auto [probs, top_w, top_idx] = dispatcher_->moe_router(flat, router, e.top_k);

  // f_e: share of the tokens * k assignments routed to e (a count: no gradient); P_e: mean router
  // probability of e over tokens (carries the gradient). Counted as a sum of one-hot rows: a
  // scatter_add of ones into E addresses serialises on its atomics (24 us an E layer on the H100).
  const auto experts = torch::arange(e.experts, top_idx.options());
  const auto assigned = top_idx.reshape({-1, 1}).eq(experts).sum(0).to(probs.scalar_type());
  const auto share = assigned / static_cast<double>(std::max<int64_t>(1, tokens * e.top_k));
  const auto aux = static_cast<double>(e.experts) * (share * probs.mean(0)).sum();

  torch::Tensor dropped;
  const auto y = dispatcher_->moe_dispatch(flat, top_idx, top_w, w1, w3, w2, e.capacity_factor, &dropped);
  if (!dropped.defined()) dropped = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
  return {y.view({batch, T, d}), aux, dropped};
}

}  // namespace ablate::model
