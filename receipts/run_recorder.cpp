// receipts/run_recorder.cpp: see run_recorder.h.
#include "receipts/run_recorder.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include "receipts/errors.h"
#include "receipts/sql.h"

namespace ablate::receipts {

std::unique_ptr<RunRecorder> RunRecorder::begin(const std::string& db_path, const RunStart& start,
                                                LifecycleOptions lifecycle) {
  Store store = Store::open(db_path);
  store.check_can_record();  // a damaged or read-only store: refused with the file as it was
  const std::int64_t run_id = store.begin_run(start);
  std::unique_ptr<RunRecorder> rec(new RunRecorder(db_path, std::move(store), run_id, 0));
  rec->life_ = std::make_unique<RunLifecycle>(db_path, run_id, lifecycle);
  rec->reserve_ = std::make_unique<EndReserve>(db_path);
  try {
    rec->hold_end_reserve();
  } catch (const StoreFileError& e) {  // no room for the run's end: it ends now, failed, saying why
    rec->life_->finish(RunStatus::failed, e.what());
    throw;
  }
  return rec;
}

std::unique_ptr<RunRecorder> RunRecorder::attach(const std::string& db_path, std::int64_t run_id, std::int64_t rank) {
  if (rank <= 0) throw StoreError(fmt::format("attaching to run {} needs a rank > 0 (rank 0 begins the run)", run_id));
  Store store = Store::open_existing(db_path);
  const auto row = store.get_run(run_id);  // an unknown run is a StoreError
  if (row.stored_status != RunStatus::running)
    throw StoreError(fmt::format("run {} is {}: rank {} cannot add to it", run_id, to_string(row.stored_status), rank));
  return std::unique_ptr<RunRecorder>(new RunRecorder(db_path, std::move(store), run_id, rank));
}

RunRecorder::RunRecorder(std::string db_path, Store store, std::int64_t run_id, std::int64_t rank)
    : db_path_(std::move(db_path)), store_(std::move(store)), run_id_(run_id), rank_(rank),
      steps_(std::make_unique<StepBuffer>(store_, run_id)) {}

RunRecorder::~RunRecorder() {
  try {
    if (steps_ && steps_->pending() > 0 && !finished()) steps_->flush();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ablate: run {} rank {}: {} step rows could not be written: {}\n", run_id_, rank_,
               steps_->pending(), e.what());
  }
}

void RunRecorder::require_owner(const char* what) const {
  if (!owns_run())
    throw StoreError(fmt::format("rank {} cannot write {} of run {}: rank 0 owns the run's facts", rank_, what, run_id_));
}

void RunRecorder::env(const std::map<std::string, std::string>& values) {
  require_owner("the environment");
  store_.record_env(run_id_, values);
}

void RunRecorder::backends(const std::vector<BackendRow>& rows) {
  require_owner("the backends");
  store_.record_backends(run_id_, rows);
}

void RunRecorder::catalog(const std::vector<CatalogRow>& rows) {
  require_owner("the catalog");
  store_.record_catalog(run_id_, rows);
}

void RunRecorder::capture(const CaptureFacts& c) {
  require_owner("the CUDA graph posture");
  std::map<std::string, std::string> rows = {{"compile.cuda_graphs_requested", c.requested ? "true" : "false"},
                                             {"compile.cuda_graphs_achieved", c.achieved ? "true" : "false"},
                                             {"compile.cuda_graphs_outcome", std::string(to_string(c.outcome))},
                                             {"compile.cuda_graphs_reason", c.reason}};
  if (c.capture_step) rows["compile.cuda_graphs_capture_step"] = std::to_string(*c.capture_step);
  if (c.capture_ms) rows["compile.cuda_graphs_capture_ms"] = fmt::format("{:.3f}", *c.capture_ms);
  store_.record_env(run_id_, rows);
}

void RunRecorder::goodput(const std::map<std::string, double>& seconds) {
  require_owner("the goodput ledger");
  store_.record_goodput(run_id_, seconds);
}

void RunRecorder::hold_end_reserve() {
  if (!reserve_ || reserve_->renew()) return;
  throw StoreFileError(SQLITE_FULL, sql::file_problem(SQLITE_FULL, db_path_,
                                                 fmt::format("{} KiB could not be held for the end of run {}",
                                                             reserve_->bytes() >> 10, run_id_)));
}

void RunRecorder::step(const StepRow& row) {
  StepRow own = row;
  own.rank = rank_;
  const std::size_t before = steps_->pending();
  steps_->add(own);
  if (steps_->pending() <= before) hold_end_reserve();  // rows were written: the WAL grew into the reserve
}

void RunRecorder::flush_steps() {
  steps_->flush();
  hold_end_reserve();
}

void RunRecorder::evaluation(const EvaluationRow& row) {
  require_owner("an evaluation");
  store_.record_evaluation(run_id_, row);
}

void RunRecorder::outliers(const std::vector<std::int64_t>& steps) {
  if (!steps.empty()) store_.flag_outliers(run_id_, rank_, steps);
}

void RunRecorder::finish_ok(const RunSummary& summary) {
  require_owner("the result");
  steps_->flush();
  life_->finish(RunStatus::ok, "", summary);
}

void RunRecorder::finish_failed(const std::string& error, const RunFacts& facts) {
  require_owner("the result");
  std::string why = error;
  try {
    steps_->flush();  // every completed step stays in the receipt, the failing one included
  } catch (const std::exception& e) {
    why += fmt::format(" (and {} step rows could not be written: {})", steps_->pending(), e.what());
  }
  RunSummary summary;
  summary.facts = facts;
  life_->finish(RunStatus::failed, why, summary);
}

bool RunRecorder::finished() const { return life_ && life_->finished(); }

}  // namespace ablate::receipts
