// harness/train/runner.h: one declared experiment, end to end (docs/architecture.md "One run"):
// validate against the machine, open the receipt, build the model and its seams, train, close the
// receipt with a summary, as the named stages of harness/train/stages.h called in order. Everything
// that can be rejected as bad input (strict backends, a device that is not there, data errors, a
// damaged or read-only store) is rejected BEFORE the run row is written.
// Tests: tests/harness/runner_test.cpp (tiny on the CPU, through the real store), stages_test.cpp.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "harness/env.h"
#include "harness/world.h"
#include "spec/spec.h"

namespace ablate::harness {

struct RunOptions {
  std::string db_path = "receipts.db";
  std::chrono::steady_clock::time_point process_start = std::chrono::steady_clock::now();
  bool quiet = false;  // no progress lines on stdout
  std::optional<int64_t> matrix_id;  // set by `ablate matrix run` for its cells
  std::string cell;
  int64_t repeat = 0;
  // `ablate run --no-profile`: leave CUPTI to nsys/ncu (the receipt says profiling off); NVTX stays on.
  bool no_profile = false;
  // Test-only: try a requested CUDA graph capture even where the up-front check refuses it, so the
  // fallback after a failed capture can be exercised (tests/harness/profiling_gpu_test.cpp).
  bool attempt_graph_capture_for_testing = false;
  // Test-only: seam -> backend whose function the run's Dispatcher calls in place of the chosen one,
  // still reporting the chosen one (kernels::Dispatcher::with_implementation_for_testing), so that the
  // profiler's observed-backend check must flag it (tests/harness/profiling_gpu_test.cpp).
  std::map<std::string, std::string> implementations_for_testing;
  // This process's place in a multi-process job (`ablate run` reads it from the launcher's
  // environment: torchrun, SLURM, `ablate launch`); nullopt: a single process.
  std::optional<WorldEnv> world;
};

struct RunResult {
  int64_t run_id = 0;
  std::string status;  // ok | failed (ranks other than 0 write no receipt: run_id 0)
  std::string error;
  int exit_code = 0;   // 0 ok, 1 failed, 2 failed because the receipt store refused a write (full disk)
};

// Throws SpecError / DataError / StoreError / StoreFileError / std::invalid_argument for bad input (nothing written);
// a run that started and failed returns status failed and exit code 1.
RunResult run_experiment(const ExperimentSpec& spec, const RunOptions& options);

// The device half of the fingerprint (LibTorch, GPU, CUDA runtime, cuDNN, NCCL).
Fingerprint device_fingerprint();

}  // namespace ablate::harness
