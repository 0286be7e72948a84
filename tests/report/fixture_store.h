// tests/report/fixture_store.h: receipt stores built through the Store API for the report_tests suites:
// groups of runs with a chosen step time, backend, environment, final loss and status (running and
// abandoned runs are left unfinished, the abandoned ones with a stale heartbeat).
// Build and run: ninja -C build-report report_tests && build-report/tests/report_tests
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::report::testing {

// What one fixture run varies; defaults make a complete, comparable evidence run.
// Every member has an initializer ({} where the default is empty), so FixtureRun{.step_ms = 101} leaves
// nothing uninitialised in GCC 12's eyes (-Wmissing-field-initializers).
struct FixtureRun {
  double step_ms = 100;
  std::string backend = "reference";  // backends.attention in the spec
  std::string gpu_model = "NVIDIA H100 80GB HBM3";
  std::string git_revision = "abc123";
  std::string compiler = "GNU 13.3.0";
  double final_loss = 3.0;
  receipts::RunStatus status = receipts::RunStatus::ok;
  bool with_goodput = true;  // false: an ok run missing a required summary field (not evidence)
  std::int64_t train_steps = 100;          // a spec field other than the backend
  std::int64_t seed = 1234;                 // experiment.seed
  std::optional<std::string> catalog_role{};  // recorded for attention/<backend> when set
  // Optional detail for report tests: losses of steps 0..n-1 (rank 0), kernel rows, backend rows,
  // goodput seconds per category, and the run name (default fixture-<tag>).
  std::vector<double> losses{};
  std::vector<receipts::KernelRow> kernels{};
  std::vector<receipts::ProfileTimeRow> profile_time{};  // a profiled window's per-step time rows
  std::vector<receipts::BackendRow> backends{};
  std::map<std::string, double> goodput{};
  std::string name{};
  std::optional<std::int64_t> matrix_id{};  // with cell: the run belongs to that matrix cell (repeat 0)
  std::string cell{};
  // Data parallel: summary_json's "distributed" as the runner writes it (null: one process), and the
  // job's tokens/s (default: 1000 tokens a step over step_ms).
  nlohmann::json distributed{};
  std::optional<double> tokens_per_s{};
  std::int64_t peak_memory_bytes = std::int64_t{1} << 30;
  nlohmann::json moe{};  // summary_json's "moe" as the runner writes it for models with E blocks (null: none)
  nlohmann::json cuda_graphs{};            // summary_json's "cuda_graphs" (null: not recorded)
  std::optional<double> first_step_ms{};   // summary_json's "first_step_ms"
  bool profiled = false;                 // a traced profile window (summary_json's "profile" status ok)
  nlohmann::json model{};                  // summary_json's "model" (null: not recorded)
  nlohmann::json memory{};                 // summary_json's "memory" (null: not recorded)
  std::int64_t summary_steps = 100;      // the run's length (runs.steps)
  std::map<std::string, std::string> env{};  // further run_env keys, or replacements of the defaults
  std::optional<std::string> sharding{};     // distributed.sharding in the spec (absent: its default)
  std::vector<receipts::EvaluationRow> evaluations{};  // held-out evaluations (train.eval_every)
  std::optional<double> final_validation_loss{};        // summary_json's "final_validation_loss"
  bool changes_numerics = false;                      // the catalog row's flag, with catalog_role
};

class FixtureStore {
 public:
  FixtureStore() : store_(receipts::Store::open(dir_.file("receipts.db"))) {}
  // A store at `db_path`, kept after the fixture goes (tests/site_fixture_store.cpp writes one for a script).
  explicit FixtureStore(const std::string& db_path) : store_(receipts::Store::open(db_path)) {}

  receipts::Store& store() { return store_; }

  std::int64_t add(const std::string& tag, const FixtureRun& run) {
    receipts::RunStart start;
    start.name = run.name.empty() ? "fixture-" + tag : run.name;
    start.tags = {tag};
    start.lane = "tiny/1gpu/" + run.backend;
    nlohmann::json spec = {{"experiment", {{"name", start.name}, {"seed", run.seed}, {"tags", {tag}}}},
                           {"model", {{"config", "tiny"}}},
                           {"train", {{"steps", run.train_steps}}},
                           {"backends", {{"attention", run.backend}, {"strict", false}}}};
    if (run.sharding) spec["distributed"]["sharding"] = *run.sharding;
    start.spec_json = spec.dump();
    start.env = {{"gpu_model", run.gpu_model}, {"nvidia_driver", "550.54"}, {"cuda_runtime", "12.4"},
                 {"libtorch", "2.4.0"},        {"nccl", "2.20.5"},          {"git_revision", run.git_revision},
                 {"host", "fixture-host"},     {"compiler", run.compiler}};
    for (const auto& [key, value] : run.env) start.env[key] = value;
    if (run.matrix_id) {
      start.matrix_id = run.matrix_id;
      start.cell = run.cell;
      start.repeat = 0;
    }
    const std::int64_t id = store_.begin_run(start);
    if (run.catalog_role)
      store_.record_catalog(id, {{"attention", run.backend, *run.catalog_role, "reference", {}, run.changes_numerics}});
    std::vector<receipts::StepRow> steps;
    for (std::size_t i = 0; i < run.losses.size(); ++i) {
      receipts::StepRow step;
      step.step = static_cast<std::int64_t>(i);
      step.wall_ms = run.step_ms;
      step.tokens = 1000;
      step.loss = run.losses[i];
      steps.push_back(step);
    }
    if (!steps.empty()) store_.append_steps(id, steps);
    if (!run.kernels.empty()) store_.record_kernels(id, run.kernels);
    if (!run.profile_time.empty()) store_.record_profile_time(id, run.profile_time);
    if (!run.backends.empty()) store_.record_backends(id, run.backends);
    if (!run.goodput.empty()) store_.record_goodput(id, run.goodput);
    for (const auto& e : run.evaluations) store_.record_evaluation(id, e);
    receipts::RunSummary summary;
    summary.steps = run.summary_steps;
    summary.median_step_ms = run.step_ms;
    summary.tokens_per_s = run.tokens_per_s.value_or(1e6 / run.step_ms);  // default: 1000 tokens a step
    if (run.with_goodput) summary.goodput_pct = 90.0;
    summary.peak_memory_bytes = run.peak_memory_bytes;
    summary.flops_version = "v1";
    // The facts as the store holds them (summary_json), read through the typed reader as every report does.
    nlohmann::json facts = {{"final_loss", run.final_loss}};
    if (run.final_validation_loss) facts["final_validation_loss"] = *run.final_validation_loss;
    if (!run.distributed.is_null()) facts["distributed"] = run.distributed;
    if (!run.moe.is_null()) facts["moe"] = run.moe;
    if (!run.cuda_graphs.is_null()) facts["cuda_graphs"] = run.cuda_graphs;
    if (run.first_step_ms) facts["first_step_ms"] = *run.first_step_ms;
    if (run.profiled) facts["profile"] = {{"status", "ok"}, {"reason", ""}};
    if (!run.model.is_null()) facts["model"] = run.model;
    if (!run.memory.is_null()) facts["memory"] = run.memory;
    summary.facts = receipts::run_facts_from_json(facts, "fixture summary");
    // Still running, or abandoned: never finished, the abandoned one's heartbeat a day old.
    if (run.status == receipts::RunStatus::running) return id;
    if (run.status == receipts::RunStatus::abandoned) {
      receipts::testing::RawDb(store_.path())
          .exec_ok(fmt::format("UPDATE runs SET heartbeat_at = heartbeat_at - 86400 WHERE id = {}", id));
      return id;
    }
    const bool ok = run.status == receipts::RunStatus::ok;
    store_.finish_run(id, run.status, ok ? "" : "CUDA out of memory", summary);
    return id;
  }

  // One run per step time, otherwise alike.
  std::vector<std::int64_t> add_group(const std::string& tag, const std::vector<double>& step_ms, FixtureRun run = {}) {
    std::vector<std::int64_t> ids;
    for (const double ms : step_ms) {
      run.step_ms = ms;
      ids.push_back(add(tag, run));
    }
    return ids;
  }

 private:
  base::TempDir dir_;
  receipts::Store store_;
};

inline FixtureRun with_backend(std::string backend) {
  FixtureRun run;
  run.backend = std::move(backend);
  return run;
}

}  // namespace ablate::report::testing
