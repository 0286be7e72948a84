// profiling/cupti_tracer.h: the CUPTI Activity API tracer of one process, converting CUPTI records
// into the plain structs of profiling/activity.h. Kinds: CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME and
// DRIVER (the host side of every launch, for launch -> kernel flows and step assignment) and
// EXTERNAL_CORRELATION (the seam scopes pushed by profiling/scope_recorder.h). Records go into 4 MiB
// buffers; past `max_buffers` buffers in one window CUPTI is refused further buffers and drops
// records, which are counted (cuptiActivityGetNumDroppedRecords) and stored with the window.
//
//   auto& tracer = CuptiTracer::instance();
//   if (auto why = tracer.start(); !why.empty()) record("unavailable (" + why + ")");
//   ... the profiled steps ...   (synchronise the device first)
//   tracer.stop();  ActivityLog log = tracer.take();
//
// The header needs no CUPTI: without CUPTI at build time (ABLATE_HAVE_CUPTI unset) start() returns
// "built without CUPTI". CUPTI allows one subscriber per process: under nsys/ncu start() returns
// CUPTI's error (e.g. CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); use `ablate run --no-profile`.
//
// CUDA graphs: a replayed graph's kernels all carry the correlation id of the one graph launch, so the
// seam scopes pushed at capture time cannot reach them through external correlation. Instead, while a
// graph is captured, track_graph_nodes() subscribes to CUPTI's resource callbacks: each node created
// during capture is tagged with the scope open on the creating thread, and each node cloned when the
// graph is instantiated inherits its original's tag. Kernel records of replays carry the executable
// graph's node id, which ActivityLog::graph_node_scope maps back to the scope.
// Tests: tests/harness/profiling_gpu_test.cpp (GPU, self-skipping); the CPU path through runner tests.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "profiling/activity.h"

namespace ablate::profiling {

struct TracerOptions {
  size_t buffer_bytes = 4u << 20;  // one CUPTI activity buffer
  size_t max_buffers = 64;         // per window: 256 MiB of raw records at most
};

class CuptiTracer {
 public:
  // Process-wide: CUPTI calls its buffer callbacks as plain C functions, once per process.
  static CuptiTracer& instance();
  static bool compiled_in();

  // Enables the activity kinds for a new window. "" on success, else why tracing is unavailable
  // (the caller records it and the run goes on untraced).
  std::string start(const TracerOptions& options = {});
  // Disables the kinds and flushes every buffer (synchronise the device before, so the window's
  // kernels have finished and their records exist).
  void stop();
  bool active() const { return active_.load(std::memory_order_acquire); }
  // The records of the last window (moved out).
  ActivityLog take();
  // CUPTI's clock (the one its records use); 0 when CUPTI is not compiled in.
  uint64_t timestamp_ns() const;
  // External correlation ids (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) on the calling thread.
  void push_external(uint64_t id);
  void pop_external();

  // Graph-node tagging around a capture (see above). `current_scope` returns the external id of the
  // calling thread's innermost scope (0: none). "" on success, else why nodes cannot be tagged (the
  // replay's kernels are then attributed by name only). The tags accumulate until the process ends
  // and every take() copies them into the log.
  std::string track_graph_nodes(std::function<uint64_t()> current_scope);
  void stop_tracking_graph_nodes();

  // Detaches CUPTI from the process (cuptiFinalize) once a window is over: while attached, CUPTI
  // intercepts every CUDA API call even with every activity kind disabled, which cost +4 % step time
  // on nam56r-small on an H100 after the window. Only when no window is open and no graph nodes are
  // being tracked; the next start() or track_graph_nodes() attaches again. Call it with the device
  // synchronised and no other thread in a CUDA call (the training loop between steps). "" once
  // detached, else why not.
  std::string detach();

  // Called from the CUPTI callbacks (public for the C trampolines in cupti_tracer.cpp).
  void on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
  void on_buffer_completed(void* context, uint32_t stream, uint8_t* buffer, size_t size, size_t valid);
  void on_graph_node_created(uint64_t node_id);
  void on_graph_node_cloned(uint64_t original_id, uint64_t clone_id);

 private:
  CuptiTracer() = default;
  std::mutex mutex_;        // log_, options_, buffer accounting: held briefly (see on_buffer_completed)
  std::mutex parse_mutex_;  // record parsing and its name caches
  ActivityLog log_;
  TracerOptions options_;
  size_t buffers_in_window_ = 0;
  bool callbacks_registered_ = false;
  std::atomic<bool> active_{false};
  std::mutex graph_mutex_;  // the resource callbacks run on capturing threads, not under mutex_
  std::function<uint64_t()> current_scope_;
  std::map<uint64_t, uint64_t> graph_node_scope_;
  void* subscriber_ = nullptr;  // CUpti_SubscriberHandle while tracking
};

}  // namespace ablate::profiling
