// harness/train/checkpoint.h: checkpoint save/restore. A checkpoint is a folder step-NNNNNNNN/ with
// model.pt, optimizer.pt, state.json (next step, data position, spec/model hashes) and, written
// last, COMPLETE. It is assembled in a .tmp folder, every file fsynced, then renamed into place, so a
// crash mid-save never leaves something that looks complete. Resume picks the newest complete one.
// Tests: tests/harness/runner_test.cpp (20 steps == 10 + checkpoint + resume 10, bitwise on CPU).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "data/source.h"
#include "harness/train/optimizer.h"

namespace ablate::harness {

struct CheckpointState {
  int64_t next_step = 0;
  data::DataState data;
  std::string spec_model_hash;   // a checkpoint of another model is refused
  std::string data_fingerprint;  // ... and one taken on other data
};

// Returns the folder written. Under distributed.sharding every rank calls it (the optimizer's state is
// gathered, a collective) and only the rank with `writes` true writes the folder (returning "" elsewhere).
std::string save_checkpoint(const std::string& dir, torch::nn::Module& model, TrainOptimizer& optimizer,
                            const CheckpointState& state, bool writes = true);
// The newest complete checkpoint folder under `dir`, if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// Loads into model and optimizer (same structure; null: the optimizer later, load_optimizer_state),
// returns the state. Throws std::invalid_argument when the checkpoint belongs to another model or other data.
CheckpointState load_checkpoint(const std::string& folder, torch::nn::Module& model, TrainOptimizer* optimizer,
                                const std::string& expected_model_hash, const std::string& expected_data_fingerprint);
// The optimizer's state from the checkpoint folder (its optimizer.pt), read onto `device` (the run's).
// The file's layout is the same for every sharding stage and world size, so any of them resumes any other.
void load_optimizer_state(const std::string& folder, TrainOptimizer& optimizer, std::optional<torch::Device> device);

}  // namespace ablate::harness
