// receipts/schema.cpp: migration SQL. v1 = core tables + append-only triggers; v2 = annotations + report indexes;
// v3 = profiling evidence (profile windows, per-step time by family/seam, kernel attribution, backend evidence);
// v4 = MoE router evidence per step (load-balancing loss, slots dropped by the capacity factor);
// v5 = matrix runners and their claims on (cell, repeat) pairs, so concurrent `matrix run`s share the work;
// v6 = validation loss on held-out data (train.eval_every) and which backends change numerics;
// v7 = a globally unique id per run (runs.uid) and the provenance of imported runs (`ablate import`);
// v8 = the communication of a profile window and the part of it exposed (no other GPU work beside it).
// Frozen history: never edit a migration that has shipped (schema_test compares v1 with its fixture).
// Tests: tests/receipts/schema_test.cpp.
#include "receipts/schema.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <stdexcept>

#include "base/sha256.h"

namespace ablate::receipts::schema {
namespace {

// Append-only guards for a table holding per-run evidence: no insert, update or delete once the run
// has left 'running'. `<> 'running'` is NULL for an unknown run, so the foreign key reports that case.
// Frozen: migration 1 is built from it, so any change here must go into a new migration instead.
std::string child_guards(const std::string& table) {
  return fmt::format(R"(
CREATE TRIGGER {0}_append_only_insert BEFORE INSERT ON {0}
WHEN (SELECT status FROM runs WHERE id = NEW.run_id) <> 'running'
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: {0} of a finished run cannot be added'); END;
CREATE TRIGGER {0}_append_only_update BEFORE UPDATE ON {0}
WHEN (SELECT status FROM runs WHERE id = OLD.run_id) <> 'running'
  OR (SELECT status FROM runs WHERE id = NEW.run_id) <> 'running'
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: {0} of a finished run cannot be changed'); END;
CREATE TRIGGER {0}_append_only_delete BEFORE DELETE ON {0}
WHEN (SELECT status FROM runs WHERE id = OLD.run_id) <> 'running'
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: {0} of a finished run cannot be deleted'); END;
)",
                     table);
}

// Rows that are history in their own right (decisions, matrix membership, annotations) never change.
std::string immutable_guards(const std::string& table) {
  return fmt::format(R"(
CREATE TRIGGER {0}_immutable_update BEFORE UPDATE ON {0}
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: {0} rows cannot be changed'); END;
CREATE TRIGGER {0}_immutable_delete BEFORE DELETE ON {0}
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: {0} rows cannot be deleted'); END;
)",
                     table);
}

constexpr const char* kV1Tables = R"(
PRAGMA application_id = 1633840244;

CREATE TABLE matrices (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL,
  spec_json   TEXT NOT NULL CHECK (json_valid(spec_json)),
  created_at  REAL NOT NULL
);

-- One row per run. Timestamps are unix seconds (REAL). status is what was recorded; 'abandoned' is
-- derived at read time from a stale heartbeat and never stored.
CREATE TABLE runs (
  id                INTEGER PRIMARY KEY,
  name              TEXT NOT NULL,
  status            TEXT NOT NULL CHECK (status IN ('running', 'ok', 'failed', 'killed')),
  error             TEXT,
  started_at        REAL NOT NULL,
  ended_at          REAL,
  heartbeat_at      REAL NOT NULL,
  pid               INTEGER,
  host              TEXT NOT NULL,
  tags              TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array'),
  lane              TEXT NOT NULL DEFAULT '',
  spec_hash         TEXT NOT NULL DEFAULT '',
  matrix_id         INTEGER REFERENCES matrices(id),
  cell              TEXT,
  repeat            INTEGER,
  steps             INTEGER,
  median_step_ms    REAL,
  tokens_per_s      REAL,
  mfu               REAL,
  goodput_pct       REAL,
  peak_memory_bytes INTEGER,
  flops_version     TEXT,
  summary_json      TEXT CHECK (summary_json IS NULL OR json_valid(summary_json)),
  CHECK ((status = 'running') = (ended_at IS NULL))
);

CREATE TABLE run_env (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  key    TEXT NOT NULL,
  value  TEXT NOT NULL,
  PRIMARY KEY (run_id, key)
) WITHOUT ROWID;

