// tests/receipts/schema_test.cpp: opening the store: tables and pragmas of a new file, reopening,
// migrating every earlier schema (fixtures in tests/fixtures/receipts/), refusing newer schemas,
// non-SQLite files and foreign SQLite files without touching them.
// Run: build-receipts/tests/receipts_tests --gtest_filter='Schema*'
#include "receipts/schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using testing::FileSnapshot;
using testing::RawDb;

const std::set<std::string> kTables = {
    "annotations",  "artifacts",  "backend_evidence", "catalog",      "decisions",       "evaluations", "goodput",
    "import_runs",  "imports",
    "kernel_attribution", "kernels", "matrices",     "matrix_cells", "matrix_claims",   "matrix_runners",
    "memory",          "profile_time",
    "profile_windows", "run_backends", "run_env",     "run_spec",     "runs",            "steps"};

std::set<std::string> tables(Store& store) {
  std::set<std::string> names;
  for (const auto& row : store.query("SELECT name FROM sqlite_master WHERE type = 'table'")) {
    names.insert(row["name"].get<std::string>());
  }
  return names;
}

// The schema as (type, name, sql) lines: two databases with equal dumps have the same schema.
std::set<std::string> schema_dump(const std::string& path) {
  RawDb db(path);
  std::set<std::string> out;
  const int n = std::stoi(db.scalar("SELECT count(*) FROM sqlite_master WHERE sql IS NOT NULL"));
  for (int i = 0; i < n; ++i) {
    out.insert(
        db.scalar(fmt::format("SELECT type || ' ' || name || ': ' || sql FROM sqlite_master WHERE sql IS NOT "
                              "NULL ORDER BY type, name LIMIT 1 OFFSET {}",
                              i)));
  }
  return out;
}

std::string load_fixture(const base::TempDir& dir, const std::string& fixture_name) {
  const std::string path = dir.file(fixture_name + ".db");
  RawDb db(path);
  db.exec_ok(testing::read_file(testing::fixture(fixture_name + ".sql")));
  return path;
}

void expect_store_error_containing(const std::string& path, const std::vector<std::string>& parts) {
  try {
    Store::open(path);
    FAIL() << "expected StoreError opening " << path;
  } catch (const StoreError& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Schema, NewFileHasEveryTableAndThePragmas) {
  base::TempDir dir;
  auto store = Store::open(dir.file("receipts.db"));
  EXPECT_EQ(tables(store), kTables);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(store.query("SELECT journal_mode FROM pragma_journal_mode")[0]["journal_mode"], "wal");
  EXPECT_EQ(store.query("SELECT foreign_keys FROM pragma_foreign_keys")[0]["foreign_keys"], 1);
  EXPECT_EQ(store.query("SELECT synchronous FROM pragma_synchronous")[0]["synchronous"], 1);  // NORMAL
  EXPECT_EQ(store.query("SELECT timeout FROM pragma_busy_timeout")[0]["timeout"], 10000);
  EXPECT_EQ(store.query("SELECT application_id FROM pragma_application_id")[0]["application_id"],
            schema::kApplicationId);
}

TEST(Schema, ForeignKeysAreEnforced) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  auto store = Store::open(path);
  // Through the store's own connection: a step row for a run that does not exist.
  EXPECT_THROW(store.append_steps(99, testing::make_steps(1)), StoreError);
  RawDb raw(path);
  raw.exec_ok("PRAGMA foreign_keys = ON");
  EXPECT_NE(raw.exec("INSERT INTO steps (run_id, step, wall_ms) VALUES (99, 0, 1.0)").find("FOREIGN KEY"),
            std::string::npos);
}

TEST(Schema, ZeroLengthFileCountsAsNew) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  testing::write_file(path, "");
  auto store = Store::open(path);
  EXPECT_EQ(tables(store), kTables);
}

