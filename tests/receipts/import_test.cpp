// tests/receipts/import_test.cpp: Store::import_stores (`ablate import`): runs with every row under new
// ids, decisions and matrices following them, importing twice adding nothing, provenance, a changed run
// refused naming its fields, a failure leaving the destination byte for byte as it was, older sources
// read through an upgraded copy (the file untouched), newer and foreign ones refused, live runs left
// out, artifacts copied under their hash.
// Run: build/tests/receipts_tests --gtest_filter='Import*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "base/clock.h"
#include "base/sha256.h"
#include "receipts/schema.h"
#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RawDb;

// The runs a source store holds (its own ids).
struct SourceRuns {
  std::int64_t profiled = 0, failed = 0, cell = 0, matrix = 0;
  std::string trace;  // the profiled run's artifact
};

// A store with a matrix, a profiled ok run (steps, evaluations, kernels, a profile window, a trace, an
// annotation), a failed run, an ok run in the matrix, and a decision citing two runs and the matrix.
SourceRuns make_source(const std::string& path) {
  auto store = Store::open(path);
  SourceRuns ids;
  ids.matrix = store.create_matrix("loss", R"({"name":"loss","cells":["baseline"]})");

  RunStart start = testing::sample_start("src-profiled", {"imported"});
  start.host = "gpu-node-07";
  ids.profiled = store.begin_run(start);
  store.append_steps(ids.profiled, testing::make_steps(50));
  store.record_evaluation(ids.profiled, {49, 2.75, 4096, 0.5});
  store.record_kernels(ids.profiled, {{"gemm_bf16", "gemm", "swiglu", 0, 40, 400000}});
  ProfileWindowRow window;
  window.status = "ok";
  window.compute_ns = 8000;
  window.communication_ns = 3000;
  window.exposed_communication_ns = 1200;
  store.record_profile_window(ids.profiled, window);
  const std::filesystem::path trace_dir = std::filesystem::path(path).parent_path() / "runs" / "1";
  std::filesystem::create_directories(trace_dir);
  ids.trace = (trace_dir / "run1_rank0.pt.trace.json.gz").string();
  testing::write_file(ids.trace, "a trace of run 1");
  store.add_artifact(ids.profiled, "trace", ids.trace);
  store.finish_run(ids.profiled, RunStatus::ok, "", testing::sample_summary(50));
  store.annotate(ids.profiled, "profiled on node 7");

  ids.failed = store.begin_run(testing::sample_start("src-failed"));
  store.append_steps(ids.failed, testing::make_steps(3));
  store.finish_run(ids.failed, RunStatus::failed, "loss is NaN at step 3", {});

  RunStart cell = testing::sample_start("src-cell");
  cell.matrix_id = ids.matrix;
  cell.cell = "baseline";
  cell.repeat = 0;
  ids.cell = store.begin_run(cell);
  store.append_steps(ids.cell, testing::make_steps(10));
  store.finish_run(ids.cell, RunStatus::ok, "", testing::sample_summary(10));

  Decision decision;
  decision.seam = "loss";
  decision.backend = "chunked";
  decision.verdict = Verdict::keep;
  decision.evidence_run_ids = {ids.profiled, ids.cell};
  decision.matrix_id = ids.matrix;
  decision.details = "2 runs a side";
  store.record_decision(decision);
  return ids;
}

// A destination that already holds runs and a matrix of its own, so imported ids cannot stay the same.
void make_destination(const std::string& path) {
  auto store = Store::open(path);
  store.create_matrix("other", R"({"name":"other"})");
  for (const char* name : {"dest-a", "dest-b", "dest-c", "dest-d"}) {
    const auto id = store.begin_run(testing::sample_start(name));
    store.finish_run(id, RunStatus::ok, "", testing::sample_summary());
  }
}

std::int64_t id_of(Store& store, const std::string& uid) {
  const auto rows = store.query("SELECT id FROM runs WHERE uid = ?", {uid});
  if (rows.size() != 1) throw std::runtime_error("no run with uid " + uid);
  return rows[0]["id"].get<std::int64_t>();
}

// A run's document without the numbers that are each store's own.
nlohmann::json without_ids(nlohmann::json doc) {
  doc["run"].erase("id");
  doc["run"].erase("matrix_id");
  if (doc["matrix_cell"].is_object()) doc["matrix_cell"].erase("matrix_id");
  for (auto& note : doc["annotations"]) note.erase("id");
  return doc;
}

class ImportTest : public ::testing::Test {
 protected:
  base::TempDir dir_{"ablate-import-test"};
  std::string source_ = dir_.file("gpu/receipts.db");
  std::string dest_ = dir_.file("archive.db");
  SourceRuns ids_;

