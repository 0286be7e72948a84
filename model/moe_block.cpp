// model/moe_block.cpp: block E, the mixture of SwiGLU experts (docs/model.md "E"): the router through the
// `moe_router` seam (softmax in fp32, top-k experts, weights renormalised over the k picks), the experts
// through the `moe_dispatch` seam (dropless unless model.moe.capacity_factor > 0), and the
// load-balancing loss L_aux = E * sum_e f_e P_e (f_e over the job's whole batch in a data-parallel job).
// Under expert parallelism the block holds its rank's share of the experts and the dispatch exchanges
// rows with the ranks holding the rest (kernels/moe_dispatch/expert_exchange.h). The dropped-slot count
// stays a device tensor: no host sync here.
// Tests: model_tests --gtest_filter='*Moe*' (tests/model/blocks_test.cpp: vs a loop over tokens,
// dropless and with capacity drops; gradients by central differences).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/moe_dispatch/expert_exchange.h"
#include "model/blocks.h"

namespace ablate::model {

MoeBlock::MoeBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init,
                   const ExpertPlacement& placement)
    : Block('E', config, std::move(dispatcher)), placement_(placement) {
  const auto& e = config.moe;
  const int64_t d = config.d_model;
  if (placement.ranks < 1 || e.experts % placement.ranks != 0 || placement.rank < 0 || placement.rank >= placement.ranks)
    throw std::invalid_argument(fmt::format("E block: {} experts do not split over {} expert-parallel ranks (place {})",
                                            e.experts, placement.ranks, placement.rank));
  const int64_t local = e.experts / placement.ranks, first = placement.rank * local;
  router = register_parameter("router", init.normal({e.experts, d}));
  w1 = register_parameter("w1", init.normal_rows({e.experts, e.ffn, d}, first, local));
  w3 = register_parameter("w3", init.normal_rows({e.experts, e.ffn, d}, first, local));
  w2 = register_parameter("w2", init.normal_rows({e.experts, d, e.ffn}, first, local));
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
  // In a data-parallel job the counts are the job's (one small all-reduce), so the ranks' mean of L_aux
  // is the loss of one process running the whole batch.
  const auto experts = torch::arange(e.experts, top_idx.options());
  auto counts = top_idx.reshape({-1, 1}).eq(experts).sum(0).to(probs.scalar_type());

  torch::Tensor dropped;
  const auto* exchange = collectives_ != nullptr ? collectives_->experts : nullptr;
  if (placement_.ranks > 1 && (exchange == nullptr || exchange->ranks() != placement_.ranks))
    throw std::logic_error(fmt::format("E block: holds 1/{} of the experts but has no exchange over {} ranks",
                                       placement_.ranks, placement_.ranks));
  const auto y =
      dispatcher_->moe_dispatch(flat, top_idx, top_w, w1, w3, w2, e.capacity_factor, &dropped, exchange);
  if (!dropped.defined()) dropped = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(x.device()));
  // Summed after the dispatch: an expert-parallel layer's first collective is its token exchange.
  const bool over_job = collectives_ != nullptr && collectives_->sum_over_job;
  if (over_job) collectives_->sum_over_job(counts);
  // Every slot goes to one expert, so the job's counts sum to the job's slots.
  const auto share = over_job ? counts / counts.sum().clamp_min(1.0)
                              : counts / static_cast<double>(std::max<int64_t>(1, tokens * e.top_k));
  const auto aux = static_cast<double>(e.experts) * (share * probs.mean(0)).sum();
  return {y.view({batch, T, d}), aux, dropped};
}

}  // namespace ablate::model
