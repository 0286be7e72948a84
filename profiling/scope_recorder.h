// profiling/scope_recorder.h: the ScopeObserver (kernels/scope.h) of a profiled run. Each scope gets a
// stable id per distinct (phase, layer, block, seam, backend); opening a scope pushes an NVTX range
// with a readable name ("L3.A attention[sdpa_flash]", "... bwd") so Nsight Systems shows the blocks,
// and, while the CUPTI window is open, the id as CUPTI external correlation id, so each kernel record
// maps back to its scope (ActivityLog::external_id -> scopes()).
// Per-thread stacks keep pushes and pops balanced even when a marker's partner never runs.
// Plain C++: no LibTorch (the NVTX header is the toolkit's header-only nvtx3).
// Tests: tests/profiling/scope_recorder_test.cpp (profiling_tests).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/scope_observer.h"
#include "profiling/activity.h"

namespace ablate::profiling {

class CuptiTracer;

class ScopeRecorder : public kernels::ScopeObserver {
 public:
  // `tracer` may be null (NVTX only, e.g. under `ablate run --no-profile` for nsys).
  explicit ScopeRecorder(CuptiTracer* tracer);

  uint64_t scope_id(const kernels::ScopeKey& key) override;
  void push(uint64_t id) override;
  void pop(uint64_t id) override;
  bool backward_markers() const override { return backward_markers_.load(std::memory_order_relaxed); }
  void set_backward_markers(bool on) { backward_markers_.store(on); }

  // The innermost scope open on the calling thread (0: none): what a CUDA graph node created now by
  // this thread was launched from (CuptiTracer::track_graph_nodes).
  uint64_t current() const;
  // Every scope id handed out, for ActivityLog::scopes.
  std::map<uint64_t, LaunchScope> scopes() const;
  // NVTX name of a scope ("step"-less: the step is an NVTX range of its own).
  static std::string range_name(const kernels::ScopeKey& key);
  // Pops that found their scope on no stack of the calling thread (a marker without its partner).
  int64_t unmatched_pops() const { return unmatched_pops_.load(); }

 private:
  CuptiTracer* tracer_;
  const uint64_t generation_;  // tells this recorder's thread-local stacks from a previous one's
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, int64_t, std::string, std::string, std::string>, uint64_t> ids_;
  std::map<uint64_t, LaunchScope> scopes_;
  std::vector<std::string> names_;  // by id - 1
  std::atomic<bool> backward_markers_{false};
  std::atomic<int64_t> unmatched_pops_{0};
};

}  // namespace ablate::profiling