  void SetUp() override {
    std::filesystem::create_directories(dir_.file("gpu"));
    ids_ = make_source(source_);
    make_destination(dest_);
  }
};

TEST_F(ImportTest, AddsRunsWithEveryRowUnderNewIdsLeavingTheSourceUntouched) {
  const std::string source_sha = base::sha256_file(source_);
  const auto imported = Store::import_stores(dest_, {source_});
  ASSERT_EQ(imported.size(), 1u);
  EXPECT_EQ(imported[0].runs_added, 3);
  EXPECT_EQ(imported[0].runs_present, 0);
  EXPECT_EQ(imported[0].step_rows_added, 63);
  EXPECT_EQ(imported[0].matrices_added, 1);
  EXPECT_EQ(imported[0].decisions_added, 1);
  EXPECT_EQ(imported[0].annotations_added, 1);
  EXPECT_EQ(base::sha256_file(source_), source_sha);

  auto source = Store::open(source_);
  auto dest = Store::open(dest_);
  EXPECT_EQ(dest.list_runs().size(), 7u);
  for (const std::int64_t id : {ids_.profiled, ids_.failed, ids_.cell}) {
    const RunRow run = source.get_run(id);
    const std::int64_t here = id_of(dest, run.uid);
    EXPECT_NE(here, id) << run.name;
    EXPECT_EQ(without_ids(dest.run_json(here)), without_ids(source.run_json(id))) << run.name;
  }
  const auto window = dest.run_json(id_of(dest, source.get_run(ids_.profiled).uid))["profile"]["windows"][0];
  EXPECT_EQ(window["communication_ns"], 3000);
  EXPECT_EQ(window["exposed_communication_ns"], 1200);
  const RunRow failed = dest.get_run(id_of(dest, source.get_run(ids_.failed).uid));
  EXPECT_EQ(failed.status, RunStatus::failed);
  EXPECT_EQ(failed.error, "loss is NaN at step 3");
  EXPECT_FALSE(is_evidence(failed));
  // Imported finished runs are as frozen here as they were there.
  EXPECT_THROW(dest.append_steps(failed.id, testing::make_steps(1, 100)), StoreError);
}

TEST_F(ImportTest, ImportingTheSameStoreTwiceAddsNothing) {
  Store::import_stores(dest_, {source_});
  const std::string after_first = base::sha256_file(dest_);
  const auto again = Store::import_stores(dest_, {source_, source_});
  ASSERT_EQ(again.size(), 2u);
  for (const auto& source : again) {
    EXPECT_EQ(source.import_id, 0);
    EXPECT_EQ(source.runs_added, 0);
    EXPECT_EQ(source.runs_present, 3);
    EXPECT_EQ(source.decisions_added + source.matrices_added + source.annotations_added, 0);
  }
  EXPECT_EQ(base::sha256_file(dest_), after_first);
  auto dest = Store::open(dest_);
  EXPECT_EQ(dest.list_runs().size(), 7u);
  EXPECT_EQ(dest.query("SELECT count(*) AS n FROM imports")[0]["n"], 1);
}

TEST_F(ImportTest, AnAnnotationAddedInTheSourceSinceIsTheOnlyThingAReimportAdds) {
  Store::import_stores(dest_, {source_});
  Store::open(source_).annotate(ids_.failed, "reviewed: data bug");
  const auto again = Store::import_stores(dest_, {source_});
  EXPECT_EQ(again[0].annotations_added, 1);
  EXPECT_EQ(again[0].runs_added, 0);
  auto dest = Store::open(dest_);
  const auto here = id_of(dest, Store::open(source_).get_run(ids_.failed).uid);
  EXPECT_EQ(dest.run_json(here)["annotations"][0]["text"], "reviewed: data bug");
}

TEST_F(ImportTest, DecisionsAndMatricesFollowTheRenumberedIds) {
  Store::import_stores(dest_, {source_});
  auto source = Store::open(source_);
  auto dest = Store::open(dest_);
  const std::int64_t profiled = id_of(dest, source.get_run(ids_.profiled).uid);
  const std::int64_t cell = id_of(dest, source.get_run(ids_.cell).uid);

  const auto matrices = dest.query("SELECT id FROM matrices WHERE name = 'loss'");
  ASSERT_EQ(matrices.size(), 1u);
  const std::int64_t matrix = matrices[0]["id"].get<std::int64_t>();
  EXPECT_NE(matrix, ids_.matrix);  // the destination's own matrix took that number
  ASSERT_EQ(dest.matrix_cells(matrix).size(), 1u);
  EXPECT_EQ(dest.matrix_cells(matrix)[0].run_id, cell);
  EXPECT_EQ(dest.get_run(cell).matrix_id, matrix);

  const auto decisions = dest.list_decisions("loss", "chunked");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].evidence_run_ids, (std::vector<std::int64_t>{profiled, cell}));
  EXPECT_EQ(decisions[0].matrix_id, matrix);
  EXPECT_EQ(decisions[0].verdict, Verdict::keep);
  EXPECT_EQ(decisions[0].decided_at, source.list_decisions()[0].decided_at);
}

