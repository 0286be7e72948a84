// harness/train/stages.h: the stages of one run, in the order run_experiment (runner.cpp) calls them.
// Each stage is one function with explicit inputs and outputs (torchtitan style), so a stage can be
// tested on its own:
//   1. choose_posture    device, dtype, backends resolved against the device, compile posture (LibTorch's
//                        global flags, the CUDA-graph decision). Bad input throws; nothing is written.
//   2. open_run_data     the data source (corpus read or cached, or synthetic), charged to data_prep.
//   3. build_model       seeded model and optimizer; resume from the latest checkpoint. Throws when the
//                        checkpoint leaves nothing to train. Still nothing written.
//   4. open_receipt      the run row (fingerprint, backends, catalog) and its lifecycle (heartbeat,
//                        SIGINT/SIGTERM -> killed). From here the run always ends ok, failed or killed.
//   5. train_loop        the steps: profiler window, CUDA-graph capture, step rows to the store (by
//                        count or time: receipts/step_buffer.h), checkpoints. A training failure is
//                        returned, not thrown.
//   6. finalise_receipt  outliers, compile facts, profiling evidence, goodput, summary, status ok; or
//      fail_receipt      goodput and status failed with the reason.
// Tests: tests/harness/stages_test.cpp (stages on their own), tests/harness/runner_test.cpp (the chain).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/compile_posture.h"
#include "data/source.h"
#include "harness/env.h"
#include "harness/goodput.h"
#include "spec/spec.h"
#include "harness/train/data_parallel.h"
#include "harness/train/optimizer.h"
#include "harness/train/runner.h"
#include "kernels/dispatch.h"
#include "model/hybrid_model.h"
#include "receipts/lifecycle.h"
#include "receipts/store.h"

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
  GraphCapturePosture graphs;  // the train loop sets achieved / reason
  // Data parallel (distributed.nproc > 1): this rank's membership; null for a single process. Rank 0
  // alone writes the receipt, with every rank's step rows.
  std::shared_ptr<ProcessGroup> group;
  bool writes_receipt() const { return !group || group->rank() == 0; }
};
// The model's shapes the backends' availability checks see (kernels/catalog.h ModelDims), for the block
// kinds in its pattern only.
kernels::ModelDims model_dims(const model::ModelConfig& m);
// Throws std::invalid_argument (a device that is not there, distributed.nproc against the launcher's
// world, a strict backend that is unavailable, on this device or for the model's shapes). Joins the process group when launched as ranks (the
// rendezvous waits up to distributed.timeout_s). Applies [compile] to LibTorch's global context.
RunPosture choose_posture(const ExperimentSpec& spec, const RunOptions& options);

// ---- 2. data
// Throws data::DataError for bad data input.
std::unique_ptr<data::DataSource> open_run_data(const ExperimentSpec& spec, GoodputLedger& ledger);

// ---- 3. model, optimizer, resume
struct ModelState {
  model::HybridModel model{nullptr};
  std::vector<torch::Tensor> params;
  std::unique_ptr<AdamW> optimizer;
  std::string model_hash;
  std::string checkpoint_dir;  // train.checkpoint_dir, else <db folder>/checkpoints/<experiment name>
  int64_t start_step = 0;      // > 0 when resumed
  data::DataState data_state;  // where the data stream resumes
  std::string resumed_from;    // the checkpoint folder, "" when not resumed
};
// Throws std::invalid_argument when the latest checkpoint is already at train.steps, or when it does
// not belong to this model or data (load_checkpoint).
ModelState build_model(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                       const data::DataSource& source, GoodputLedger& ledger);

// ---- 4. the receipt
struct OpenReceipt {
  receipts::Store store;
  int64_t run_id = 0;
  Fingerprint env;  // as recorded at begin_run
  std::unique_ptr<receipts::RunLifecycle> life;  // declared after store: ends first
};
// Creates the store when missing (StoreError for a store that is damaged or cannot be written).
OpenReceipt open_receipt(const ExperimentSpec& spec, const RunOptions& options, const RunPosture& posture,
                         const ModelState& state);

// ---- 5. the train loop
struct TrainOutcome {
  std::optional<std::string> failure;  // why training stopped early; the run is then `failed`
  std::vector<double> steady_ms;       // step times after the warm-up steps
  std::vector<int64_t> steady_steps;   // their step indices
  int64_t peak_memory = 0;             // CUDA allocator peak, or process RSS on the CPU
  double first_step_ms = 0;
  double last_loss = NAN;
  int64_t warmup_steps = 0;    // train.warmup_steps, raised to cover the graph capture step
  int64_t capture_step = -1;   // the step a CUDA graph is captured at (-1: none planned)
  // Kept alive until the receipt is closed: while it lives the thread works on the graph's side stream.
  std::shared_ptr<StepGraph> graph;
  std::vector<double> comm_wait_ms;  // data parallel: host wait for the gradient all-reduces, per step
  std::vector<double> comm_ms;       // data parallel: their own duration (GradientSync::comm_ms), per step
};
// `ledger` comes with the startup charge open (run_experiment opens it at process start): the loop
// closes it where the first step begins.
// `receipt` is null on ranks other than 0.
TrainOutcome train_loop(const ExperimentSpec& spec, const RunOptions& options, RunPosture& posture, ModelState& state,
                        const data::DataSource& source, OpenReceipt* receipt, RunProfiler& profiler,
                        GoodputLedger& ledger);

// ---- 5b. ranks other than 0: their step rows are in rank 0's run (train_loop); their medians and
// failure go to rank 0 through the rendezvous store
RunResult publish_rank_outcome(const RunPosture& posture, const TrainOutcome& outcome);
// Their profiling rows (window, kernels, trace artifact) straight into rank 0's run, which stays open
// until every rank's outcome is in: the store must be reachable from every node (always on one node).
// A store that cannot be written is a warning on stderr, not a failure of the rank.
void record_rank_profile(const RunOptions& options, const RunPosture& posture, RunProfiler& profiler);

// ---- 6. closing the receipt
RunResult finalise_receipt(const ExperimentSpec& spec, const RunOptions& options, RunPosture& posture,
                           const ModelState& state, const data::DataSource& source, OpenReceipt& receipt,
                           RunProfiler& profiler, GoodputLedger& ledger, const TrainOutcome& outcome);
RunResult fail_receipt(const RunOptions& options, OpenReceipt& receipt, GoodputLedger& ledger, const std::string& error);

}  // namespace ablate::harness
