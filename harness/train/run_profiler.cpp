// harness/train/run_profiler.cpp: see run_profiler.h. The pure work (attribution, summaries, observed
// backends, the trace's JSON) is profiling/'s plain C++; this file only drives it from the training
// loop and moves its results into the store.
#include "harness/train/run_profiler.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

#include "harness/step_stats.h"
#include "kernels/scope.h"
#include "profiling/attribution.h"
#include "profiling/cupti_tracer.h"
#include "profiling/nvtx.h"
#include "profiling/scope_recorder.h"
#include "profiling/trace_writer.h"

namespace ablate::harness {
namespace {

namespace fs = std::filesystem;

nlohmann::json device_properties(int index) {
  nlohmann::json out = nlohmann::json::array();
#if defined(ABLATE_HAVE_CUDA)
  if (index < 0) return out;
  const auto* p = at::cuda::getDeviceProperties(index);
  out.push_back({{"id", index},
                 {"name", p->name},
                 {"totalGlobalMem", p->totalGlobalMem},
                 {"computeMajor", p->major},
                 {"computeMinor", p->minor},
                 {"maxThreadsPerBlock", p->maxThreadsPerBlock},
                 {"maxThreadsPerMultiprocessor", p->maxThreadsPerMultiProcessor},
                 {"regsPerBlock", p->regsPerBlock},
                 {"warpSize", p->warpSize},
                 {"sharedMemPerBlock", p->sharedMemPerBlock},
                 {"numSms", p->multiProcessorCount}});
#endif
  return out;
}

std::optional<double> median_or_null(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  return median(v);
}

}  // namespace

RunProfiler::RunProfiler(const ExperimentSpec& spec, bool no_profile, const torch::Device& device,
                         const kernels::Dispatcher& dispatcher, int64_t rank)
    : spec_(spec), dispatcher_(dispatcher), rank_(rank), cuda_(device.is_cuda()) {
  device_index_ = cuda_ ? (device.has_index() ? device.index() : 0) : -1;
  if (!spec.profile.enabled) {
    status_ = "disabled";
    reason_ = "[profile] enabled = false";
  } else if (no_profile) {
    status_ = "off";
    reason_ = "ablate run --no-profile (CUPTI left to nsys/ncu; NVTX ranges still emitted)";
  } else if (!cuda_) {
    status_ = "unavailable";
    reason_ = "no CUDA device: the run is on the CPU and CUPTI traces GPU work only";
  } else if (!profiling::CuptiTracer::compiled_in()) {
    status_ = "unavailable";
    reason_ = "built without CUPTI (no CUPTI headers at configure time)";
  } else {
    status_ = "ok";  // until CUPTI says otherwise when the window opens
  }
  // NVTX ranges for Nsight users on every CUDA run; external correlation ids only in the window.
  if (cuda_) {
    recorder_ = std::make_unique<profiling::ScopeRecorder>(status_ == "ok" ? &profiling::CuptiTracer::instance() : nullptr);
    kernels::set_scope_observer(recorder_.get());
  }
}

RunProfiler::~RunProfiler() {
  if (window_open_) profiling::CuptiTracer::instance().stop();
  if (recorder_) kernels::set_scope_observer(nullptr);
}

bool RunProfiler::traced(int64_t step) const { return status_ == "ok" && in_window(step); }

bool RunProfiler::in_window(int64_t step) const {
  return spec_.profile.enabled && step >= spec_.profile.start_step &&
         step < spec_.profile.start_step + spec_.profile.steps;
}

std::string RunProfiler::status_text() const { return reason_.empty() ? status_ : status_ + " (" + reason_ + ")"; }

void RunProfiler::begin_step(int64_t step) {
  step_allocated_peak_ = step_reserved_peak_ = 0;
  if (recorder_) {
    profiling::nvtx_push("step " + std::to_string(step));
    step_range_open_ = true;
    recorder_->set_backward_markers(in_window(step));
  }
  if (!in_window(step)) return;
  if (cuda_) c10::cuda::CUDACachingAllocator::resetPeakStats(device_index_);
  auto& tracer = profiling::CuptiTracer::instance();
  if (status_ == "ok" && !window_open_ && !window_done_) {
    if (auto why = tracer.start(); !why.empty()) {
      status_ = "unavailable";
      reason_ = why;
    } else {
      window_open_ = true;
    }
  }
  if (window_open_) spans_.push_back({step, tracer.timestamp_ns(), 0});
}

void RunProfiler::after_phase(int64_t step, const std::string& phase) {
  if (!cuda_ || !in_window(step)) return;
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index_);
  const int64_t allocated = s.allocated_bytes[0].peak, reserved = s.reserved_bytes[0].peak;
  receipts::MemoryRow row;
  row.rank = rank_;
  row.step = step;
  row.phase = phase;
  row.allocated = allocated;
  row.reserved = reserved;
  row.active = s.active_bytes[0].peak;
  row.alloc_retries = s.num_alloc_retries;
  row.ooms = s.num_ooms;
  // Fragmentation at the phase's peak: the share of reserved memory not allocated, 1 - allocated.peak /
  // reserved.peak (both peaks since the previous probe; reserved never shrinks inside a step).
  row.fragmentation = reserved > 0 ? 1.0 - static_cast<double>(allocated) / static_cast<double>(reserved) : 0.0;
  memory_.push_back(row);
  step_allocated_peak_ = std::max(step_allocated_peak_, allocated);
  step_reserved_peak_ = std::max(step_reserved_peak_, reserved);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device_index_);
}