TEST_F(ImportTest, RecordsWhereEachRunCameFrom) {
  const std::string sha = base::sha256_file(source_);
  const auto imported = Store::import_stores(dest_, {source_});
  auto dest = Store::open(dest_);
  const auto rows = dest.query("SELECT * FROM imports");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], imported[0].import_id);
  EXPECT_EQ(rows[0]["source_path"], std::filesystem::absolute(source_).lexically_normal().string());
  EXPECT_EQ(rows[0]["source_sha256"], sha);
  EXPECT_EQ(rows[0]["source_bytes"], std::filesystem::file_size(source_));
  EXPECT_EQ(rows[0]["source_schema_version"], schema::latest_version());
  const auto hosts = nlohmann::json::parse(rows[0]["source_hosts"].get<std::string>()).get<std::set<std::string>>();
  EXPECT_EQ(hosts, (std::set<std::string>{"gpu-node-07", Store::open(source_).get_run(ids_.failed).host}));
  EXPECT_EQ(rows[0]["runs_added"], 3);
  EXPECT_EQ(rows[0]["step_rows_added"], 63);
  EXPECT_GT(rows[0]["imported_at"].get<double>(), base::unix_now() - 600);

  auto source = Store::open(source_);
  const auto links = dest.query("SELECT run_id, import_id, source_run_id FROM import_runs ORDER BY source_run_id");
  ASSERT_EQ(links.size(), 3u);
  for (const auto& link : links) {
    EXPECT_EQ(link["import_id"], imported[0].import_id);
    EXPECT_EQ(link["run_id"], id_of(dest, source.get_run(link["source_run_id"].get<std::int64_t>()).uid));
  }
  RawDb raw(dest_);
  EXPECT_THAT(raw.exec("UPDATE imports SET runs_added = 0"), HasSubstr("append-only"));
  EXPECT_THAT(raw.exec("DELETE FROM import_runs"), HasSubstr("append-only"));
}

// A run's receipts never change: the same uid with other content means one of the stores was altered.
TEST_F(ImportTest, RefusesARunHereWithOtherContentNamingItAndTheFields) {
  Store::import_stores(dest_, {source_});
  const std::string uid = Store::open(source_).get_run(ids_.profiled).uid;
  {
    RawDb raw(source_);  // altered past the guards on purpose
    raw.exec_ok("DROP TRIGGER runs_append_only_update");
    raw.exec_ok(fmt::format("UPDATE runs SET median_step_ms = 99.5 WHERE id = {}", ids_.profiled));
    raw.exec_ok("DROP TRIGGER steps_append_only_delete");
    raw.exec_ok(fmt::format("DELETE FROM steps WHERE run_id = {} AND step = 49", ids_.profiled));
  }
  const std::string before = base::sha256_file(dest_);
  try {
    Store::import_stores(dest_, {source_});
    FAIL() << "expected a StoreError";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_THAT(what, HasSubstr(fmt::format("run {} ('src-profiled', uid {})", ids_.profiled, uid)));
    EXPECT_THAT(what, HasSubstr("median_step_ms (here 104.5, in receipts.db 99.5)"));
    EXPECT_THAT(what, HasSubstr("steps rows (here 50, in receipts.db 49)"));
    EXPECT_THAT(what, HasSubstr("Nothing was imported"));
    EXPECT_THAT(what, Not(HasSubstr("src-failed")));
  }
  EXPECT_EQ(base::sha256_file(dest_), before);
}

TEST_F(ImportTest, AConflictInTheLastSourceLeavesTheDestinationByteIdentical) {
  // The second source holds a run of the first with another status: found after the first is merged.
  const std::string copy = dir_.file("copy.db");
  std::filesystem::copy_file(source_, copy);
  {
    RawDb raw(copy);
    raw.exec_ok("DROP TRIGGER runs_append_only_update");
    raw.exec_ok(fmt::format("UPDATE runs SET status = 'killed', error = 'killed by SIGTERM' WHERE id = {}", ids_.failed));
  }
  const std::string before = base::sha256_file(dest_);
  try {
    Store::import_stores(dest_, {source_, copy});
    FAIL() << "expected a StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("status (here 'failed', in copy.db 'killed')"));
    EXPECT_THAT(e.what(), HasSubstr("error (here 'loss is NaN at step 3', in copy.db 'killed by SIGTERM')"));
  }
  EXPECT_EQ(base::sha256_file(dest_), before);
  EXPECT_EQ(Store::open(dest_).list_runs().size(), 4u);
}

