// kernels/scope.h: launch scopes, the seam between the model and the profiler. Every seam call of the
// Dispatcher, every residual layer of the model and the runner's phases open a scope (phase, layer,
// block letter, seam, backend); an installed ScopeObserver (profiling/scope_recorder.h) turns each
// into an NVTX range and a CUPTI external correlation id, so every kernel maps back to where it was
// launched from. Without an observer (the default, and always on the CPU) a scope costs a null check.
//
// Backward: kernels of the backward pass run later, on autograd's device thread. When the observer
// asks for backward markers (profiled steps only), a scope also puts two identity autograd nodes
// around its work: one on its outputs, whose backward runs before the scope's own backward nodes and
// opens the "backward" scope, and one on its inputs, whose backward runs after them and closes it.
//
//   kernels::Scope scope("forward", "attention", backend);   // layer and block from LayerContext
//   auto in = scope.enter({q, k, v});                         // backward markers on the inputs
//   return scope.exit(implementation(in[0], in[1], in[2]));   // ... and on the outputs
//
// Tests: kernels_tests --gtest_filter='Scope*' (tests/kernels/scope_test.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/scope_observer.h"

namespace ablate::kernels {

// The process's observer (nullptr: none). Set by the runner for the run's duration.
void set_scope_observer(ScopeObserver* observer);
ScopeObserver* scope_observer();

// The residual layer the calling thread is in; the model sets it around each layer.
struct LayerContext {
  int64_t layer = -1;
  std::string block;
};
const LayerContext& current_layer();

class Scope {
 public:
  // Opens `phase`/`seam` in the current layer. With no observer every method is a pass-through.
  Scope(std::string phase, std::string seam = "", std::string backend = "");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

  // Backward markers on the inputs (undefined tensors and tensors without grad pass through).
  std::vector<torch::Tensor> enter(std::vector<torch::Tensor> inputs);
  torch::Tensor exit(torch::Tensor output);
  std::pair<torch::Tensor, torch::Tensor> exit(std::pair<torch::Tensor, torch::Tensor> outputs);
  std::vector<torch::Tensor> exit_all(std::vector<torch::Tensor> outputs) { return mark_outputs(std::move(outputs)); }

 private:
  std::vector<torch::Tensor> mark_outputs(std::vector<torch::Tensor> outputs);
  ScopeObserver* observer_;
  ScopeKey key_;
  uint64_t forward_id_ = 0;
  int64_t backward_id_ = -1;  // >= 0 once enter() put a closing marker on the inputs
};

// A residual layer: sets LayerContext for the calling thread and opens the layer's scope.
class LayerScope {
 public:
  LayerScope(int64_t layer, std::string block);
  ~LayerScope();
  Scope& scope() { return *scope_; }

 private:
  LayerContext saved_;
  std::unique_ptr<Scope> scope_;
};

}  // namespace ablate::kernels
