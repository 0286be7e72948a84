// harness/train/step_graph.h: whole-step CUDA graph capture and replay (`compile.cuda_graphs`). While
// a StepGraph lives, the calling thread works on a side stream of its own (capture is impossible on the
// legacy default stream, and the eager warm-up steps must run on the capturing stream so cuBLAS
// workspaces and autotuning exist before the capture). capture() records one call of the step's body
// (forward, backward, clipping, optimizer) into a graph with a private memory pool and instantiates it;
// nothing runs while capturing. launch() replays it and copies the tensor the captured body returned
// to the host behind the replay; output_within() waits for that copy. The body must read its inputs
// from static buffers that the caller refills before each replay, and the learning rate and step
// counts from device tensors (harness/train/optimizer.h).
// A capture that fails (a host sync inside, an unsupported call) is abandoned: the stream leaves capture
// mode, the partial graph is dropped, and capture() returns why, so the run goes on eager.
// Tests: tests/harness/profiling_gpu_test.cpp (GPU, self-skipping): captured and replayed on the
// capacity-factor MoE lane with the same losses as eager; a forced failure falls back to eager.
// tests/harness/distributed_test.cpp (2 GPUs, self-skipping): captured with NCCL collectives under
// every sharding stage, as eager; a rank that hangs during replays fails the job within the timeout.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace ablate::harness {

class StepGraph {
 public:
  explicit StepGraph(const torch::Device& device);  // a CUDA device; the side stream becomes current
  ~StepGraph();                                     // the previous stream becomes current again
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // "" once captured and instantiated, else why not (and nothing is captured).
  std::string capture(const std::function<torch::Tensor()>& body);
  bool captured() const;
  // Launches a replay and, behind it on the graph's stream, the copy of its output into pinned host
  // memory (one of two buffers, alternating) and an event; returns the buffer's number. A second
  // launch may follow before this one's output is read (compile.launch_ahead), never a third.
  int launch();
  // Launch `slot`'s output on the host once its copy has run, waiting at most `timeout` (none: as long
  // as it takes); undefined when the timeout passed first.
  torch::Tensor output_within(int slot, std::optional<std::chrono::milliseconds> timeout);
  // Waits, at most `timeout`, until the replays launched so far have run; false if they have not. Under
  // data parallel this bounds a replay whose captured collective waits on a rank that stopped: NCCL's
  // own watchdog times only the collectives it launched, never those a graph replays.
  bool finished_within(std::chrono::milliseconds timeout);
  // Destroys the graph (it must not be replaying: destroying an in-flight graph waits for it), so
  // what waits for the graph's references can finish: ncclCommAbort polls until no graph holds its
  // communicators' plans. Afterwards captured() is false; the graph's memory pool goes back to the allocator.
  void abandon();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ablate::harness
