// harness/train/run_profiler.h: the profiling half of one run (docs/architecture.md "One run", step 6), driven
// by the training loop: the CUPTI window over `[profile] start_step .. + steps`, NVTX ranges for the
// step and its phases, the seam-scope recorder (installed on CUDA runs), allocator statistics after
// forward / backward / optimizer for the profiled steps, step times inside vs outside the window, and
// at the end everything into the receipt: profile_windows, kernels, profile_time, kernel_attribution,
// backend_evidence, run_backends.observed/mismatch, the trace artifact, run_env "profiling".
//
//   RunProfiler prof(spec, options.no_profile, device, *dispatcher);
//   prof.begin_step(step); ... prof.after_phase(step, "forward"); ... prof.end_step(step, wall_ms, steady);
//   prof.record(recorder);                 // while the run is still `running`
//
// When CUPTI cannot trace (no CUDA device, built without CUPTI, nsys/ncu holds it) the run goes on and
// the receipt says `unavailable (<reason>)`. Tests: tests/harness/runner_test.cpp (CPU: unavailable
// recorded, not fatal), tests/harness/profiling_gpu_test.cpp (GPU, self-skipping).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spec/spec.h"
#include "kernels/dispatch.h"
#include "profiling/activity.h"
#include "receipts/records.h"
#include "receipts/run_recorder.h"
#include "receipts/store.h"

namespace ablate::profiling {
class ScopeRecorder;
}

namespace ablate::harness {

class RunProfiler {
 public:
  // `rank`: this process's data-parallel rank (0 for a single process). Every rank profiles its own
  // window; a rank other than 0 records only rows of its own (window, kernels, time, attribution,
  // memory, its trace artifact run<id>_rank<r>), not the run's env or observed backends (rank 0's).
  RunProfiler(const ExperimentSpec& spec, bool no_profile, const torch::Device& device,
              const kernels::Dispatcher& dispatcher, int64_t rank = 0);
  ~RunProfiler();  // uninstalls the scope observer; closes a window left open by an exception
  RunProfiler(const RunProfiler&) = delete;
  RunProfiler& operator=(const RunProfiler&) = delete;

  bool in_window(int64_t step) const;
  // In the window and traced (CUPTI on): such a step's time carries the tracing overhead.
  bool traced(int64_t step) const;
  // "ok" | "unavailable (<reason>)" | "off (...)" | "disabled (...)": what run_env "profiling" says.
  std::string status_text() const;

  void begin_step(int64_t step);
  // After the forward pass, the backward pass, the optimizer step: an allocator probe in window steps.
  void after_phase(int64_t step, const std::string& phase);
  // Closes the step; after the window's last step: synchronises, stops CUPTI and summarises.
  // `steady`: a steady-state step (after train.warmup_steps), whose time counts for the overhead.
  void end_step(int64_t step, double wall_ms, bool steady);
  // Around a whole-step CUDA graph capture (harness/train/step_graph.h): backward scopes are marked
  // and every graph node is tagged with the scope it was captured in, so the replays' kernels are
  // attributed to their layers and seams like eager kernels (profiling/cupti_tracer.h).
  void begin_capture();
  void end_capture();
  // The largest allocator peaks of this step's phase probes (0 outside the window): the probes reset
  // the peaks, so the step's own peak is the larger of these and the allocator's peak at step end.
  int64_t step_allocated_peak() const { return step_allocated_peak_; }
  int64_t step_reserved_peak() const { return step_reserved_peak_; }

  // Writes the profiling evidence of the run through its recorder (the run must still be running;
  // the run-wide rows, env "profiling" and observed backends, only when the recorder owns the run).
  // Returns the run's profile facts.
  receipts::ProfileFacts record(receipts::RunRecorder& recorder);

 private:
  void close_window();
  void detach_cupti();  // after the window and after a capture's node tagging (CuptiTracer::detach)
  std::string trace_stem(int64_t run_id, const std::string& db_path) const;

  const ExperimentSpec& spec_;
  const kernels::Dispatcher& dispatcher_;
  int64_t rank_ = 0;
  bool cuda_ = false;
  int device_index_ = -1;
  std::string status_;  // ok | unavailable | off | disabled
  std::string reason_;
  std::unique_ptr<profiling::ScopeRecorder> recorder_;
  std::vector<profiling::StepSpan> spans_;
  bool step_range_open_ = false;
  bool window_open_ = false;
  bool window_done_ = false;
  profiling::ActivityLog log_;
  std::vector<receipts::MemoryRow> memory_;
  int64_t step_allocated_peak_ = 0, step_reserved_peak_ = 0;
  std::vector<double> inside_ms_, outside_ms_, around_ms_;  // steady step times; around: near the window
  double flush_s_ = 0;
  bool markers_before_capture_ = false;
  std::string graph_node_tags_;  // "" (no capture), "ok", or why nodes could not be tagged
  std::string cupti_detached_;   // "yes" or "no: <why>" (the last detach attempt)
};

}  // namespace ablate::harness
