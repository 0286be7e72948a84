// model/parameter_units.h: the model's parameters grouped by where the forward pass first uses them,
// for a harness that must have a unit's parameters in place just before that use and may drop them
// after (data parallel with sharded parameters: harness/train/data_parallel.h). LibTorch's C++ modules
// have no forward hooks, so HybridModel calls these itself; without hooks set it costs one pointer
// check a unit. Units in forward order: 0 the embedding; 1 + i the residual layer i (its pre-norm and
// block); layers + 1 the final norm and the LM head.
// Tests: model_tests --gtest_filter='HybridModelUnits*' (tests/model/model_test.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace ablate::model {

class ParameterUnitHooks {
 public:
  virtual ~ParameterUnitHooks() = default;
  // Forward, before the pass first reads unit `unit`'s parameters.
  virtual void before_unit(int64_t unit) = 0;
  // Forward, once the pass has read unit `unit`'s parameters for the last time (its backward may read
  // them again: see before_unit_backward). The last unit's backward (the loss's) follows at once and
  // has no before_unit_backward: a harness keeps that unit.
  virtual void after_unit(int64_t /*unit*/) {}
  // Whether before_unit_backward is wanted: then each layer's outputs pass through an identity autograd
  // node (mark_unit_outputs) whose backward calls it.
  virtual bool wants_backward_hooks() const { return false; }
  // Backward, before any of the unit's own backward reads its parameters (the embedding's backward
  // reads none: it is not called for unit 0).
  virtual void before_unit_backward(int64_t /*unit*/) {}
};

// `outputs` (a layer's: the branch, the residual stream and an MoE's aux loss) through one identity
// node whose backward calls hooks.before_unit_backward(unit): autograd runs a node once every gradient
// of its outputs is in, so it runs before the unit's own backward. Undefined or grad-free outputs pass.
std::vector<torch::Tensor> mark_unit_outputs(ParameterUnitHooks& hooks, int64_t unit, std::vector<torch::Tensor> outputs);

}  // namespace ablate::model