TEST(Schema, ReopenIsANoOp) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  {
    auto store = Store::open(path);
    store.finish_run(store.begin_run(testing::sample_start("r")), RunStatus::ok, "", testing::sample_summary());
  }
  const auto schema_before = schema_dump(path);
  const FileSnapshot before = FileSnapshot::of(path);
  {
    auto store = Store::open(path);
    EXPECT_EQ(store.schema_version(), schema::latest_version());
    EXPECT_EQ(store.list_runs().size(), 1u);
  }
  EXPECT_EQ(schema_dump(path), schema_before);
  EXPECT_EQ(FileSnapshot::of(path).bytes, before.bytes);
}

// Regression: checking a file's header must not open/close a descriptor of a database this process
// already has open: POSIX then drops all of the process's locks on it, and another process closing its
// connection would think it is the last one, checkpoint and delete the WAL under our feet. The other
// process is forked before any Store exists here (SQLite state must not be inherited across fork).
TEST(Schema, OpeningASecondStoreKeepsTheFirstOnesLocks) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  Store::open(path);
  testing::Pipe go;
  const pid_t other = testing::fork_child([&] {
    go.close_write();
    go.receive();
    Store::open(path);  // open and close: deletes the WAL only if it believes it is the last connection
  });
  go.close_read();
  auto first = Store::open(path);
  const auto id = first.begin_run(testing::sample_start("held"));
  ASSERT_TRUE(std::filesystem::exists(path + "-wal"));
  { auto second = Store::open(path); }
  go.send();
  const int status = testing::wait_status(other);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(std::filesystem::exists(path + "-wal")) << "this process lost its locks on the database";
  first.append_steps(id, testing::make_steps(3));
  EXPECT_EQ(Store::open(path).run_json(id)["steps"].size(), 3u);
}

// A fresh database taken through the first `version` migrations only.
std::string fresh_at_version(const base::TempDir& dir, int version) {
  const std::string path = dir.file(fmt::format("fresh_v{}.db", version));
  RawDb db(path);
  for (int i = 0; i < version; ++i) db.exec_ok(schema::migrations()[i]);
  db.exec_ok(fmt::format("PRAGMA user_version = {}", version));
  return path;
}

// Each fixture must really be what its migrations produced, or "migrate from vN" would test nothing.
TEST(Schema, EveryOlderVersionsFixtureMatchesItsMigrations) {
  for (int version = 1; version < schema::latest_version(); ++version) {
    SCOPED_TRACE(fmt::format("schema_v{}", version));
    base::TempDir dir;
    const std::string fixture_db = load_fixture(dir, fmt::format("schema_v{}", version));
    EXPECT_EQ(schema_dump(fixture_db), schema_dump(fresh_at_version(dir, version)));
    EXPECT_EQ(RawDb(fixture_db).scalar("PRAGMA user_version"), std::to_string(version));
  }
}

