// receipts/store.h: the SQLite receipt store (docs/receipts.md): one file, WAL, many writer
// processes at once, forward-only migrations, append-only receipts.
//
//   auto store = Store::open("receipts.db");
//   int64_t id = store.begin_run(start);              // status running, heartbeat now
//   store.append_steps(id, rows);                     // one transaction per batch
//   store.finish_run(id, RunStatus::ok, "", summary); // from here only annotate() writes to the run
//
// Errors: StoreError = bad input (unknown run, finished run, foreign/newer file...; CLI exit 2);
// StoreFileError = the file is damaged or cannot be written (CLI exit 2, the message says how to fix it);
// SqliteError = SQLite failed otherwise (I/O, lock timeout, a schema guard fired).
// Thread-safety: a Store is one SQLite connection and is NOT thread-safe; use one Store per thread or
// process (RunLifecycle opens its own for its threads). Many Stores on one file are fine.
// Tests: tests/receipts/*_test.cpp (receipts_tests); benchmark: receipts/store_bench.cpp (store_bench).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/errors.h"
#include "receipts/records.h"
#include "receipts/sql.h"

namespace ablate::receipts {

struct StoreOptions {
  // A `running` run whose heartbeat is older than this reads as `abandoned`.
  // Environment variable ABLATE_HEARTBEAT_STALE_S, when set, overrides it (tests use ~1-2 s).
  double heartbeat_stale_s = 60.0;
  // How long a writer waits for another process's write lock before failing with SQLITE_BUSY.
  int busy_timeout_ms = 10000;
};

// `ablate import` (docs/receipts.md, "Import"): what to do with the files behind artifact records.
struct ImportOptions {
  // Copy each artifact's file into `<DEST>.artifacts/<sha256>/<file name>` and point its record there;
  // without it the record keeps the source's path with its sha256.
  bool copy_artifacts = false;
};

// What one source store brought into the destination.
struct ImportedSource {
  std::string path;  // absolute
  std::string sha256;
  std::int64_t bytes = 0;
  int schema_version = 0;        // the source's, before it was upgraded (in a copy) for reading
  std::int64_t import_id = 0;    // its `imports` row; 0 when it added nothing (no row is written)
  std::int64_t runs_added = 0;
  std::int64_t runs_present = 0;       // already in the destination with the same content
  std::int64_t runs_left_running = 0;  // still live in the source (heartbeat within the stale limit)
  std::int64_t step_rows_added = 0;
  std::int64_t matrices_added = 0;
  std::int64_t decisions_added = 0;
  std::int64_t annotations_added = 0;
  std::int64_t artifacts_copied = 0;
  std::vector<std::string> notes;  // runs left running, artifact files not found: one line each
};

class Store {
 public:
  // Opens the store at `path`, creating it if missing (a zero-length file counts as new) and applying
  // pending migrations in one BEGIN IMMEDIATE transaction. Refuses, without modifying it, a file that
  // is not SQLite, a SQLite file that is not an ablate store, or one with a newer schema than this binary.
  static Store open(const std::string& path, StoreOptions options = {});
  // For read-only commands: like open(), but a missing file is a StoreError instead of a new store.
  static Store open_existing(const std::string& path, StoreOptions options = {});

  // Merges the receipts of `sources` into the store at `dest_path` (created when missing) in one write
  // transaction: any failure leaves it as it was. Every source is checked and read through an upgraded
  // copy (never written) before the destination is opened. Runs are matched by uid; integer ids are
  // renumbered and the rows citing them follow. Throws StoreError when a source cannot be read, is
  // newer than this binary or foreign, or holds a run whose uid is here with other content.
  static std::vector<ImportedSource> import_stores(const std::string& dest_path,
                                                   const std::vector<std::string>& sources,
                                                   const ImportOptions& options = {},
                                                   StoreOptions store_options = {});

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& path() const { return path_; }
  int schema_version();
  double heartbeat_stale_s() const { return stale_s_; }

  // For a writer about to record a run: throws StoreFileError, before anything is written, when the
  // store is damaged where a write starts (a file shorter than its header says; a table's root or first
  // page unreadable) or cannot be written (the file is read-only). Constant cost, whatever the store's
  // size (store_bench: BM_CheckCanRecord); damage elsewhere is the same StoreFileError when a command
  // reaches it, nothing written. Readers skip it: a damaged page they reach is a StoreFileError too.
  void check_can_record();

