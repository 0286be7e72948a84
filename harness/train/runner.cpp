// harness/train/runner.cpp: see runner.h. run_experiment is the list of the run's stages in their
// order (harness/train/stages.h says what each takes and gives); the goodput ledger opens here, with
// the process, so startup counts from the moment the command began.
#include "harness/train/runner.h"

#include "harness/train/run_profiler.h"
#include "harness/train/stages.h"

namespace ablate::harness {

RunResult run_experiment(const ExperimentSpec& spec, const RunOptions& opt) {
  GoodputLedger ledger(opt.process_start);
  ledger.begin(Goodput::startup, opt.process_start);
  // Stages 1-3 can still reject the run as bad input: nothing is written before open_receipt.
  RunPosture posture = choose_posture(spec, opt);
  const auto source = open_run_data(spec, ledger);
  ModelState state = build_model(spec, opt, posture, *source, ledger);
  if (!posture.writes_receipt()) {
    // A data-parallel rank other than 0: trains its slice, records its own profiling rows into rank 0's
    // run, and hands its step rows and medians to rank 0.
    RunProfiler profiler(spec, opt.no_profile, posture.device, *posture.dispatcher, posture.group->rank());
    const TrainOutcome outcome = train_loop(spec, opt, posture, state, *source, nullptr, profiler, ledger);
    record_rank_profile(opt, posture, profiler);
    RunResult result = publish_rank_outcome(posture, outcome);
    if (!outcome.failure) posture.group->shutdown();
    return result;
  }
  // From here the run always ends ok, failed or killed.
  OpenReceipt receipt = open_receipt(spec, opt, posture, state);
  RunProfiler profiler(spec, opt.no_profile, posture.device, *posture.dispatcher);
  const TrainOutcome outcome = train_loop(spec, opt, posture, state, *source, &receipt, profiler, ledger);
  if (outcome.failure) return fail_receipt(opt, receipt, ledger, *outcome.failure);
  RunResult result = finalise_receipt(spec, opt, posture, state, *source, receipt, profiler, ledger, outcome);
  if (posture.group && result.status == "ok") posture.group->shutdown();
  return result;
}

}  // namespace ablate::harness