void RunProfiler::begin_capture() {
  if (!recorder_) return;
  markers_before_capture_ = recorder_->backward_markers();
  recorder_->set_backward_markers(true);
  if (status_ != "ok") return;
  const auto* recorder = recorder_.get();
  const auto why = profiling::CuptiTracer::instance().track_graph_nodes([recorder] { return recorder->current(); });
  graph_node_tags_ = why.empty() ? "ok" : why;
}

void RunProfiler::end_capture() {
  if (!recorder_) return;
  profiling::CuptiTracer::instance().stop_tracking_graph_nodes();
  recorder_->set_backward_markers(markers_before_capture_);
  if (!graph_node_tags_.empty() && !window_open_) {
    if (cuda_) torch::cuda::synchronize(device_index_);
    detach_cupti();
  }
}

void RunProfiler::detach_cupti() {
  const auto why = profiling::CuptiTracer::instance().detach();
  cupti_detached_ = why.empty() ? "yes" : "no: " + why;
}

void RunProfiler::end_step(int64_t step, double wall_ms, bool steady) {
  if (window_open_ && !spans_.empty() && spans_.back().step == step)
    spans_.back().end_ns = profiling::CuptiTracer::instance().timestamp_ns();
  if (steady) {
    if (in_window(step)) {
      inside_ms_.push_back(wall_ms);
    } else {
      outside_ms_.push_back(wall_ms);
      const int64_t begin = spec_.profile.start_step, end = begin + spec_.profile.steps;
      if (step >= begin - spec_.profile.steps && step < end + spec_.profile.steps) around_ms_.push_back(wall_ms);
    }
  }
  if (step_range_open_) {
    profiling::nvtx_pop();
    step_range_open_ = false;
  }
  if (window_open_ && step + 1 == spec_.profile.start_step + spec_.profile.steps) close_window();
  if (recorder_ && !in_window(step + 1)) recorder_->set_backward_markers(false);
}