CREATE TABLE run_spec (
  run_id      INTEGER PRIMARY KEY REFERENCES runs(id),
  spec_json   TEXT NOT NULL CHECK (json_valid(spec_json)),
  spec_hash   TEXT NOT NULL,
  source_path TEXT,
  source_text TEXT
);

CREATE TABLE run_backends (
  run_id    INTEGER NOT NULL REFERENCES runs(id),
  seam      TEXT NOT NULL,
  requested TEXT NOT NULL,
  chosen    TEXT NOT NULL,
  observed  TEXT,
  reason    TEXT NOT NULL DEFAULT '',
  mismatch  INTEGER CHECK (mismatch IN (0, 1)),
  PRIMARY KEY (run_id, seam)
) WITHOUT ROWID;

CREATE TABLE catalog (
  run_id   INTEGER NOT NULL REFERENCES runs(id),
  seam     TEXT NOT NULL,
  backend  TEXT NOT NULL,
  role     TEXT NOT NULL CHECK (role IN ('keep', 'borderline', 'experimental', 'vendor', 'reference')),
  fallback TEXT,
  patterns TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(patterns) AND json_type(patterns) = 'array'),
  PRIMARY KEY (run_id, seam, backend)
) WITHOUT ROWID;

CREATE TABLE steps (
  run_id             INTEGER NOT NULL REFERENCES runs(id),
  rank               INTEGER NOT NULL DEFAULT 0,
  step               INTEGER NOT NULL,
  wall_ms            REAL NOT NULL CHECK (wall_ms >= 0),
  tokens             INTEGER,
  loss               REAL,
  grad_norm          REAL,
  lr                 REAL,
  mem_allocated_peak INTEGER,
  mem_reserved_peak  INTEGER,
  rss_bytes          INTEGER,
  data_wait_ms       REAL,
  outlier            INTEGER NOT NULL DEFAULT 0 CHECK (outlier IN (0, 1)),
  PRIMARY KEY (run_id, rank, step)
) WITHOUT ROWID;

CREATE TABLE goodput (
  run_id   INTEGER NOT NULL REFERENCES runs(id),
  category TEXT NOT NULL CHECK (category IN ('startup', 'data_prep', 'warmup', 'productive', 'data_wait',
                                             'checkpoint', 'eval', 'profiling', 'other')),
  seconds  REAL NOT NULL CHECK (seconds >= 0),
  PRIMARY KEY (run_id, category)
) WITHOUT ROWID;

CREATE TABLE memory (
  run_id        INTEGER NOT NULL REFERENCES runs(id),
  rank          INTEGER NOT NULL DEFAULT 0,
  step          INTEGER NOT NULL,
  phase         TEXT NOT NULL,
  allocated     INTEGER,
  reserved      INTEGER,
  active        INTEGER,
  alloc_retries INTEGER,
  ooms          INTEGER,
  fragmentation REAL,
  PRIMARY KEY (run_id, rank, step, phase)
) WITHOUT ROWID;

CREATE TABLE kernels (
  run_id   INTEGER NOT NULL REFERENCES runs(id),
  rank     INTEGER NOT NULL DEFAULT 0,
  name     TEXT NOT NULL,
  family   TEXT NOT NULL,
  seam     TEXT NOT NULL DEFAULT '',
  calls    INTEGER NOT NULL CHECK (calls >= 0),
  total_ns INTEGER NOT NULL CHECK (total_ns >= 0),
  mean_ns  REAL,
  PRIMARY KEY (run_id, rank, name)
) WITHOUT ROWID;

CREATE TABLE artifacts (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  kind   TEXT NOT NULL,
  path   TEXT NOT NULL,
  sha256 TEXT NOT NULL CHECK (length(sha256) = 64),
  bytes  INTEGER NOT NULL CHECK (bytes >= 0),
  PRIMARY KEY (run_id, path)
) WITHOUT ROWID;

