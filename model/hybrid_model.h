// model/hybrid_model.h: the hybrid LLM of docs/model.md as a torch::nn module: token embedding,
// one pre-norm residual layer per pattern letter (x <- x + Block(RMSNorm(x)), the add and the norm
// fused in the `residual_norm` seam), final RMSNorm, untied LM head, loss through the `loss` seam plus
// aux_coef * sum of the E layers' load-balancing losses.
//
//   auto dispatcher = std::make_shared<const ablate::kernels::Dispatcher>(requested, device_info, strict);
//   ablate::model::HybridModel model(config, dispatcher, /*seed=*/1234);
//   model->to(device);
//   auto out = model->forward(tokens, targets, loss_mask);  // out.loss.backward();
//
// Weights come from one seeded CPU generator (same seed, same weights, on any machine). The forward
// and backward passes do not synchronise with the host unless a seam's backend does (the standard
// MoE path in dropless mode reads the largest expert load); shapes are fixed by the inputs.
// Tests: model_tests (tests/model/model_test.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/dispatch.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/parameter_units.h"

namespace ablate::model {

struct ModelOutput {
  torch::Tensor loss;           // 0-dim: ce + aux_coef * aux (what to call backward on)
  torch::Tensor ce;             // 0-dim: masked mean cross-entropy
  torch::Tensor aux;            // 0-dim: sum over E layers of L_aux (0 without E layers)
  torch::Tensor dropped_slots;  // 0-dim int64: slots dropped by MoE capacity, summed over E layers
};

class HybridModelImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when config_errors(config) is not empty (the pattern fails closed
  // with the letter and its 1-based position). A null dispatcher means every seam on its reference.
  // `placement`: which experts of each E layer this process holds (expert parallelism; default all).
  HybridModelImpl(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher, uint64_t seed = 0,
                  const ExpertPlacement& placement = {});

  // tokens, targets int64 [B, T]; loss_mask [B, T] (0/1, any dtype).
  ModelOutput forward(const torch::Tensor& tokens, const torch::Tensor& targets, const torch::Tensor& loss_mask);

  const ModelConfig& config() const { return config_; }
  const kernels::Dispatcher& dispatcher() const { return *dispatcher_; }
  const std::vector<std::shared_ptr<Block>>& blocks() const { return blocks_; }
  // The parameters by unit, in forward order (model/parameter_units.h); every parameter in one unit.
  std::vector<std::vector<torch::Tensor>> parameter_units() const;
  // Called before each unit's first use from now on; null stops it. The caller keeps `hooks` alive.
  void set_unit_hooks(ParameterUnitHooks* hooks) { hooks_ = hooks; }
  // How the E layers reach the job's other ranks (model/blocks.h); null: alone. The caller keeps it alive.
  void set_moe_collectives(const MoeCollectives* collectives);
  const ExpertPlacement& expert_placement() const { return placement_; }
  // The E layers' expert weights (w1, w3, w2 of each), in the model's parameter order: under expert
  // parallelism the parameters that differ between the ranks of an expert group.
  std::vector<torch::Tensor> expert_parameters() const;
  // Every weight only GEMMs read (each block's Block::gemm_weights() and the LM head), in the model's
  // parameter order; the embedding (a lookup), norms, biases and the router are not among them.
  std::vector<torch::Tensor> gemm_weights() const;

  torch::Tensor embedding;   // [V, d]
  torch::Tensor final_norm;  // [d]
  torch::Tensor head;        // [V, d], untied from the embedding

 private:
  ModelConfig config_;
  std::shared_ptr<const kernels::Dispatcher> dispatcher_;
  std::vector<std::shared_ptr<Block>> blocks_;
  ParameterUnitHooks* hooks_ = nullptr;
  ExpertPlacement placement_;
};
TORCH_MODULE(HybridModel);

}  // namespace ablate::model
