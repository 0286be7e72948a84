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
// Batches go into static device buffers (a captured graph reads the same addresses on every replay).
// Tests: tests/harness/stages_test.cpp (eager, CPU), tests/harness/profiling_gpu_test.cpp (capture,
// replay and the failed-capture fallback on a GPU, self-skipping), tests/harness/distributed_test.cpp
// (captured under data parallel on 2 GPUs, self-skipping).
#pragma once
#include <torch/torch.h>

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
  // This rank's rows of the global batch into the static buffers.
  void load(const data::Batch& batch);
  Result run(int64_t step, double lr);
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
  // Data parallel: waits for the step's replay at most the collective timeout, else throws naming it.
  void await_replay(int64_t step);
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
  std::shared_ptr<StepGraph> graph_;  // while it lives, the thread works on the graph's side stream
  bool gathers_first_ = false;        // sharded, capturing: parameters gathered at a step's start, not its end
};

}  // namespace ablate::harness
