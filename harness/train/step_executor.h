// harness/train/step_executor.h: one training step (forward, backward, gradient sync, clipping,
// optimizer) in the mode the run's posture gives it, as a small state machine:
//   eager      every step of a run without a whole-step CUDA graph, and a graphed run's warm-up steps;
//   capturing  the one step a graph is recorded at (kGraphWarmupEagerSteps eager steps come first);
//              a capture that fails is dropped and the step runs eager, and every later step too;
//              under data parallel the ranks agree first (one rank's failure drops every rank's graph);
//   replaying  every step after a successful capture; under data parallel the host waits for a replay
//              at most the collective timeout (a graph's collectives are outside NCCL's watchdog).
// run() returns the step's numbers (one host read) and, on the capturing step, the typed capture
// outcome (receipts::CaptureFacts: captured, or failed with why), so the loop records the fact as it
// happens instead of inferring it from a sentence later.
// Batches go into static device buffers (a captured graph reads the same addresses on every replay),
// on CUDA through pinned host memory in the stream's order.
// Launch ahead (compile.launch_ahead): while replaying, run() may also be handed the next step; it
// then queues that step's batch, learning rate and replay behind this step's, and only then waits for
// this step's numbers (copied out of the graph behind its replay). The GPU runs the two replays back
// to back instead of idling while the host reads, records and loads (0.58 ms a step at nam56r-small
// on an H200, 2026-11-28, bed6d4b). The loop hands over the next step only where nothing between the
// two steps reads or writes the model (stages.h may_launch_ahead).
// Tests: tests/harness/stages_test.cpp (eager, CPU), tests/harness/profiling_gpu_test.cpp (capture,
// replay and the failed-capture fallback on a GPU, self-skipping), tests/harness/distributed_test.cpp
// (captured under data parallel on 2 GPUs, self-skipping).
#pragma once
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "data/source.h"
#include "harness/train/data_parallel.h"
#include "harness/train/stages.h"
#include "receipts/run_facts.h"

namespace ablate::harness {


class StepExecutor {
 public:
  enum class Mode { eager, capturing, replaying };

  struct Result {
    double loss = 0;
    double grad_norm = 0;
    std::optional<double> moe_aux_loss;          // models with E blocks
    std::optional<int64_t> moe_dropped_slots;    // this rank's
    Mode mode = Mode::eager;
    std::optional<receipts::CaptureFacts> capture;  // set on the step whose capture was decided
  };