CREATE TABLE matrix_cells (
  matrix_id INTEGER NOT NULL REFERENCES matrices(id),
  cell      TEXT NOT NULL,
  repeat    INTEGER NOT NULL,
  run_id    INTEGER NOT NULL UNIQUE REFERENCES runs(id),
  PRIMARY KEY (matrix_id, cell, repeat, run_id)
) WITHOUT ROWID;

CREATE TABLE decisions (
  id               INTEGER PRIMARY KEY,
  seam             TEXT NOT NULL,
  backend          TEXT NOT NULL,
  verdict          TEXT NOT NULL CHECK (verdict IN ('KEEP', 'DROP', 'INCONCLUSIVE')),
  evidence_run_ids TEXT NOT NULL CHECK (json_valid(evidence_run_ids) AND json_type(evidence_run_ids) = 'array'),
  matrix_id        INTEGER REFERENCES matrices(id),
  details          TEXT NOT NULL DEFAULT '',
  decided_at       REAL NOT NULL
);

-- A finished run row is never rewritten, and no run row is ever deleted.
CREATE TRIGGER runs_append_only_update BEFORE UPDATE ON runs
WHEN OLD.status <> 'running'
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: a finished run cannot be changed'); END;
CREATE TRIGGER runs_identity_immutable BEFORE UPDATE OF id, name, started_at, pid, host, tags, lane,
  spec_hash, matrix_id, cell, repeat ON runs
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: the identity of a run cannot be changed'); END;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: runs cannot be deleted'); END;
)";

std::string migration_v1() {
  std::string sql = kV1Tables;
  for (const char* table :
       {"run_env", "run_spec", "run_backends", "catalog", "steps", "goodput", "memory", "kernels", "artifacts"}) {
    sql += child_guards(table);
  }
  for (const char* table : {"matrix_cells", "decisions"}) sql += immutable_guards(table);
  return sql;
}

// v2: free-text annotations (the one write a finished run accepts) and indexes for report queries.
std::string migration_v2() {
  std::string sql = R"(
CREATE TABLE annotations (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs(id),
  text       TEXT NOT NULL CHECK (length(text) > 0),
  created_at REAL NOT NULL
);
CREATE INDEX annotations_by_run ON annotations(run_id);
CREATE INDEX runs_by_started_at ON runs(started_at);
CREATE INDEX runs_by_name ON runs(name);
CREATE INDEX runs_by_lane ON runs(lane, started_at);
CREATE INDEX runs_by_spec_hash ON runs(spec_hash);
CREATE INDEX runs_by_matrix ON runs(matrix_id, cell, repeat);
CREATE INDEX decisions_by_backend ON decisions(seam, backend, decided_at);
)";
  sql += immutable_guards("annotations");
  return sql;
}

// v3: what the profiler (profiling/) found in a run's window. Per-run evidence, so the same append-only
// child guards as v1's tables: written while the run is `running`, frozen when it ends.
std::string migration_v3() {
  std::string sql = R"(
-- One row per rank of a run with [profile] enabled: whether CUPTI traced the window, and if not why;
-- the window's temporal breakdown of GPU time (compute = kernels, non_compute = memcpy/memset not
-- overlapping a kernel, idle = the rest of the window between the first and the last GPU activity).
CREATE TABLE profile_windows (
  run_id          INTEGER NOT NULL REFERENCES runs(id),
  rank            INTEGER NOT NULL DEFAULT 0,
  status          TEXT NOT NULL CHECK (status IN ('ok', 'unavailable', 'off')),
  reason          TEXT NOT NULL DEFAULT '',
  start_step      INTEGER,
  steps           INTEGER,
  records         INTEGER,
  dropped_records INTEGER,
  buffers         INTEGER,
  buffers_refused INTEGER,
  window_ns       INTEGER,
  compute_ns      INTEGER,
  non_compute_ns  INTEGER,
  idle_ns         INTEGER,
  PRIMARY KEY (run_id, rank)
) WITHOUT ROWID;

-- GPU time of one step of the window along one dimension: by kernel family or by seam ('' = outside
-- every seam).
CREATE TABLE profile_time (
  run_id    INTEGER NOT NULL REFERENCES runs(id),
  rank      INTEGER NOT NULL DEFAULT 0,
  step      INTEGER NOT NULL,
  dimension TEXT NOT NULL CHECK (dimension IN ('family', 'seam')),
  key       TEXT NOT NULL,
  calls     INTEGER NOT NULL CHECK (calls >= 0),
  total_ns  INTEGER NOT NULL CHECK (total_ns >= 0),
  PRIMARY KEY (run_id, rank, step, dimension, key)
) WITHOUT ROWID;