// Stores made before schema v7 (most of the project's own) are read through an upgraded copy: the file
// stays as it was, and its runs get the same uids each time, so a second import adds nothing.
TEST_F(ImportTest, ReadsAnOlderSchemaThroughAnUpgradedCopy) {
  const std::string old = dir_.file("v6.db");
  RawDb(old).exec_ok(testing::read_file(testing::fixture("schema_v6.sql")));
  const std::string old_sha = base::sha256_file(old);
  const auto imported = Store::import_stores(dest_, {old});
  EXPECT_EQ(imported[0].schema_version, 6);
  EXPECT_EQ(imported[0].runs_added, 4);
  EXPECT_EQ(imported[0].decisions_added, 1);
  EXPECT_EQ(base::sha256_file(old), old_sha);
  EXPECT_EQ(RawDb(old).scalar("PRAGMA user_version"), "6");

  auto dest = Store::open(dest_);
  const auto by_name = dest.query("SELECT id FROM runs WHERE name IN ('tiny-matrix-cell', 'tiny-evaluated') ORDER BY name");
  ASSERT_EQ(by_name.size(), 2u);
  const auto decisions = dest.list_decisions("loss", "chunked");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].evidence_run_ids, (std::vector<std::int64_t>{by_name[1]["id"].get<std::int64_t>(),
                                                                       by_name[0]["id"].get<std::int64_t>()}));
  EXPECT_EQ(dest.run_json(by_name[0]["id"].get<std::int64_t>())["evaluations"][0]["loss"], 8.5);
  EXPECT_EQ(dest.query("SELECT source_schema_version AS v FROM imports")[0]["v"], 6);
  // A window traced before communication was measured arrives unknown, not as "none exposed".
  const auto window = dest.query(
      "SELECT w.compute_ns, w.exposed_communication_ns FROM profile_windows AS w JOIN runs AS r ON r.id = w.run_id "
      "WHERE r.name = 'tiny-moe-profiled'");
  ASSERT_EQ(window.size(), 1u);
  EXPECT_EQ(window[0]["compute_ns"], 80000000);
  EXPECT_TRUE(window[0]["exposed_communication_ns"].is_null());

  const auto again = Store::import_stores(dest_, {old});
  EXPECT_EQ(again[0].runs_added, 0);
  EXPECT_EQ(again[0].runs_present, 4);
  EXPECT_EQ(again[0].import_id, 0);
}

TEST_F(ImportTest, RefusesNewerAndForeignStoresBeforeTheDestinationExists) {
  const std::string newer = dir_.file("newer.db");
  Store::open(newer);
  const int version = schema::latest_version() + 1;
  RawDb(newer).exec_ok(fmt::format("PRAGMA user_version = {}", version));
  const std::string foreign = dir_.file("foreign.db");
  RawDb(foreign).exec_ok("CREATE TABLE customers (id INTEGER PRIMARY KEY)");
  const std::string text = dir_.file("notes.txt");
  testing::write_file(text, "not a database at all");
  const std::string fresh = dir_.file("fresh.db");

  const auto refused = [&](const std::vector<std::string>& sources) -> std::string {
    try {
      Store::import_stores(fresh, sources);
    } catch (const StoreError& e) {
      return e.what();
    }
    return "imported";
  };
  EXPECT_THAT(refused({source_, newer}),
              AllOf(HasSubstr(newer), HasSubstr(fmt::format("schema version {}, this ablate knows up to {}", version,
                                                            schema::latest_version())),
                    HasSubstr("newer ablate"), HasSubstr("nothing was imported")));
  EXPECT_THAT(refused({foreign}), HasSubstr("not an ablate receipt store"));
  EXPECT_THAT(refused({text}), HasSubstr("not a SQLite database"));
  EXPECT_THAT(refused({dir_.file("missing.db")}), HasSubstr("no such file"));
  EXPECT_THAT(refused({}), HasSubstr("nothing to import"));
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_EQ(RawDb(newer).scalar("PRAGMA user_version"), std::to_string(version));

  const std::string before = base::sha256_file(dest_);
  EXPECT_THROW(Store::import_stores(dest_, {dest_}), StoreError);
  EXPECT_EQ(base::sha256_file(dest_), before);
}

