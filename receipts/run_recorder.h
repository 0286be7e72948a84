// receipts/run_recorder.h: the one writer of a run. Each process of a run holds one RunRecorder and
// writes the run through it only: the single process (or data-parallel rank 0) begins the run and
// owns its status (the RunLifecycle: heartbeat, termination signals -> killed, finish); a rank other than
// 0 attaches to rank 0's run and adds rows of its own (steps, outliers, profiling) under its rank.
//
//   auto rec = RunRecorder::begin(db_path, start);          // the run is `running` from here
//   rec->backends(rows); rec->catalog(rows);
//   rec->step(row);  ...                                    // buffered (receipts/step_buffer.h)
//   rec->capture(facts);                                    // as soon as the capture is decided
//   rec->finish_ok(summary);  or  rec->finish_failed(error, goodput, facts);
//
// Writes that belong to the run as a whole (env, backends, catalog, capture, goodput, finish) are the
// owner's: an attached recorder refuses them (StoreError), so a rank cannot overwrite rank 0's facts.
// Tests: tests/receipts/run_recorder_test.cpp (receipts_tests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "receipts/end_reserve.h"
#include "receipts/lifecycle.h"
#include "receipts/records.h"
#include "receipts/step_buffer.h"
#include "receipts/store.h"

namespace ablate::receipts {

class RunRecorder {
 public:
  // Opens the store (creating or migrating it), checks that it can record (StoreFileError for a
  // damaged or read-only store, nothing written), begins the run and starts its lifecycle.
  static std::unique_ptr<RunRecorder> begin(const std::string& db_path, const RunStart& start,
                                            LifecycleOptions lifecycle = {});
  // A data-parallel rank other than 0: rank 0's run, which must exist and be running.
  static std::unique_ptr<RunRecorder> attach(const std::string& db_path, std::int64_t run_id, std::int64_t rank);
  ~RunRecorder();  // pending step rows are flushed when possible; an unfinished owned run ends `failed`
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  std::int64_t run_id() const { return run_id_; }
  std::int64_t rank() const { return rank_; }
  bool owns_run() const { return life_ != nullptr; }
  const std::string& db_path() const { return db_path_; }
  // For the profiler's tables (kernels, attribution, windows, artifacts), written with this rank.
  Store& store() { return store_; }

  // The run as a whole (owner only).
  void env(const std::map<std::string, std::string>& values);
  void backends(const std::vector<BackendRow>& rows);
  void catalog(const std::vector<CatalogRow>& rows);
  // The CUDA graph decision as it becomes known: run_env compile.cuda_graphs_* (the summary's
  // cuda_graphs section is written at finish from the same facts).
  void capture(const CaptureFacts& facts);
  void goodput(const std::map<std::string, double>& seconds);

  // This rank's rows.
  void step(const StepRow& row);  // row.rank is this recorder's rank
  void flush_steps();
  void outliers(const std::vector<std::int64_t>& steps);
  // An evaluation on held-out data (owner only: the job's loss, reduced over the ranks).
  void evaluation(const EvaluationRow& row);

  // Ends the run (owner only; once). A failed run keeps the facts known when it failed.
  void finish_ok(const RunSummary& summary);
  void finish_failed(const std::string& error, const RunFacts& facts = {});
  bool finished() const;

 private:
  RunRecorder(std::string db_path, Store store, std::int64_t run_id, std::int64_t rank);
  void require_owner(const char* what) const;
  // Renews the disk space held for the run's end; throws StoreFileError (a full disk) when it cannot.
  void hold_end_reserve();

  std::string db_path_;
  Store store_;
  std::int64_t run_id_;
  std::int64_t rank_;
  std::unique_ptr<StepBuffer> steps_;
  std::unique_ptr<EndReserve> reserve_;  // owner only: disk space held for the run's end
  std::unique_ptr<RunLifecycle> life_;  // owner only; declared last: ends first
};

}  // namespace ablate::receipts
