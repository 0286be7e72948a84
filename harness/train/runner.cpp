// harness/train/runner.cpp: see runner.h. run_experiment is the list of the run's stages in their
// order (harness/train/stages.h says what each takes and gives); the goodput ledger opens here, with
// the process, so startup counts from the moment the command began.
#include "harness/train/runner.h"

#include <fmt/format.h>

#include "harness/train/run_profiler.h"
#include "harness/train/stages.h"

namespace ablate::harness {

RunResult run_experiment(const ExperimentSpec& spec, const RunOptions& opt) {
  GoodputLedger ledger(opt.process_start);
  ledger.begin(Goodput::startup, opt.process_start);
  // Stages 1-3 can still reject the run as bad input: nothing is written before open_recorder.
  RunPosture posture = choose_posture(spec, opt);
  const auto source = open_run_data(spec, ledger);
  ModelState state;
  std::optional<std::string> build_failure;
  try {
    state = build_model(spec, opt, posture, *source, ledger);
  } catch (const c10::OutOfMemoryError&) {
    // The model (its weights, optimizer state, a restored checkpoint) does not fit the device or
    // train.memory_limit_gib: a failed run with its receipt, as one that runs out at a step.
    build_failure = out_of_memory_failure(posture, "building the model, before step 0");
  }
  // From here the run always ends ok, failed or killed (rank 0 owns its status).
  const auto recorder = open_recorder(spec, opt, posture, state);
  if (build_failure) {
    TrainOutcome outcome;
    outcome.failure = build_failure;
    take_device_memory(outcome, posture);  // what it held when the model did not fit
    if (!recorder->owns_run()) return publish_rank_outcome(posture, outcome);
    return fail_receipt(spec, opt, posture, state, *source, *recorder, ledger, outcome, *build_failure);
  }
  RunProfiler profiler(spec, opt.no_profile, posture.device, *posture.dispatcher, recorder->rank());
  TrainOutcome outcome = train_loop(spec, opt, posture, state, *source, *recorder, profiler, ledger);
  // A captured step holds NCCL's plans of its collectives: the graph goes before the communicators
  // are finalised (ncclCommFinalize waits for every graph that holds them).
  const auto shutdown = [&] {
    outcome.graph.reset();
    if (posture.counts) posture.counts->shutdown();
    posture.group->shutdown();
  };
  if (!recorder->owns_run()) {
    // A data-parallel rank other than 0: its profiling rows into rank 0's run, its medians to rank 0.
    record_rank_profile(*recorder, profiler);
    // Said here too: the launcher may end the job on this rank's exit before rank 0 reads the store.
    if (outcome.failure) fmt::print(stderr, "ablate: rank {} failed: {}\n", recorder->rank(), *outcome.failure);
    RunResult result = publish_rank_outcome(posture, outcome);
    if (!outcome.failure) shutdown();
    return result;
  }
  if (outcome.failure)
    return fail_receipt(spec, opt, posture, state, *source, *recorder, ledger, outcome, *outcome.failure);
  RunResult result = finalise_receipt(spec, opt, posture, state, *source, *recorder, profiler, ledger, outcome);
  if (posture.group && result.status == "ok") shutdown();
  return result;
}

}  // namespace ablate::harness