-- Every kernel of the window attributed to where it was launched from: phase (forward, backward,
-- optimizer, ...), layer index (-1 outside the layers), block letter, seam and backend ('' when
-- launched outside a seam), and its family.
CREATE TABLE kernel_attribution (
  run_id   INTEGER NOT NULL REFERENCES runs(id),
  rank     INTEGER NOT NULL DEFAULT 0,
  name     TEXT NOT NULL,
  phase    TEXT NOT NULL,
  layer    INTEGER NOT NULL,
  block    TEXT NOT NULL DEFAULT '',
  seam     TEXT NOT NULL DEFAULT '',
  backend  TEXT NOT NULL DEFAULT '',
  family   TEXT NOT NULL,
  calls    INTEGER NOT NULL CHECK (calls >= 0),
  total_ns INTEGER NOT NULL CHECK (total_ns >= 0),
  PRIMARY KEY (run_id, rank, name, phase, layer, seam)
) WITHOUT ROWID;

-- The kernels behind run_backends.observed: each kernel that ran inside a seam, and the catalog
-- backend whose kernel-name patterns it matches ('' = none).
CREATE TABLE backend_evidence (
  run_id   INTEGER NOT NULL REFERENCES runs(id),
  seam     TEXT NOT NULL,
  kernel   TEXT NOT NULL,
  matches  TEXT NOT NULL DEFAULT '',
  calls    INTEGER NOT NULL CHECK (calls >= 0),
  total_ns INTEGER NOT NULL CHECK (total_ns >= 0),
  PRIMARY KEY (run_id, seam, kernel)
) WITHOUT ROWID;
)";
  for (const char* table : {"profile_windows", "profile_time", "kernel_attribution", "backend_evidence"})
    sql += child_guards(table);
  return sql;
}

// v4: what the MoE router did in each step, NULL for models without E blocks (and in rows written before
// v4). The training loss (`loss`) includes aux_coef x the load-balancing loss; `moe_aux_loss` is that loss
// alone, so a router that collapses shows here before it shows in the loss. `moe_dropped_slots`: expert
// slots (token x top-k choices) the capacity factor dropped in the rank's rows of the step, summed over E
// layers; 0 when dropless. Added columns keep the steps guards of v1 (they are row-level triggers).
std::string migration_v4() {
  return R"(
ALTER TABLE steps ADD COLUMN moe_aux_loss REAL;
ALTER TABLE steps ADD COLUMN moe_dropped_slots INTEGER CHECK (moe_dropped_slots IS NULL OR moe_dropped_slots >= 0);
)";
}

// v5: coordination between `ablate matrix run` processes working through one matrix. Not receipts:
// these rows change and stop mattering once their runner has gone, so they carry no append-only guards
// and no report reads them. A claim holds while its runner is alive (ended_at NULL and a heartbeat
// newer than the stale limit, as for runs); a runner that ended or vanished frees its claims.
std::string migration_v5() {
  return R"(
CREATE TABLE matrix_runners (
  id           INTEGER PRIMARY KEY,
  matrix_id    INTEGER NOT NULL REFERENCES matrices(id),
  pid          INTEGER NOT NULL,
  host         TEXT NOT NULL,
  started_at   REAL NOT NULL,
  heartbeat_at REAL NOT NULL,
  ended_at     REAL
);
-- The runner that took a (cell, repeat) pair of a matrix: it runs the pair (once) while it lives.
CREATE TABLE matrix_claims (
  matrix_id  INTEGER NOT NULL REFERENCES matrices(id),
  cell       TEXT NOT NULL,
  repeat     INTEGER NOT NULL,
  runner_id  INTEGER NOT NULL REFERENCES matrix_runners(id),
  claimed_at REAL NOT NULL,
  PRIMARY KEY (matrix_id, cell, repeat)
) WITHOUT ROWID;
CREATE INDEX matrix_claims_by_runner ON matrix_claims(runner_id);
)";
}

