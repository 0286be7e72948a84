// harness/train/step_graph.cpp: see step_graph.h.
#include "harness/train/step_graph.h"

#include <ATen/autocast_mode.h>

#include <array>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace ablate::harness {

#if defined(ABLATE_HAVE_CUDA)

namespace {

// The first line of an exception text: c10 errors append a C++ backtrace after it.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

struct StepGraph::Impl {
  explicit Impl(const torch::Device& device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.has_index() ? device.index() : 0)),
        guard(stream) {}
  c10::cuda::CUDAStream stream;
  c10::cuda::CUDAStreamGuard guard;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor output;
  cudaEvent_t replayed = nullptr;  // recorded after each replay: finished_within() polls it
  // launch(): the outputs copied to pinned host memory, and the events recorded behind the copies.
  std::array<torch::Tensor, 2> host_output;
  std::array<cudaEvent_t, 2> copied{nullptr, nullptr};
  int next_slot = 0;
  ~Impl() {
    if (replayed != nullptr) cudaEventDestroy(replayed);
    for (cudaEvent_t e : copied)
      if (e != nullptr) cudaEventDestroy(e);
  }
};

namespace {

// Polls `event` until it has completed or `deadline` passed (false). Polled, not waited: a blocking
// wait could not end at the deadline; yielding between queries keeps the host's latency to the event as
// low as the spin of a synchronising copy.
bool completed_by(cudaEvent_t event, std::optional<std::chrono::steady_clock::time_point> deadline) {
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return true;
    if (state != cudaErrorNotReady) C10_CUDA_CHECK(state);
    if (deadline && std::chrono::steady_clock::now() >= *deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace

StepGraph::StepGraph(const torch::Device& device) {
  if (!device.is_cuda()) throw std::invalid_argument("CUDA graphs need a CUDA device");
  impl_ = std::make_unique<Impl>(device);
}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return impl_->graph != nullptr; }

std::string StepGraph::capture(const std::function<torch::Tensor()>& body) {
  if (impl_->graph) return "already captured";
  // Autocast's cast cache would hold casts made inside the capture (graph-pool memory) past the
  // autocast region that frees them; without it every use casts again, which the graph replays anyway.
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  std::string failure;
  try {
    // The blocks the eager steps left cached belong to the allocator's default pool, which the graph's
    // private pool cannot draw on: given back to the device first, the capture takes that memory
    // instead of as much again (nam56r-large at half depth on one H200: 108.7 GiB reserved graphed
    // against 67.6 GiB allocated eager, 2026-11-29).
    c10::cuda::CUDACachingAllocator::emptyCache();
    graph->capture_begin();
    impl_->output = body();
    graph->capture_end();  // ends the capture and instantiates the executable graph
  } catch (const std::exception& e) {
    failure = first_line(e.what());
  }
  at::autocast::set_autocast_cache_enabled(cache);
  if (failure.empty()) {
    impl_->graph = std::move(graph);
    return "";
  }
  // Abandon: take the stream out of capture mode (capture_end may not have run, or threw), drop the
  // partial graph, clear the error CUDA reported for the invalidated capture.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(impl_->stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    try {
      graph->capture_end();
    } catch (const std::exception&) {
      // Expected for an invalidated capture: capture_end() has still ended it.
    }
    if (cudaStreamIsCapturing(impl_->stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(impl_->stream.stream(), &partial) == cudaSuccess && partial != nullptr)
        cudaGraphDestroy(partial);
    }
  }
  (void)cudaGetLastError();
  impl_->output = torch::Tensor();
  return failure;
}

int StepGraph::launch() {
  if (!impl_->graph) throw std::logic_error("StepGraph::launch before a successful capture");
  const int slot = impl_->next_slot;
  impl_->next_slot = 1 - slot;
  auto& host = impl_->host_output[slot];
  if (!host.defined())
    host = torch::empty(impl_->output.sizes(), impl_->output.options().device(torch::kCPU).pinned_memory(true));
  if (impl_->copied[slot] == nullptr)
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->copied[slot], cudaEventDisableTiming));
  impl_->graph->replay();
  host.copy_(impl_->output, /*non_blocking=*/true);
  C10_CUDA_CHECK(cudaEventRecord(impl_->copied[slot], impl_->stream.stream()));
  return slot;
}

torch::Tensor StepGraph::output_within(int slot, std::optional<std::chrono::milliseconds> timeout) {
  if (slot < 0 || slot >= static_cast<int>(impl_->copied.size()) || impl_->copied[slot] == nullptr)
    throw std::logic_error("StepGraph::output_within: no such launch");
  std::optional<std::chrono::steady_clock::time_point> deadline;
  if (timeout) deadline = std::chrono::steady_clock::now() + *timeout;
  return completed_by(impl_->copied[slot], deadline) ? impl_->host_output[slot] : torch::Tensor();
}

bool StepGraph::finished_within(std::chrono::milliseconds timeout) {
  if (impl_->replayed == nullptr) C10_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->replayed, cudaEventDisableTiming));
  C10_CUDA_CHECK(cudaEventRecord(impl_->replayed, impl_->stream.stream()));
  return completed_by(impl_->replayed, std::chrono::steady_clock::now() + timeout);
}

void StepGraph::abandon() {
  if (!impl_->graph) return;
  impl_->graph->reset();
  impl_->graph.reset();
}

#else

struct StepGraph::Impl {};
StepGraph::StepGraph(const torch::Device&) { throw std::invalid_argument("CUDA graphs: built without CUDA"); }
StepGraph::~StepGraph() = default;
bool StepGraph::captured() const { return false; }
std::string StepGraph::capture(const std::function<torch::Tensor()>&) { return "built without CUDA"; }
int StepGraph::launch() { throw std::logic_error("CUDA graphs: built without CUDA"); }
torch::Tensor StepGraph::output_within(int, std::optional<std::chrono::milliseconds>) {
  throw std::logic_error("CUDA graphs: built without CUDA");
}
bool StepGraph::finished_within(std::chrono::milliseconds) { throw std::logic_error("CUDA graphs: built without CUDA"); }
void StepGraph::abandon() {}

#endif

}  // namespace ablate::harness
