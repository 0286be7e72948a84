// harness/train/checkpoint.h: checkpoint save/restore. A checkpoint is a folder step-NNNNNNNN/ with
// model.pt, optimizer.pt, state.json (next step, data position, spec/model hashes, and the manifest:
// each file's size and SHA-256) and, written last, COMPLETE. It is assembled in a .tmp folder, every
// file fsynced, then renamed into place, so a crash mid-save never leaves something that looks
// complete. Resume picks the newest intact one: complete, its state.json sane and its files as the
// manifest lists them; a newer one that is not is skipped, and the run says which and why.
// The run that writes checkpoints holds the folder's lock (.lock, flock) for its lifetime, so two runs
// never write into one folder; after each save it keeps the newest train.keep_checkpoints.
// Tests: tests/harness/runner_test.cpp (20 steps == 10 + checkpoint + resume 10, bitwise on CPU),
// tests/harness/cli_receipts_test.cpp (damaged checkpoints, the lock, pruning),
// tests/harness/distributed_test.cpp (sharded and expert-parallel checkpoints, resumed either way).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/source.h"
#include "harness/train/optimizer.h"

namespace ablate::harness {

struct CheckpointState {
  int64_t next_step = 0;
  data::DataState data;
  std::string spec_model_hash;   // a checkpoint of another model is refused
  std::string data_fingerprint;  // ... and one taken on other data
};

class ExpertParallel;

// Under expert parallelism: the model's expert weights (HybridModel::expert_parameters(), this rank's rows
// of each) and the expert group that holds the other rows. A checkpoint holds every expert whole, as a run
// without expert parallelism writes it, so either resumes the other. Default: none.
struct ExpertWeights {
  std::vector<torch::Tensor> params;
  const ExpertParallel* group = nullptr;
};

// A parameter the model computes with in a lower precision than it trains (distributed.param_dtype) and
// the fp32 value a checkpoint writes in its place (GradientSync::master_values(): this rank's rows of an
// expert weight under expert parallelism).
using MasterValues = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

// Returns the folder written. Under distributed.sharding every rank calls it, under expert parallelism
// the ranks of rank 0's expert group (the optimizer's state and the experts are gathered, collectives);
// only the rank with `writes` true writes the folder (returning "" elsewhere). Every parameter is
// written in fp32: `masters` in place of the parameters they stand for.
std::string save_checkpoint(const std::string& dir, torch::nn::Module& model, TrainOptimizer& optimizer,
                            const CheckpointState& state, bool writes = true, const ExpertWeights& experts = {},
                            const MasterValues& masters = {});
// Why `folder` cannot be resumed from ("" when it is intact): no COMPLETE marker, a state.json that
// does not parse or holds nonsense (next_step < 1), a file missing or of another size or SHA-256 than
// its manifest says. A checkpoint written before manifests existed is checked without them.
std::string checkpoint_problem(const std::string& folder);
// The newest intact checkpoint folder under `dir`, if any; `skipped` gets "step-N: why" for each
// newer complete one that is not intact.
struct LatestCheckpoint {
  std::optional<std::string> folder;
  std::vector<std::string> skipped;
};
LatestCheckpoint latest_checkpoint(const std::string& dir);
// After a save: keeps the newest `keep` complete checkpoints (0: every one) and removes the others and
// any unfinished .tmp folder a crashed save left. Only the lock holder calls it.
void prune_checkpoints(const std::string& dir, int64_t keep);

// The exclusive lock of a checkpoint folder (its .lock file, flock), held while the object lives;
// the kernel releases it when the process ends, however it ends. Throws std::invalid_argument (exit
// 2) when another process holds it.
class CheckpointFolderLock {
 public:
  explicit CheckpointFolderLock(const std::string& dir);
  ~CheckpointFolderLock();
  CheckpointFolderLock(const CheckpointFolderLock&) = delete;
  CheckpointFolderLock& operator=(const CheckpointFolderLock&) = delete;

 private:
  int fd_ = -1;
};
// Loads into model and optimizer (same structure; null: the optimizer later, load_optimizer_state),
// returns the state; each of `experts` takes this rank's rows of its whole tensor. Throws
// std::invalid_argument when the checkpoint belongs to another model or other data.
CheckpointState load_checkpoint(const std::string& folder, torch::nn::Module& model, TrainOptimizer* optimizer,
                                const std::string& expected_model_hash, const std::string& expected_data_fingerprint,
                                const ExpertWeights& experts = {});
// The optimizer's state from the checkpoint folder (its optimizer.pt), read onto `device` (the run's).
// The file's layout is the same for every sharding stage and world size, so any of them resumes any other.
void load_optimizer_state(const std::string& folder, TrainOptimizer& optimizer, std::optional<torch::Device> device);

}  // namespace ablate::harness