// A running run whose owner still beats is being written there: left out. One whose owner died reads
// `abandoned` there and is imported as it reads, abandoned here too, never evidence.
TEST_F(ImportTest, LeavesLiveRunsOutAndImportsAbandonedOnesAsTheyRead) {
  std::string live_uid, dead_uid;
  {
    auto source = Store::open(source_);
    const auto live = source.begin_run(testing::sample_start("still-training"));
    const auto dead = source.begin_run(testing::sample_start("owner-killed"));
    source.append_steps(dead, testing::make_steps(5));
    RawDb(source_).exec_ok(fmt::format("UPDATE runs SET heartbeat_at = {} WHERE id = {}", base::unix_now() - 3600, dead));
    ASSERT_EQ(source.get_run(dead).status, RunStatus::abandoned);
    live_uid = source.get_run(live).uid;
    dead_uid = source.get_run(dead).uid;
  }
  const auto imported = Store::import_stores(dest_, {source_});
  EXPECT_EQ(imported[0].runs_added, 4);
  EXPECT_EQ(imported[0].runs_left_running, 1);
  ASSERT_EQ(imported[0].notes.size(), 1u);
  EXPECT_THAT(imported[0].notes[0], AllOf(HasSubstr("'still-training'"), HasSubstr(live_uid), HasSubstr("import this store again")));
  auto dest = Store::open(dest_);
  EXPECT_TRUE(dest.query("SELECT id FROM runs WHERE uid = ?", {live_uid}).empty());
  const RunRow dead = dest.get_run(id_of(dest, dead_uid));
  EXPECT_EQ(dead.status, RunStatus::abandoned);
  EXPECT_EQ(dead.stored_status, RunStatus::running);
  EXPECT_FALSE(is_evidence(dead));
  EXPECT_EQ(dest.run_json(dead.id)["steps"].size(), 5u);
}

// The store moved to another machine with its traces beside it (runs/1/...): the recorded absolute path
// is gone, the file is found beside the store, checked against its sha256 and copied under it.
TEST_F(ImportTest, CopyArtifactsPutsEachFileUnderItsHashBesideTheDestination) {
  const std::filesystem::path moved = dir_.path() / "from-gpu";
  std::filesystem::rename(dir_.file("gpu"), moved);
  const std::string moved_source = (moved / "receipts.db").string();
  const std::string sha = base::sha256_hex("a trace of run 1");
  {
    RawDb raw(moved_source);  // a second artifact, whose file is nowhere
    raw.exec_ok("DROP TRIGGER artifacts_append_only_insert");
    raw.exec_ok(fmt::format("INSERT INTO artifacts VALUES ({}, 'trace', '/nowhere/t.json', '{}', 5)", ids_.cell,
                            std::string(64, 'e')));
  }
  ImportOptions options;
  options.copy_artifacts = true;
  const auto imported = Store::import_stores(dest_, {moved_source}, options);
  EXPECT_EQ(imported[0].artifacts_copied, 1);
  ASSERT_EQ(imported[0].notes.size(), 1u);
  EXPECT_THAT(imported[0].notes[0], AllOf(HasSubstr("/nowhere/t.json"), HasSubstr("keeps the source's path")));

  const std::string copied = (std::filesystem::absolute(dest_ + ".artifacts") / sha / "run1_rank0.pt.trace.json.gz")
                                 .lexically_normal()
                                 .string();
  EXPECT_EQ(testing::read_file(copied), "a trace of run 1");
  auto dest = Store::open(dest_);
  auto source = Store::open(moved_source);
  const auto artifacts = dest.run_json(id_of(dest, source.get_run(ids_.profiled).uid))["artifacts"];
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0]["path"], copied);
  EXPECT_EQ(artifacts[0]["sha256"], sha);
  EXPECT_EQ(dest.run_json(id_of(dest, source.get_run(ids_.cell).uid))["artifacts"][0]["path"], "/nowhere/t.json");
}

TEST_F(ImportTest, WithoutCopyArtifactsRecordsKeepTheSourcePathAndHash) {
  Store::import_stores(dest_, {source_});
  EXPECT_FALSE(std::filesystem::exists(dest_ + ".artifacts"));
  auto dest = Store::open(dest_);
  const auto artifacts = dest.run_json(id_of(dest, Store::open(source_).get_run(ids_.profiled).uid))["artifacts"];
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0]["path"], std::filesystem::absolute(ids_.trace).lexically_normal().string());
  EXPECT_EQ(artifacts[0]["sha256"], base::sha256_hex("a trace of run 1"));
}

}  // namespace
}  // namespace ablate::receipts
