// model/hybrid_model.cpp: HybridModel (see hybrid_model.h): builds the blocks from the pattern in
// order from one seeded initialiser, and runs embedding -> residual layers -> final norm -> loss.
// Tests: model_tests --gtest_filter='HybridModel*' (tests/model/model_test.cpp).
#include "model/hybrid_model.h"

#include <stdexcept>
#include <string>
#include <tuple>

#include "kernels/numerics.h"
#include "kernels/scope.h"

namespace ablate::model {

HybridModelImpl::HybridModelImpl(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher,
                                 uint64_t seed, const ExpertPlacement& placement)
    : config_(config), dispatcher_(std::move(dispatcher)), placement_(placement) {
  if (const auto errors = config_errors(config); !errors.empty()) {
    std::string message = "invalid model config '" + config.name + "':";
    for (const auto& e : errors) message += "\n  " + e;
    throw std::invalid_argument(message);
  }
  if (!dispatcher_) dispatcher_ = std::make_shared<const kernels::Dispatcher>();
  SeededInit init(seed, config.init_std);
  embedding = register_parameter("embedding", init.normal({config.vocab, config.d_model}));
  for (size_t i = 0; i < config.pattern.size(); ++i) {
    auto block = make_block(config.pattern[i], config, dispatcher_, init, placement);
    blocks_.push_back(register_module("layer" + std::to_string(i) + "_" + config.pattern[i], block));
  }
  final_norm = register_parameter("final_norm", SeededInit::constant({config.d_model}, 1.0));
  head = register_parameter("head", init.normal({config.vocab, config.d_model}));
}

std::vector<std::vector<torch::Tensor>> HybridModelImpl::parameter_units() const {
  std::vector<std::vector<torch::Tensor>> units{{embedding}};
  for (const auto& block : blocks_) units.push_back(block->parameters());
  units.push_back({final_norm, head});
  return units;
}

void HybridModelImpl::set_moe_collectives(const MoeCollectives* collectives) {
  for (const auto& block : blocks_)
    if (auto* moe = dynamic_cast<MoeBlock*>(block.get())) moe->set_collectives(collectives);
}

std::vector<torch::Tensor> HybridModelImpl::expert_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& block : blocks_)
    if (const auto* moe = dynamic_cast<const MoeBlock*>(block.get())) out.insert(out.end(), {moe->w1, moe->w3, moe->w2});
  return out;
}

std::vector<torch::Tensor> HybridModelImpl::gemm_weights() const {
  std::vector<torch::Tensor> out;
  for (const auto& block : blocks_)
    for (const auto& w : block->gemm_weights()) out.push_back(w);
  out.push_back(head);
  return out;
}

ModelOutput HybridModelImpl::forward(const torch::Tensor& tokens, const torch::Tensor& targets,
                                     const torch::Tensor& loss_mask) {
  TORCH_CHECK(tokens.dim() == 2 && targets.sizes() == tokens.sizes() && loss_mask.sizes() == tokens.sizes(),
              "HybridModel: tokens, targets and loss_mask must all be [B, T]");
  const int64_t batch = tokens.size(0), T = tokens.size(1), d = config_.d_model;
  const double eps = config_.norm_eps;
  const auto accumulate_dtype = kernels::compute_dtype(embedding);

  // The residual stream keeps the parameters' dtype; `branch` is the previous block's output, added
  // to the stream by the next residual_norm (undefined before the first layer).
  // index_select rather than torch::embedding: its CUDA backward (index_add_) needs no host sync.
  if (hooks_) hooks_->before_unit(0);
  torch::Tensor residual = embedding.index_select(0, tokens.reshape({-1})).view({batch, T, d}), branch;
  if (hooks_) hooks_->after_unit(0);  // index_select's backward reads the indices only
  auto aux = torch::zeros({}, embedding.options().dtype(accumulate_dtype));
  auto dropped = torch::zeros({}, embedding.options().dtype(torch::kLong));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const auto& block = blocks_[i];
    // The layer's launch scope (kernels/scope.h): its kernels, forward and backward, map to layer i.
    kernels::LayerScope layer(static_cast<int64_t>(i), std::string(1, block->letter()));
    if (hooks_) hooks_->before_unit(1 + static_cast<int64_t>(i));
    const auto in = layer.scope().enter({branch, residual});
    auto [normed, summed] = dispatcher_->residual_norm(in[0], in[1], block->norm, eps);
    residual = summed;
    auto out = block->forward(normed);
    if (hooks_) {
      if (hooks_->wants_backward_hooks()) {
        auto marked = mark_unit_outputs(*hooks_, 1 + static_cast<int64_t>(i), {out.y, residual, out.aux});
        out.y = marked[0], residual = marked[1], out.aux = marked[2];
      }
      hooks_->after_unit(1 + static_cast<int64_t>(i));
    }
    std::tie(branch, residual) = layer.scope().exit(std::pair{out.y, residual});
    if (out.aux.defined()) aux = aux + out.aux.to(accumulate_dtype);
    if (out.dropped.defined()) dropped = dropped + out.dropped;
  }
  if (hooks_) hooks_->before_unit(1 + static_cast<int64_t>(blocks_.size()));
  const auto hidden = dispatcher_->residual_norm(branch, residual, final_norm, eps).first;
  const auto ce =
      dispatcher_->loss(hidden.reshape({batch * T, d}), head, targets.reshape({-1}), loss_mask.reshape({-1}));
  if (hooks_) hooks_->after_unit(1 + static_cast<int64_t>(blocks_.size()));
  return {ce + config_.moe.aux_coef * aux, ce, aux, dropped};
}

}  // namespace ablate::model