// v3 added the profiling tables: a v2 file keeps its run and annotation, gains the tables, and their
// append-only guards hold for the finished run while a new run can write profiling evidence.
TEST(Schema, MigratesV2FixtureToV3KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v2");
  ASSERT_EQ(RawDb(path).scalar("SELECT count(*) FROM annotations"), "1");

  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);
  const auto doc = store.run_json(1);
  EXPECT_EQ(doc["steps"].size(), 4u);
  EXPECT_EQ(doc["annotations"][0]["text"], "reviewed before the profiling schema");
  EXPECT_TRUE(doc["profile"]["windows"].empty());
  EXPECT_TRUE(doc["profile"]["attribution"].empty());

  ProfileWindowRow window;
  window.status = "unavailable";
  window.reason = "no CUDA device";
  EXPECT_THROW(store.record_profile_window(1, window), StoreError);  // the fixture's run is finished
  RawDb raw(path);
  EXPECT_NE(raw.exec("INSERT INTO profile_windows (run_id, status, reason) VALUES (1, 'off', 'x')").find("append-only"),
            std::string::npos);

  const auto id = store.begin_run(testing::sample_start("after-migration"));
  store.record_profile_window(id, window);
  EXPECT_EQ(store.run_json(id)["profile"]["windows"][0]["reason"], "no CUDA device");

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v4 added the MoE router columns to steps: a v3 file keeps its steps and profiling rows (the new
// columns NULL there), its finished runs stay frozen, and a new run writes the columns.
TEST(Schema, MigratesV3FixtureToV4KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v3");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);

  const auto doc = store.run_json(2);
  ASSERT_EQ(doc["steps"].size(), 2u);
  EXPECT_EQ(doc["steps"][1]["wall_ms"], 88.25);
  EXPECT_TRUE(doc["steps"][1]["moe_aux_loss"].is_null());
  EXPECT_TRUE(doc["steps"][1]["moe_dropped_slots"].is_null());
  EXPECT_EQ(doc["profile"]["windows"][0]["compute_ns"], 80000000);
  EXPECT_EQ(store.run_json(1)["annotations"][0]["text"], "reviewed before the profiling schema");
  RawDb raw(path);
  EXPECT_NE(raw.exec("UPDATE steps SET moe_dropped_slots = 1 WHERE run_id = 2").find("append-only"), std::string::npos);

  const auto id = store.begin_run(testing::sample_start("after-v4"));
  auto rows = testing::make_steps(1);
  rows[0].moe_aux_loss = 1.5;
  rows[0].moe_dropped_slots = 3;
  store.append_steps(id, rows);
  EXPECT_EQ(store.run_json(id)["steps"][0]["moe_dropped_slots"], 3);
  EXPECT_NE(raw.exec(fmt::format("INSERT INTO steps (run_id, step, wall_ms, moe_dropped_slots) VALUES ({}, 5, 1, -2)", id))
                .find("CHECK constraint failed"),
            std::string::npos);

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v5 added matrix runners and claims: a v4 file keeps its matrix, cells and runs; its ok cell is done for
// a new runner, which can claim the others; finished runs stay frozen.
TEST(Schema, MigratesV4FixtureToV5KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v4");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);
  const auto cells = store.matrix_cells(1);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0].run_id, 3);
  EXPECT_EQ(store.run_json(3)["steps"][0]["moe_dropped_slots"], 2);

  const auto runner = store.begin_matrix_runner(1);
  const auto done = store.claim_matrix_slot(runner, "baseline", 0);
  EXPECT_EQ(done.outcome, MatrixClaim::Outcome::done);
  EXPECT_EQ(done.holder, "run 3");
  EXPECT_EQ(store.claim_matrix_slot(runner, "backends.loss=chunked", 0).outcome, MatrixClaim::Outcome::claimed);
  RawDb raw(path);
  EXPECT_NE(raw.exec("UPDATE runs SET status = 'failed' WHERE id = 3").find("append-only"), std::string::npos);

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v6 added evaluations (validation loss): a v5 file keeps its runs, matrix and ended runner (whose claim
// no longer holds); its finished runs take no evaluation while a new run records them.
TEST(Schema, MigratesV5FixtureToV6KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v5");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);
  EXPECT_TRUE(store.run_json(3)["evaluations"].empty());
  const auto runner = store.begin_matrix_runner(1);
  EXPECT_EQ(store.claim_matrix_slot(runner, "backends.loss=chunked", 0).outcome, MatrixClaim::Outcome::claimed);
  EXPECT_THROW(store.record_evaluation(3, {10, 2.5, 4096, 0.1}), StoreError);  // run 3 is finished
  RawDb raw(path);
  EXPECT_NE(raw.exec("INSERT INTO evaluations (run_id, step, loss, tokens, seconds) VALUES (3, 1, 2.0, 10, 0.1)")
                .find("append-only"),
            std::string::npos);

  const auto id = store.begin_run(testing::sample_start("after-v6"));
  store.record_evaluation(id, {10, 2.5, 4096, 0.125});
  store.record_evaluation(id, {20, std::nan(""), 4096, 0.125});  // a diverged evaluation: NULL, not a number
  const auto evals = store.run_json(id)["evaluations"];
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]["loss"], 2.5);
  EXPECT_EQ(evals[0]["tokens"], 4096);
  EXPECT_TRUE(evals[1]["loss"].is_null());
  EXPECT_THROW(store.record_evaluation(id, {30, 2.0, 0, 0.1}), StoreError);

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v7 added runs.uid and the import provenance tables: every run of a v6 file gets its own uid (finished
// runs included, which stay frozen otherwise), the same in every copy of the file; a uid never changes,
// no run goes in without one, and the file keeps its evaluations and decision.
TEST(Schema, MigratesV6FixtureToV7KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v6");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);

  std::set<std::string> uids;
  for (const RunRow& run : store.list_runs()) {
    EXPECT_THAT(run.uid, ::testing::MatchesRegex("[0-9a-f]{32}")) << "run " << run.id;
    uids.insert(run.uid);
  }
  EXPECT_EQ(uids.size(), 4u);
  // Derived from the runs' records: another copy of the same file gives every run the same uid.
  {
    base::TempDir other;
    auto copy = Store::open(load_fixture(other, "schema_v6"));
    for (std::int64_t id = 1; id <= 4; ++id) EXPECT_EQ(copy.get_run(id).uid, store.get_run(id).uid) << "run " << id;
  }
  EXPECT_EQ(store.run_json(4)["run"]["uid"], store.get_run(4).uid);
  EXPECT_EQ(store.run_json(4)["evaluations"][0]["loss"], 8.5);
  const auto decisions = store.list_decisions("loss", "chunked");
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].evidence_run_ids, (std::vector<std::int64_t>{3, 4}));

  RawDb raw(path);
  EXPECT_NE(raw.exec("UPDATE runs SET status = 'failed' WHERE id = 4").find("append-only"), std::string::npos);
  const auto live = store.begin_run(testing::sample_start("after-v7"));
  EXPECT_THAT(store.get_run(live).uid, ::testing::MatchesRegex("[0-9a-f]{32}"));
  EXPECT_FALSE(uids.contains(store.get_run(live).uid));
  EXPECT_NE(raw.exec(fmt::format("UPDATE runs SET uid = '{}' WHERE id = {}", std::string(32, 'a'), live))
                .find("identity of a run cannot be changed"),
            std::string::npos);
  EXPECT_NE(raw.exec("INSERT INTO runs (name, status, started_at, heartbeat_at, host) VALUES ('x', 'running', 1, 1, 'h')")
                .find("needs a uid"),
            std::string::npos);
  EXPECT_NE(raw.exec(fmt::format("INSERT INTO runs (name, status, started_at, heartbeat_at, host, uid) VALUES "
                                 "('x', 'running', 1, 1, 'h', '{}')",
                                 store.get_run(1).uid))
                .find("UNIQUE"),
            std::string::npos);

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v8 added the profile windows' communication columns: the windows of a v7 file (an imported
// two-rank run's among them) keep their breakdown and read NULL, unknown, for communication, never 0;
// its finished runs stay frozen, its import provenance stays, and a new run writes the columns, which
// refuse an exposed part larger than the communication it is part of.
TEST(Schema, MigratesV7FixtureToV8KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v7");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);

  const auto windows = store.query("SELECT run_id, rank, compute_ns, communication_ns, exposed_communication_ns "
                                   "FROM profile_windows ORDER BY run_id, rank");
  ASSERT_EQ(windows.size(), 3u);
  for (const auto& w : windows) {
    EXPECT_FALSE(w["compute_ns"].is_null()) << w.dump();
    EXPECT_TRUE(w["communication_ns"].is_null()) << w.dump();
    EXPECT_TRUE(w["exposed_communication_ns"].is_null()) << w.dump();
  }
  EXPECT_EQ(windows[2]["compute_ns"], 83000000);  // run 5, rank 1
  EXPECT_EQ(store.run_json(5)["run"]["uid"], "5e7c1a0b9d8f6e4c2a1b3d5f7e9c0a2b");
  const auto distributed = store.get_run(5).summary.facts.distributed;
  ASSERT_TRUE(distributed);
  EXPECT_EQ(distributed->comm_share, 0.127435);
  EXPECT_FALSE(distributed->exposed_comm_share.has_value());  // its facts were made before it was measured
  EXPECT_FALSE(distributed->per_rank.at(1).exposed_comm_share.has_value());
  EXPECT_EQ(store.query("SELECT import_id FROM import_runs WHERE run_id = 5")[0]["import_id"], 1);
  RawDb raw(path);
  EXPECT_NE(raw.exec("UPDATE profile_windows SET exposed_communication_ns = 0 WHERE run_id = 5").find("append-only"),
            std::string::npos);

  const auto id = store.begin_run(testing::sample_start("after-v8"));
  ProfileWindowRow window;
  window.status = "ok";
  window.compute_ns = 900;
  window.communication_ns = 400;
  window.exposed_communication_ns = 150;
  store.record_profile_window(id, window);
  EXPECT_EQ(store.run_json(id)["profile"]["windows"][0]["exposed_communication_ns"], 150);
  EXPECT_NE(raw.exec(fmt::format("INSERT INTO profile_windows (run_id, rank, status, communication_ns, "
                                 "exposed_communication_ns) VALUES ({}, 1, 'ok', 100, 101)",
                                 id))
                .find("CHECK constraint failed"),
            std::string::npos);

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

// v9 added the profile windows' communication by collective kind: the windows of a v8 file keep their
// totals (run 6's communication and exposed part) and read NULL, unknown, for every kind, never 0; a new
// run writes the kinds, which refuse a kind longer than all communication or an exposed part longer than
// its kind; a migrated file's schema is a fresh store's.
TEST(Schema, MigratesV8FixtureToV9KeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v8");
  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);

  const auto windows = store.query("SELECT * FROM profile_windows WHERE run_id = 6 ORDER BY rank");
  ASSERT_EQ(windows.size(), 2u);
  EXPECT_EQ(windows[0]["communication_ns"], 16000000);
  EXPECT_EQ(windows[0]["exposed_communication_ns"], 6000000);
  for (const auto& w : windows)
    for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"}) {
      EXPECT_TRUE(w[std::string(kind) + "_ns"].is_null()) << w.dump();
      EXPECT_TRUE(w["exposed_" + std::string(kind) + "_ns"].is_null()) << w.dump();
    }
  EXPECT_EQ(store.run_json(6)["run"]["uid"], "6f8d2b1c0e9a7f5d3b2c4e6a8f0d1b3c");
  const auto distributed = store.get_run(6).summary.facts.distributed;
  ASSERT_TRUE(distributed);
  EXPECT_EQ(distributed->exposed_comm_share, 0.055);
  EXPECT_FALSE(distributed->exposed_by_collective.all_to_all.has_value());  // made before kinds were measured
  RawDb raw(path);
  EXPECT_NE(raw.exec("UPDATE profile_windows SET exposed_all_to_all_ns = 0 WHERE run_id = 6").find("append-only"),
            std::string::npos);

  const auto id = store.begin_run(testing::sample_start("after-v9"));
  ProfileWindowRow window;
  window.status = "ok";
  window.communication_ns = 400;
  window.exposed_communication_ns = 150;
  window.collective_ns.all_to_all = 300;
  window.exposed_collective_ns.all_to_all = 120;
  store.record_profile_window(id, window);
  const auto written = store.run_json(id)["profile"]["windows"][0];
  EXPECT_EQ(written["all_to_all_ns"], 300);
  EXPECT_EQ(written["exposed_all_to_all_ns"], 120);
  EXPECT_TRUE(written["all_gather_ns"].is_null());
  for (const auto& [columns, values] : std::vector<std::pair<std::string, std::string>>{
           {"communication_ns, all_gather_ns", "100, 101"},  // a kind longer than all communication
           {"communication_ns, all_gather_ns, exposed_all_gather_ns", "100, 50, 51"}})  // exposed longer than its kind
    EXPECT_NE(raw.exec(fmt::format("INSERT INTO profile_windows (run_id, rank, status, {}) VALUES ({}, 1, 'ok', {})",
                                   columns, id, values))
                  .find("CHECK constraint failed"),
              std::string::npos)
        << columns;

  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

TEST(Schema, MigratesV1FixtureKeepingItsData) {
  base::TempDir dir;
  const std::string path = load_fixture(dir, "schema_v1");
  const auto fixture_rows = RawDb(path).scalar("SELECT count(*) FROM steps");
  ASSERT_EQ(fixture_rows, "4");

  auto store = Store::open(path);
  EXPECT_EQ(store.schema_version(), schema::latest_version());
  EXPECT_EQ(tables(store), kTables);

  const RunRow run = store.get_run(1);
  EXPECT_EQ(run.name, "tiny-hybrid-baseline");
  EXPECT_EQ(run.status, RunStatus::ok);
  EXPECT_EQ(run.tags, (std::vector<std::string>{"baseline", "v1-fixture"}));
  EXPECT_EQ(run.summary.median_step_ms, 100.75);
  EXPECT_FALSE(run.summary.mfu.has_value());
  const auto doc = store.run_json(1);
  ASSERT_EQ(doc["steps"].size(), 4u);
  EXPECT_EQ(doc["steps"][0]["wall_ms"], 812.5);
  EXPECT_EQ(doc["steps"][3]["loss"], 8.25);
  EXPECT_EQ(doc["env"]["gpu_model"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(doc["spec"]["spec_json"]["model"]["pattern"], "AMEM");
  EXPECT_EQ(doc["backends"][0]["reason"], "no GPU, fell back to reference");
  EXPECT_EQ(doc["goodput"]["startup"], 2.5);
  EXPECT_EQ(doc["kernels"][0]["calls"], 12);

  // v2 brought annotations: the migrated, finished run accepts one, and still refuses new evidence.
  store.annotate(1, "migrated from schema v1");
  EXPECT_EQ(store.run_json(1)["annotations"][0]["text"], "migrated from schema v1");
  EXPECT_THROW(store.append_steps(1, testing::make_steps(1, 10)), StoreError);

  // A migrated file and a new file end up with the same schema.
  const std::string fresh = dir.file("fresh.db");
  Store::open(fresh);
  EXPECT_EQ(schema_dump(path), schema_dump(fresh));
}

TEST(Schema, RefusesNewerSchemaWithoutTouchingTheFile) {
  base::TempDir dir;
  const std::string path = dir.file("receipts.db");
  Store::open(path);
  const int newer = schema::latest_version() + 5;
  RawDb(path).exec_ok(fmt::format("PRAGMA user_version = {}", newer));
  const FileSnapshot before = FileSnapshot::of(path);

  expect_store_error_containing(
      path, {path, fmt::format("schema version {}", newer), fmt::format("knows up to {}", schema::latest_version()),
             "upgrade ablate or use another --db"});
  EXPECT_EQ(FileSnapshot::of(path), before);
  EXPECT_EQ(RawDb(path).scalar("PRAGMA user_version"), std::to_string(newer));
}

TEST(Schema, RefusesATextFileWithoutTouchingIt) {
  base::TempDir dir;
  const std::string path = dir.file("notes.txt");
  testing::write_file(path, "these are my notes, not a database\nline two\n");
  const FileSnapshot before = FileSnapshot::of(path);
  expect_store_error_containing(path, {path, "not a SQLite database", "--db"});
  EXPECT_EQ(FileSnapshot::of(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));

  const std::string tiny = dir.file("tiny.txt");  // shorter than the 16-byte header
  testing::write_file(tiny, "SQLite");
  expect_store_error_containing(tiny, {"not a SQLite database"});
  EXPECT_EQ(testing::read_file(tiny), "SQLite");
}

TEST(Schema, RefusesAForeignSqliteDatabase) {
  base::TempDir dir;
  const std::string path = dir.file("other-app.db");
  RawDb(path).exec_ok("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)");
  const FileSnapshot before = FileSnapshot::of(path);
  expect_store_error_containing(path, {path, "not an ablate receipt store"});
  EXPECT_EQ(FileSnapshot::of(path), before);
}

TEST(Schema, RefusesPathsThatCannotBeOpened) {
  base::TempDir dir;
  expect_store_error_containing(dir.file("no/such/dir/receipts.db"), {"cannot open", "no/such/dir"});
  expect_store_error_containing(dir.file(""), {"not a regular file"});
  EXPECT_THROW(Store::open(""), StoreError);
}

}  // namespace
}  // namespace ablate::receipts