  // ---- writes (runner) ----
  std::int64_t begin_run(const RunStart& start);
  void heartbeat(std::int64_t run_id);
  void record_env(std::int64_t run_id, const std::map<std::string, std::string>& env);  // adds/updates keys
  void record_backends(std::int64_t run_id, const std::vector<BackendRow>& rows);       // upsert per seam
  void record_catalog(std::int64_t run_id, const std::vector<CatalogRow>& rows);
  void append_steps(std::int64_t run_id, const std::vector<StepRow>& rows);  // one transaction
  void flag_outliers(std::int64_t run_id, std::int64_t rank, const std::vector<std::int64_t>& steps);
  void record_evaluation(std::int64_t run_id, const EvaluationRow& row);  // schema v6; one per step
  void record_goodput(std::int64_t run_id, const std::map<std::string, double>& seconds);  // upsert
  void record_memory(std::int64_t run_id, const std::vector<MemoryRow>& rows);
  void record_kernels(std::int64_t run_id, const std::vector<KernelRow>& rows);  // accumulates
  // Profiling evidence (schema v3). The window row is one per rank; the others are inserted once.
  void record_profile_window(std::int64_t run_id, const ProfileWindowRow& row);
  void record_profile_time(std::int64_t run_id, const std::vector<ProfileTimeRow>& rows);
  void record_kernel_attribution(std::int64_t run_id, const std::vector<KernelAttributionRow>& rows);
  void record_backend_evidence(std::int64_t run_id, const std::vector<BackendEvidenceRow>& rows);
  // Hashes the file (sha256, streamed) and records its absolute path and size.
  ArtifactRow add_artifact(std::int64_t run_id, const std::string& kind, const std::string& path);
  // status: ok, failed or killed; failed/killed need an error text. The run becomes read-only.
  void finish_run(std::int64_t run_id, RunStatus status, const std::string& error, const RunSummary& summary);
  // The one write a finished run accepts.
  void annotate(std::int64_t run_id, const std::string& text);

  // ---- matrices and decisions ----
  std::int64_t create_matrix(const std::string& name, const std::string& spec_json);
  // The oldest matrix row with this name and spec, created when there is none, in one write
  // transaction: two runners started at once get the same row.
  std::int64_t find_or_create_matrix(const std::string& name, const std::string& spec_json);
  std::vector<MatrixCell> matrix_cells(std::int64_t matrix_id);
  std::int64_t record_decision(const Decision& decision);
  // Newest first; empty seam/backend means any.
  std::vector<Decision> list_decisions(const std::string& seam = "", const std::string& backend = "");

  // ---- matrix runners: concurrent `matrix run`s sharing one matrix (schema v5; coordination, not receipts) ----
  // Registers this process (pid, host) as a runner of the matrix, beating now.
  std::int64_t begin_matrix_runner(std::int64_t matrix_id);
  // A runner whose heartbeat is older than the stale limit has vanished: its claims are free again.
  void matrix_runner_heartbeat(std::int64_t runner_id);
  // The runner has stopped: its claims are free (a pair it ran ok stays done through its run).
  void end_matrix_runner(std::int64_t runner_id);
  // Takes (cell, repeat) of the runner's matrix unless the matrix has an `ok` run for it (done) or a
  // live other runner holds it or a live run is recording it (taken). One write transaction: two runners
  // never both take a pair. A runner that took a pair keeps it after its run ends, failed or not, so a
  // failed pair is retried by the next `matrix run`, never twice by concurrent ones.
  MatrixClaim claim_matrix_slot(std::int64_t runner_id, const std::string& cell, std::int64_t repeat);

  // ---- reads (CLI, report/) ----
  // Newest first (started_at, then id). Throws StoreError on an unknown status or unreadable `since`.
  std::vector<RunRow> list_runs(const RunFilter& filter = {});
  RunRow get_run(std::int64_t run_id);
  // Everything the store holds about a run: run, env, spec, backends, catalog, steps, evaluations, goodput, memory,
  // kernels, artifacts, annotations, matrix cell, and `profile` (windows, time, attribution,
  // backend_evidence; empty arrays when the run was not profiled). Without `with_steps` the `steps` key
  // is left out: what a page per run needs, at a fraction of the cost for long runs.
  nlohmann::json run_json(std::int64_t run_id, bool with_steps = true);
  // A read-only SQL query for report code, rows as JSON objects keyed by column name.
  // A statement that could write is refused with StoreError.
  nlohmann::json query(std::string_view sql, const std::vector<sql::Param>& params = {});

 private:
  Store(std::string path, double stale_s, std::unique_ptr<sql::Connection> db);

  // Runs `write` in a write transaction after checking that the run exists and is still running.
  template <typename Fn>
  void write_run(std::int64_t run_id, std::string_view what, Fn&& write);
  void require_running(std::int64_t run_id, std::string_view what);
  void require_exists(std::int64_t run_id);
  bool has_row(std::string_view table, std::int64_t id);  // table: runs or matrices
  void record_env_rows(std::int64_t run_id, const std::map<std::string, std::string>& env);
  double stale_cutoff() const;  // heartbeats before this read as abandoned
  nlohmann::json child_rows(std::string_view table, std::string_view order_by, std::int64_t run_id);

  // import_stores' work for one source (receipts/store_import.cpp): reads its rows, writes them here.
  friend class SourceImport;

  std::string path_;
  double stale_s_;  // heartbeat age after which a running run reads as abandoned
  std::unique_ptr<sql::Connection> db_;
};

}  // namespace ablate::receipts
