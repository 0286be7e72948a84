// harness/train/stages.h: the stages of one run, in the order run_experiment (runner.cpp) calls them.
// Each stage is one function with explicit inputs and outputs (torchtitan style), so a stage can be
// tested on its own:
//   1. choose_posture    device, dtype, backends resolved against the device, compile posture (LibTorch's
//                        global flags, the CUDA-graph decision). Bad input throws; nothing is written.
//   2. open_run_data     the data source (corpus read or cached, or synthetic), charged to data_prep.
//   3. build_model       seeded model and optimizer; resume from the latest checkpoint. Throws when the
//                        checkpoint leaves nothing to train. Still nothing written.
//   4. open_recorder     the run's one writer (receipts/run_recorder.h): rank 0 begins the run
//                        (fingerprint, backends, catalog, lifecycle: heartbeat, termination signals -> killed);
//                        another rank attaches to it. From here the run always ends ok, failed or killed.
//   5. train_loop        the steps (harness/train/step_executor.h: eager, capturing, replaying), each
//                        step's row and the capture outcome to the recorder as they happen, the profiler
//                        window, checkpoints. A training failure is returned, not thrown.
//   6. finalise_receipt  outliers, profiling evidence, goodput, the typed facts (receipts/run_facts.h),
//      fail_receipt      status ok; or status failed with the reason and the facts known by then.
// Tests: tests/harness/stages_test.cpp (stages on their own), tests/harness/runner_test.cpp (the chain).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/compile_posture.h"
#include "data/source.h"
#include "harness/env.h"
#include "harness/goodput.h"
#include "spec/spec.h"
#include "harness/train/checkpoint.h"
#include "harness/train/data_parallel.h"
#include "harness/train/device_memory.h"
#include "harness/train/expert_parallel.h"
#include "harness/train/optimizer.h"
#include "harness/train/runner.h"
#include "kernels/dispatch.h"
#include "model/hybrid_model.h"
#include "receipts/run_facts.h"
#include "receipts/run_recorder.h"