// v6: the validation loss of a run evaluated on held-out data, one row per evaluation (per-run evidence
// with the append-only guards of v1's tables), and in the catalog snapshot whether a backend changes
// numerics beyond reduction order (NULL in rows written before: unknown), which the gate's convergence
// rule reads. The added column keeps catalog's v1 guards (row-level triggers).
std::string migration_v6() {
  std::string sql = R"(
ALTER TABLE catalog ADD COLUMN changes_numerics INTEGER CHECK (changes_numerics IS NULL OR changes_numerics IN (0, 1));
CREATE TABLE evaluations (
  run_id  INTEGER NOT NULL REFERENCES runs(id),
  step    INTEGER NOT NULL CHECK (step >= 0),   -- steps trained when evaluated
  loss    REAL,                                 -- token-weighted mean cross-entropy; NULL when not finite
  tokens  INTEGER NOT NULL CHECK (tokens > 0),  -- target tokens evaluated, over every rank
  seconds REAL NOT NULL CHECK (seconds >= 0),   -- wall time of the evaluation (goodput's eval)
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
)";
  sql += child_guards("evaluations");
  return sql;
}

// v7: receipts that travel between stores (`ablate import`). Every run gets `uid`, 128 random bits as
// 32 lowercase hex digits, made when the run opens (runs of older stores get theirs here): the name of
// the run in every store it is imported into, where integer ids are renumbered. `imports` records each
// import that added something (which file, its sha256 and schema, where its runs ran, what it added);
// `import_runs` which import brought each run and its id in the source. Both are history: immutable.
std::string migration_v7() {
  std::string sql = R"(
ALTER TABLE runs ADD COLUMN uid TEXT;
-- v1's guards refuse any update of a finished run and of a run's identity: lifted for the one update
-- that gives every existing run its uid, then restored with uid among the columns that never change.
DROP TRIGGER runs_append_only_update;
DROP TRIGGER runs_identity_immutable;
-- Derived from what the run recorded, not random: every copy of an older store gives its runs the same
-- uids, so importing such a store twice (each time through a fresh upgraded copy) adds nothing.
UPDATE runs SET uid = derived_run_uid(id, name, started_at, host, pid);
CREATE TRIGGER runs_append_only_update BEFORE UPDATE ON runs
WHEN OLD.status <> 'running'
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: a finished run cannot be changed'); END;
CREATE TRIGGER runs_identity_immutable BEFORE UPDATE OF id, name, started_at, pid, host, tags, lane,
  spec_hash, matrix_id, cell, repeat, uid ON runs
BEGIN SELECT RAISE(ABORT, 'receipts are append-only: the identity of a run cannot be changed'); END;
-- ALTER TABLE cannot add a NOT NULL column without a constant default, so the rule is a trigger.
CREATE TRIGGER runs_uid_required BEFORE INSERT ON runs
WHEN NEW.uid IS NULL OR length(NEW.uid) <> 32 OR NEW.uid GLOB '*[^0-9a-f]*'
BEGIN SELECT RAISE(ABORT, 'a run needs a uid of 32 lowercase hex digits'); END;
CREATE UNIQUE INDEX runs_by_uid ON runs(uid);

CREATE TABLE imports (
  id                    INTEGER PRIMARY KEY,
  source_path           TEXT NOT NULL,   -- absolute path of the source store when imported
  source_sha256         TEXT NOT NULL CHECK (length(source_sha256) = 64),  -- of its file as read
  source_bytes          INTEGER NOT NULL CHECK (source_bytes >= 0),
  source_schema_version INTEGER NOT NULL,  -- before it was upgraded (in a copy) for reading
  source_hosts          TEXT NOT NULL CHECK (json_valid(source_hosts) AND json_type(source_hosts) = 'array'),
  imported_at           REAL NOT NULL,
  imported_on           TEXT NOT NULL,   -- host of the process that imported it
  runs_added            INTEGER NOT NULL,
  runs_present          INTEGER NOT NULL,  -- already here with the same content
  runs_left_running     INTEGER NOT NULL,  -- still live in the source: not imported
  step_rows_added       INTEGER NOT NULL,
  matrices_added        INTEGER NOT NULL,
  decisions_added       INTEGER NOT NULL,
  annotations_added     INTEGER NOT NULL,
  artifacts_copied      INTEGER NOT NULL
);
CREATE TABLE import_runs (
  run_id        INTEGER PRIMARY KEY REFERENCES runs(id),
  import_id     INTEGER NOT NULL REFERENCES imports(id),
  source_run_id INTEGER NOT NULL
);
CREATE INDEX import_runs_by_import ON import_runs(import_id);
)";
  for (const char* table : {"imports", "import_runs"}) sql += immutable_guards(table);
  return sql;
}