void RunProfiler::close_window() {
  const auto t0 = std::chrono::steady_clock::now();
  if (cuda_) torch::cuda::synchronize(device_index_);  // the window's kernels finish, their records exist
  auto& tracer = profiling::CuptiTracer::instance();
  tracer.stop();
  log_ = tracer.take();
  log_.scopes = recorder_ ? recorder_->scopes() : std::map<uint64_t, profiling::LaunchScope>{};
  log_.steps = spans_;
  window_open_ = false;
  window_done_ = true;
  detach_cupti();
  flush_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string RunProfiler::trace_stem(int64_t run_id, const std::string& db_path) const {
  const fs::path dir = !spec_.profile.trace_dir.empty()
                           ? fs::path(spec_.profile.trace_dir)
                           : fs::absolute(db_path).parent_path() / "runs" / std::to_string(run_id);
  fs::create_directories(dir);
  return (dir / fmt::format("run{}_rank{}.pt.trace", run_id, rank_)).string();
}

receipts::ProfileFacts RunProfiler::record(receipts::RunRecorder& rec) {
  auto& store = rec.store();
  const int64_t run_id = rec.run_id();
  if (status_ == "ok" && !window_done_) {
    if (window_open_) {
      close_window();
    } else {
      status_ = "unavailable";
      reason_ = fmt::format("the profile window [{}, {}) did not run in this process (resumed past it?)",
                            spec_.profile.start_step, spec_.profile.start_step + spec_.profile.steps);
    }
  }
  receipts::ProfileFacts out;
  out.status = status_;
  out.reason = reason_;
  const bool run_facts = rec.owns_run();  // the run's env and observed backends are rank 0's
  if (run_facts) rec.env({{"profiling", status_text()}});
  if (status_ == "disabled") return out;

  receipts::ProfileWindowRow window;
  window.rank = rank_;
  window.status = status_;
  window.reason = reason_;
  window.start_step = spec_.profile.start_step;
  window.steps = spec_.profile.steps;
  if (status_ == "ok") {
    const auto summary = profiling::summarize(log_);
    window.records = summary.records;
    window.dropped_records = static_cast<int64_t>(log_.dropped_records);
    window.buffers = static_cast<int64_t>(log_.buffers);
    window.buffers_refused = static_cast<int64_t>(log_.buffers_refused);
    window.window_ns = static_cast<int64_t>(summary.breakdown.window_ns);
    window.compute_ns = static_cast<int64_t>(summary.breakdown.compute_ns);
    window.non_compute_ns = static_cast<int64_t>(summary.breakdown.non_compute_ns);
    window.idle_ns = static_cast<int64_t>(summary.breakdown.idle_ns);
    window.communication_ns = static_cast<int64_t>(summary.breakdown.communication_ns);
    window.exposed_communication_ns = static_cast<int64_t>(summary.breakdown.exposed_communication_ns);
    // receipts::kCollectiveKinds lists the kinds in profiling::Collective's order.
    static_assert(static_cast<int>(profiling::Collective::all_to_all) == 3);
    for (size_t k = 0; k < std::size(receipts::kCollectiveKinds); ++k) {
      const auto field = receipts::kCollectiveKinds[k].second;
      window.collective_ns.*field = static_cast<int64_t>(summary.breakdown.collective_ns[k]);
      window.exposed_collective_ns.*field = static_cast<int64_t>(summary.breakdown.exposed_collective_ns[k]);
    }

    std::vector<receipts::KernelRow> kernels;
    for (const auto& k : summary.kernels) kernels.push_back({k.name, k.family, k.seam, rank_, k.calls, k.total_ns});
    store.record_kernels(run_id, kernels);
    std::vector<receipts::ProfileTimeRow> time;
    for (const auto& t : summary.time) time.push_back({rank_, t.step, t.dimension, t.key, t.calls, t.total_ns});
    store.record_profile_time(run_id, time);
    std::vector<receipts::KernelAttributionRow> attribution;
    for (const auto& a : summary.attribution)
      attribution.push_back({rank_, a.name, a.scope.phase, a.scope.layer, a.scope.block, a.scope.seam, a.scope.backend,
                             a.family, a.calls, a.total_ns});
    store.record_kernel_attribution(run_id, attribution);

    // Observed backends: the run_backends rows written at the start get observed/mismatch now, while
    // the run is still `running` (the append-only triggers refuse it after finish).
    std::map<std::string, std::string> chosen;
    for (const auto& r : dispatcher_.resolutions()) chosen[r.seam] = r.chosen;
    const auto observed = profiling::observe_backends(summary, chosen, kernels::catalog());
    std::vector<receipts::BackendRow> backends;
    std::vector<receipts::BackendEvidenceRow> evidence;

    for (const auto& r : dispatcher_.resolutions()) {
      for (const auto& o : observed) {
        if (o.seam != r.seam) continue;
        backends.push_back({r.seam, r.requested, r.chosen, o.observed, r.reason, o.mismatch});
        for (const auto& e : o.evidence) evidence.push_back({o.seam, e.kernel, e.matches, e.calls, e.total_ns});
        if (o.mismatch.value_or(false)) out.backend_mismatches.push_back({o.seam, o.chosen, *o.observed, o.note});
      }
    }
    if (run_facts) {
      rec.backends(backends);
      store.record_backend_evidence(run_id, evidence);
    }

    profiling::TraceMeta meta;
    meta.rank = rank_;
    meta.world_size = spec_.distributed.nproc;
    meta.backend = spec_.distributed.backend;
    meta.device_properties = device_properties(device_index_);
    meta.trace_name = fmt::format("ablate run {} ({}) rank {}", run_id, spec_.experiment.name, rank_);
    const auto path = profiling::write_trace_file(profiling::chrome_trace(log_, meta), trace_stem(run_id, rec.db_path()));
    store.add_artifact(run_id, "trace", path);

    out.trace = path;
    out.records = static_cast<int64_t>(summary.records);
    out.dropped_records = static_cast<int64_t>(log_.dropped_records);
    out.flush_s = flush_s_;
    out.unmatched_scope_pops = recorder_ ? static_cast<int64_t>(recorder_->unmatched_pops()) : 0;
    out.cupti_detached_after_window = cupti_detached_;
    if (!graph_node_tags_.empty()) {
      out.graph_node_tags = graph_node_tags_;
      out.graph_nodes_tagged = static_cast<int64_t>(log_.graph_node_scope.size());
    }
  }
  store.record_profile_window(run_id, window);
  if (!memory_.empty()) store.record_memory(run_id, memory_);
  out.memory_by_phase =
      !cuda_ ? "unavailable: not a CUDA device (process RSS per step is in steps.rss_bytes)"
      : graph_node_tags_.empty()
          ? "recorded (memory table: allocator peaks after forward, backward, optimizer)"
          : "recorded (memory table: allocator peaks after forward, backward, optimizer for eager steps; one row "
            "per replayed step, phase \"graph replay\": the graph's private pool is allocated once at capture)";
  // The overhead baseline is the steps around the window (as many steady steps before and after it as
  // it has): step times drift as training goes (the MoE load evens out), so all outside steps would
  // mix another phase of training into the comparison.
  const auto inside = median_or_null(inside_ms_), outside = median_or_null(outside_ms_),
             around = median_or_null(around_ms_);
  const auto baseline = around ? around : outside;
  out.window_start = spec_.profile.start_step;
  out.window_end = spec_.profile.start_step + spec_.profile.steps;
  out.median_step_ms_inside_window = inside;
  out.median_step_ms_outside_window = outside;
  out.median_step_ms_around_window = around;
  if (inside && baseline && *baseline > 0) out.overhead_pct = 100.0 * (*inside / *baseline - 1.0);
  out.overhead_baseline = around ? "steady steps around the window" : "all steady steps outside the window";
  return out;
}

}  // namespace ablate::harness