  // `posture.graphs` says whether to capture (eligible); the executor never changes the posture.
  StepExecutor(const ExperimentSpec& spec, const RunPosture& posture, ModelState& state, RunProfiler& profiler);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // train.warmup_steps, raised to cover the eager steps and the capture step of a graphed run.
  int64_t warmup_steps() const { return warmup_steps_; }
  // The step the graph is captured at; none when the run does not capture.
  std::optional<int64_t> capture_step() const { return capture_step_; }
  // The step after run()'s, when the loop lets it start before run()'s numbers are read.
  struct NextStep {
    const data::Batch* batch = nullptr;
    double lr = 0;
  };
  // Runs `step` on `batch` (unless it was launched ahead, with its batch, by the previous call) and
  // returns its numbers; replaying, launches `next` behind it first when given.
  Result run(int64_t step, double lr, const data::Batch& batch, const NextStep* next = nullptr);
  // Whether run() replays the captured graph (a step launched ahead can only be a replay).
  bool replays() const;
  // Steps launched ahead so far (compile.launch_ahead; the receipt's count).
  int64_t launched_ahead() const { return launched_ahead_; }
  // Waits for a step launched ahead whose numbers the loop will not read (it stopped early), so its
  // work and collectives end before anything is torn down; under data parallel at most the collective
  // timeout, past it the replay is aborted as a stalled one.
  void drain();
  // Data parallel: the gradient all-reduces or reduce-scatters (their per-step timings, the bucket
  // layout); null in a single process.
  const GradientSync* sync() const { return sync_.get(); }
  // Expert parallelism: the expert weights' sync over the ranks holding the same experts (null otherwise).
  const GradientSync* expert_sync() const { return expert_sync_.get(); }
  // Data parallel, after the step's host read: its collectives by kind (NaN: a kind not run, or not
  // timed), their sum (NaN when any is), and the host's wait for the gradient syncs.
  struct StepCollectives {
    GradientSync::CollectiveMs ms;
    double all_to_all_ms = NAN;
    double total_ms = NAN;
    double wait_ms = 0;
  };
  StepCollectives step_collectives() const;
  // Sharded: waits for the parameter all-gathers the last step left running (they overlap the next
  // forward). `whole`: the parameters are then whole and current on every rank (a checkpoint reads
  // them; a collective where the step gathers first, and under "full", where every unit is gathered).
  void settle(bool whole);
  // After a checkpoint read the settled parameters: under "full" with a captured graph, frees the units
  // the settle gathered (the replays use the graph's own memory for them).
  void release_settled();
  // The fp32 values of the parameters kept in bf16 (distributed.param_dtype; GradientSync::master_values(),
  // a collective of every rank), for a checkpoint to write in their place; empty otherwise.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> master_values() const;
  // The loss on held-out data (train.eval_every): the first ceil(target_tokens / seq_len) validation
  // rows of `source` (all of them when fewer), the same rows every time. Each rank takes every
  // world-th row, in batches of model.batch_size padded with masked-out rows, so every rank runs as
  // many forwards (collectives in them stay in step); no gradients; the cross-entropy alone (no
  // load-balancing term), token-weighted over the ranks. Eager, outside any captured graph.
  struct Evaluation {
    double loss = 0;
    int64_t tokens = 0;  // target tokens evaluated, over every rank
  };
  Evaluation evaluate(const data::DataSource& source, int64_t target_tokens);
  // The captured graph (null when none): the run keeps it until its receipt is closed, so the thread
  // stays on the graph's side stream and its pool stays allocated while the profiler reads the window.
  std::shared_ptr<StepGraph> graph() const { return graph_; }

 private:
  torch::Tensor body(int64_t step, bool probes);
  Result read(const torch::Tensor& stats, Mode mode) const;
  // This rank's rows of the global batch into the static buffers: on CUDA staged in pinned host memory
  // (two buffers, alternating: the one in use for the step before may still be in flight) and copied in
  // the stream's order, so the copy may be queued behind a replay.
  void load(const data::Batch& batch);
  // A step's learning rate and batch into the device's buffers, in the stream's order.
  void prepare(double lr, const data::Batch& batch);
  // Replaying: waits for launch `slot`'s numbers (step `step`), under data parallel at most the
  // collective timeout, else aborts the replay and throws naming the step.
  torch::Tensor await_launch(int64_t step, int slot);
  void abort_replay(std::chrono::milliseconds wait);  // ends a replay stalled on a stopped rank
  // Data parallel: every rank's capture outcome through the store; "" only when every rank captured.
  std::string agree_on_capture(const std::string& failure);

  const ExperimentSpec& spec_;
  const RunPosture& posture_;
  ModelState& state_;
  RunProfiler& profiler_;
  int64_t rank_ = 0;
  bool has_moe_ = false;
  int64_t warmup_steps_ = 0;
  std::optional<int64_t> capture_step_;
  std::unique_ptr<GradientSync> sync_, expert_sync_;
  std::vector<GradientSync*> syncs() const;  // sync_, and expert_sync_ under expert parallelism
  std::unique_ptr<UnitHooksOfSyncs> unit_hooks_;  // sharded: what the model calls around each unit
  model::MoeCollectives moe_collectives_;  // what the E layers reach the other ranks through
  torch::Tensor ids_, mask_, inputs_, targets_;
  struct StagedRows {
    torch::Tensor ids, mask;  // pinned, in the static buffers' dtypes
  };
  std::array<StagedRows, 2> staged_;
  int next_staging_ = 0;
  struct Ahead {
    int64_t step = 0;
    int slot = 0;  // StepGraph::launch's
  };
  std::optional<Ahead> ahead_;  // launched, its numbers not read yet
  int64_t launched_ahead_ = 0;
  std::shared_ptr<StepGraph> graph_;  // while it lives, the thread works on the graph's side stream
  bool gathers_first_ = false;        // sharded, capturing: parameters gathered at a step's start, not its end
};

}  // namespace ablate::harness