// v8: what the profile window's trace says about communication (profiling::temporal_breakdown): the
// union of the communication kernels (NCCL), part of compute_ns, and the part of that when no other
// kernel, memcpy or memset ran, the exposed communication. NULL in rows written before v8 (unknown: 0
// would claim none was exposed) and in windows that did not trace. The added columns keep the v3 guards
// of profile_windows (row-level triggers).
std::string migration_v8() {
  return R"(
ALTER TABLE profile_windows ADD COLUMN communication_ns INTEGER CHECK (communication_ns IS NULL OR communication_ns >= 0);
ALTER TABLE profile_windows ADD COLUMN exposed_communication_ns INTEGER
  CHECK (exposed_communication_ns IS NULL OR (exposed_communication_ns >= 0 AND exposed_communication_ns <= communication_ns));
)";
}

// v9: the profile window's communication by collective kind (profiling::temporal_breakdown's
// collective_ns and exposed_collective_ns): each kind's union and the part of it with no other kernel,
// memcpy or memset beside it, so a receipt says which collective sat on the critical path. NULL in rows
// written before v9 and in windows that did not trace; the added columns keep the v3 guards.
std::string migration_v9() {
  std::string sql;
  for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"})
    sql += fmt::format(
        "ALTER TABLE profile_windows ADD COLUMN {0}_ns INTEGER CHECK ({0}_ns IS NULL OR ({0}_ns >= 0 AND "
        "{0}_ns <= communication_ns));\n"
        "ALTER TABLE profile_windows ADD COLUMN exposed_{0}_ns INTEGER CHECK (exposed_{0}_ns IS NULL OR "
        "(exposed_{0}_ns >= 0 AND exposed_{0}_ns <= {0}_ns));\n",
        kind);
  return sql;
}

void derived_run_uid(sqlite3_context* context, int argc, sqlite3_value** argv) {
  std::string identity;
  for (int i = 0; i < argc; ++i) {
    switch (sqlite3_value_type(argv[i])) {
      case SQLITE_INTEGER:
        identity += fmt::format("i:{}", sqlite3_value_int64(argv[i]));
        break;
      case SQLITE_FLOAT:
        identity += fmt::format("f:{}", sqlite3_value_double(argv[i]));
        break;
      case SQLITE_NULL:
        identity += "n";
        break;
      default:
        identity += "t:";
        identity.append(reinterpret_cast<const char*>(sqlite3_value_text(argv[i])),
                        static_cast<std::size_t>(sqlite3_value_bytes(argv[i])));
    }
    identity += '\x1f';
  }
  const std::string uid = base::sha256_hex(identity).substr(0, 32);
  sqlite3_result_text(context, uid.c_str(), static_cast<int>(uid.size()), SQLITE_TRANSIENT);
}

}  // namespace

void register_functions(sqlite3* db) {
  const int rc = sqlite3_create_function_v2(db, "derived_run_uid", -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr,
                                            derived_run_uid, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) throw std::runtime_error(fmt::format("cannot register derived_run_uid: {}", sqlite3_errstr(rc)));
}

const std::vector<std::string>& migrations() {
  static const std::vector<std::string> all = {migration_v1(), migration_v2(), migration_v3(), migration_v4(),
                                               migration_v5(), migration_v6(), migration_v7(), migration_v8(),
                                               migration_v9()};
  return all;
}

int latest_version() { return static_cast<int>(migrations().size()); }

}  // namespace ablate::receipts::schema
