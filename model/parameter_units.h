// model/parameter_units.h: the model's parameters grouped by where the forward pass first uses them,
// for a harness that must have a unit's parameters in place just before that use (data parallel with
// sharded parameters: harness/train/data_parallel.h). LibTorch's C++ modules have no forward hooks, so
// HybridModel calls these itself; without hooks set it costs one pointer check a unit.
// Units in forward order: 0 the embedding; 1 + i the residual layer i (its pre-norm and block);
// layers + 1 the final norm and the LM head.
#pragma once
#include <cstdint>

namespace ablate::model {

class ParameterUnitHooks {
 public:
  virtual ~ParameterUnitHooks() = default;
  // Before the forward pass first reads unit `unit`'s parameters.
  virtual void before_unit(int64_t unit) = 0;
};

}  // namespace ablate::model