namespace ablate::harness {

class RunProfiler;
class StepGraph;

// Progress lines on stdout unless the run is quiet.
struct Progress {
  bool quiet = false;
  void operator()(const std::string& line) const;
};

// ---- 1. device, backends and compile posture
struct RunPosture {
  std::string device_kind;  // "cuda" | "cpu"
  torch::Device device{torch::kCPU};
  bool bf16 = false;  // bf16 autocast for the forward pass; fp32 master weights
  std::shared_ptr<const kernels::Dispatcher> dispatcher;
  receipts::CaptureFacts graphs;  // the decision up front (harness/compile_posture.h)
  // Data parallel (distributed.nproc > 1): this rank's membership; null for a single process. Rank 0
  // alone writes the receipt, with every rank's step rows.
  std::shared_ptr<ProcessGroup> group;
  // distributed.expert_parallel > 1: the expert groups this rank belongs to; null otherwise.
  std::shared_ptr<ExpertParallel> experts;
  // Sharded with E layers: the job's ranks again, on a communicator of their own, for the E layers'
  // load counts (one small all-reduce a layer in the forward). On the job's communicator they would
  // queue behind the step's parameter all-gathers (one stream, issue order): the first E layer would
  // wait for every gather of the model. Null otherwise (the counts use `group`).
  std::shared_ptr<ProcessGroup> counts;
  // train.memory_limit_gib and train.expandable_segments on the caching allocator, undone when the
  // posture goes; null without either.
  std::shared_ptr<DeviceMemoryPosture> memory;
  bool writes_receipt() const { return !group || group->rank() == 0; }
};
// The model's shapes the backends' availability checks see (kernels/catalog.h ModelDims), for the block
// kinds in its pattern only.
kernels::ModelDims model_dims(const model::ModelConfig& m);
// Throws std::invalid_argument (a device that is not there, distributed.nproc against the launcher's
// world, a strict backend that is unavailable, on this device or for the model's shapes). Joins the process group when launched as ranks (the
// rendezvous waits up to distributed.timeout_s). Applies [compile] to LibTorch's global context.
RunPosture choose_posture(const ExperimentSpec& spec, const RunOptions& options);

// Why a run failed out of memory `when` ("at step 3"): the cap it ran under, the allocator's numbers.
std::string out_of_memory_failure(const RunPosture& posture, const std::string& when);

// ---- 2. data
// Throws data::DataError for bad data input.
std::unique_ptr<data::DataSource> open_run_data(const ExperimentSpec& spec, GoodputLedger& ledger);

// ---- 3. model, optimizer, resume
struct ModelState {
  model::HybridModel model{nullptr};
  std::vector<torch::Tensor> params;
  // AdamW; null under distributed.sharding until the step executor builds ShardedAdamW on its shards.
  std::unique_ptr<TrainOptimizer> optimizer;
  std::string model_hash;
  std::string checkpoint_dir;  // train.checkpoint_dir, else <db folder>/checkpoints/<experiment name>
  int64_t start_step = 0;      // > 0 when resumed
  data::DataState data_state;  // where the data stream resumes
  std::string resumed_from;    // the checkpoint folder, "" when not resumed
  std::vector<std::string> checkpoints_skipped;  // newer checkpoints not intact: "step-N: why"
  // Held by the rank that writes checkpoints (train.checkpoint_every > 0): no other run writes there.
  std::unique_ptr<CheckpointFolderLock> checkpoint_lock;
};
// Throws std::invalid_argument when the latest checkpoint is already at train.steps, or when it does
// not belong to this model or data (load_checkpoint).
ModelState build_model(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                       const data::DataSource& source, GoodputLedger& ledger);

// ---- 4. the run's recorder
// Rank 0 (or a single process) creates the store when missing (StoreError for a store that is damaged
// or cannot be written) and begins the run; another rank attaches to the run rank 0 publishes.
std::unique_ptr<receipts::RunRecorder> open_recorder(const ExperimentSpec& spec, const RunOptions& options,
                                                     const RunPosture& posture, const ModelState& state);

// ---- 5. the train loop
struct TrainOutcome {
  std::optional<std::string> failure;  // why training stopped early; the run is then `failed`
  // The failure was the receipt store refusing a write (a full disk, a read-only file): bad input of
  // the environment, exit 2 like the same store refused before the run, though the run row exists.
  bool store_unwritable = false;
  // Steady step times (after the warm-up steps), and their step indices. Steps inside the profiled
  // window are left out when steady steps outside it remain: tracing slows them.
  std::vector<double> steady_ms;
  std::vector<int64_t> steady_steps;
  int64_t window_steps_excluded = 0;
  int64_t peak_memory = 0;             // CUDA allocator peak, or process RSS on the CPU
  int64_t peak_reserved = 0;           // CUDA: the allocator's reserved peak over the steps
  DeviceMemoryUse device_memory;       // CUDA: the device's memory after the loop (beside the allocator)
  std::optional<double> first_step_ms;
  std::optional<double> last_loss;
  std::optional<double> last_validation_loss;   // train.eval_every: the last evaluation's loss
  std::optional<int64_t> last_validation_step;  // and the steps trained when it was taken
  int64_t warmup_steps = 0;            // train.warmup_steps, raised to cover the graph capture step
  int64_t launched_ahead = 0;          // replayed steps launched before the previous step's read (compile.launch_ahead)
  receipts::CaptureFacts capture;      // the posture's decision, then what the capture step did
  // Kept alive until the receipt is closed: while it lives the thread works on the graph's side stream.
  std::shared_ptr<StepGraph> graph;
  std::vector<double> comm_wait_ms;  // data parallel: host wait for the gradient all-reduces, per step
  std::vector<double> comm_ms;       // data parallel: their own duration (GradientSync::comm_ms), per step
  // The same by kind (GradientSync::collective_ms), per step; NaN where unknown.
  std::vector<double> all_reduce_ms, reduce_scatter_ms, all_gather_ms, all_to_all_ms;
  std::optional<receipts::ShardingFacts> sharding;  // data parallel: the buckets and this rank's shard
};
// A CUDA run's memory into `out` (peak_reserved, device_memory): the allocator's reserved peak since the
// last step row, and the device's memory now. Nothing on the CPU.
void take_device_memory(TrainOutcome& out, const RunPosture& posture);
// Whether the loop checkpoints, or evaluates, after `step`.
bool checkpoint_after(const ExperimentSpec& spec, int64_t step);
bool eval_after(const ExperimentSpec& spec, int64_t step);
// Whether step + 1 may be launched before `step`'s numbers are read (compile.launch_ahead; it happens
// only while replaying a captured graph): only where nothing between the two steps reads or writes the
// model (a checkpoint, an evaluation), step + 1 is a step of the run, and the two steps lie on the same
// side of a traced window's edge (`traced`: RunProfiler::traced): the window opens before its first
// step is launched and closes after its last has run, while inside it the replays run back to back as
// they do outside, so the window shows the run's own posture.
bool may_launch_ahead(const ExperimentSpec& spec, int64_t step, const std::function<bool(int64_t)>& traced);
// `ledger` comes with the startup charge open (run_experiment opens it at process start): the loop
// closes it where the first step begins.
TrainOutcome train_loop(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                        ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                        RunProfiler& profiler, GoodputLedger& ledger);

// ---- 5b. ranks other than 0: their step rows and outliers are in rank 0's run (train_loop, through
// their own recorder); their medians and failure go to rank 0 through the rendezvous store
RunResult publish_rank_outcome(const RunPosture& posture, const TrainOutcome& outcome);
// Their profiling rows (window, kernels, trace artifact) straight into rank 0's run, which stays open
// until every rank's outcome is in: the store must be reachable from every node (always on one node).
// A store that cannot be written is a warning on stderr, not a failure of the rank.
void record_rank_profile(receipts::RunRecorder& recorder, RunProfiler& profiler);

// ---- 6. closing the receipt
RunResult finalise_receipt(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                           const ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                           RunProfiler& profiler, GoodputLedger& ledger, const TrainOutcome& outcome);
RunResult fail_receipt(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                       const ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                       GoodputLedger& ledger, const TrainOutcome& outcome, const std::string& error);

// Each rank's exposed_comm_share (exposed_communication_ns over window_ns of its profile window) and
// exposed_by_collective (each kind's exposed_<kind>_ns over window_ns), and their medians, from the
// profile_windows rows every rank wrote into the run (rank 0's last, in finalise_receipt): a rank whose
// window did not trace or measure it gets none, never 0.
void add_exposed_communication(receipts::Store& store, int64_t run_id, receipts::DistributedFacts& d);

// The typed facts of the run as far as they are known (the ok and the failed run alike).
receipts::RunFacts run_facts(const ExperimentSpec& spec, const RunPosture& posture, const ModelState& state,
                             const data::DataSource& source, const TrainOutcome& outcome);
// Data parallel: facts.memory becomes the rank that needed the most of its GPU (reserved peak + what lay
// beside the allocator), all three numbers from that rank; rank 0's own until then.
void take_largest_rank_memory(receipts::RunFacts& facts);

}  // namespace ablate::harness
