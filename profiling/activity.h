// profiling/activity.h: the profiler's records as plain structs. The CUPTI tracer
// (profiling/cupti_tracer.cpp) converts CUPTI activity records into these; everything downstream
// (attribution, summaries, observed backends, the Chrome trace) takes only these, so it is plain C++
// that tests feed with synthetic records on a machine without a GPU.
// Tests: tests/profiling/attribution_test.cpp, trace_writer_test.cpp (profiling_tests).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ablate::profiling {

// One piece of GPU work: a kernel, a memcpy or a memset. Times are CUPTI timestamps in ns.
struct GpuActivity {
  enum class Kind { kernel, memcpy, memset };
  Kind kind = Kind::kernel;
  std::string name;  // kernel name (demangled: profiling/cupti_names.h), or "Memcpy HtoD" / "Memset"
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0, stream = 0;
  uint32_t correlation = 0;  // links to the ApiCall that launched it (for graph nodes: the graph launch)
  uint64_t bytes = 0;        // memcpy/memset only
  uint64_t graph_node = 0;   // the executable graph's node id when a graph launch ran it, else 0
  uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// A CUDA runtime or driver API call on the host (cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync...).
struct ApiCall {
  std::string name;
  bool driver = false;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t process = 0, thread = 0;
  uint32_t correlation = 0;
};

// Where a launch came from: what the seam-scope recorder (profiling/scope_recorder.h) pushed as the
// external correlation id around it. Kernels outside every scope have none.
struct LaunchScope {
  std::string phase;       // forward | backward | optimizer | step
  int64_t layer = -1;      // index into the model pattern; -1 outside the layers
  std::string block;       // pattern letter of the layer ("" outside a layer)
  std::string seam;        // "" when launched outside a seam
  std::string backend;     // the seam's chosen backend
  bool operator<(const LaunchScope& o) const;
  bool operator==(const LaunchScope& o) const = default;
};

// The host-side interval of one training step, in the tracer's clock: launches are assigned to the
// step whose interval contains their API call.
struct StepSpan {
  int64_t step = 0;
  uint64_t begin_ns = 0, end_ns = 0;
};

// Everything one rank collected over its profiling window.
struct ActivityLog {
  std::vector<GpuActivity> gpu;
  std::vector<ApiCall> api;
  std::map<uint32_t, uint64_t> external_id;  // correlation id -> external correlation id (innermost scope)
  std::map<uint64_t, LaunchScope> scopes;    // external correlation id -> scope
  std::map<uint64_t, uint64_t> graph_node_scope;  // graph node id -> external id of its capture-time scope
  std::vector<StepSpan> steps;
  uint64_t dropped_records = 0;   // cuptiActivityGetNumDroppedRecords, summed over buffers
  uint64_t buffers = 0;           // activity buffers handed to CUPTI
  uint64_t buffers_refused = 0;   // requests refused because the buffer cap was reached
};

// The external id of the scope `a` was launched from: by its graph node when a replayed graph ran it
// (its correlation is the whole graph launch's), else by its launch's correlation; 0 when none.
inline uint64_t external_id_of(const ActivityLog& log, const GpuActivity& a) {
  if (a.graph_node != 0)
    if (const auto it = log.graph_node_scope.find(a.graph_node); it != log.graph_node_scope.end()) return it->second;
  const auto it = log.external_id.find(a.correlation);
  return it == log.external_id.end() ? 0 : it->second;
}

}  // namespace ablate::profiling
