// kernels/scope_observer.h: what a launch scope is (ScopeKey) and the interface that receives scopes
// (ScopeObserver), in plain C++ so the profiler (profiling/scope_recorder.h) implements it without
// LibTorch. The scopes themselves and the observer registry live in kernels/scope.h.
// Tests: tests/kernels/scope_test.cpp, tests/profiling/scope_recorder_test.cpp.
#pragma once
#include <cstdint>
#include <string>

namespace ablate::kernels {

struct ScopeKey {
  std::string phase;    // forward | backward | optimizer | step ...
  int64_t layer = -1;   // -1 outside the model's layers
  std::string block;    // the layer's pattern letter
  std::string seam;     // "" for a layer or phase scope
  std::string backend;  // the seam's chosen backend
};

class ScopeObserver {
 public:
  virtual ~ScopeObserver() = default;
  virtual uint64_t scope_id(const ScopeKey& key) = 0;  // the same id for equal keys
  virtual void push(uint64_t id) = 0;                  // opens scope `id` on the calling thread
  virtual void pop(uint64_t id) = 0;                   // closes it (the calling thread's innermost `id`)
  virtual bool backward_markers() const = 0;           // put backward markers into the autograd graph
};

}  // namespace ablate::kernels
