// receipts/store_import.cpp: `ablate import` (Store::import_stores): other stores' receipts merged into
// this one. Each source is read through a copy taken with SQLite's backup API over a read-only
// connection (the source file is never written, and what its WAL holds is included) and brought to this
// binary's schema; then one write transaction on the destination takes every source in turn. Runs are
// matched by uid (schema v7); integer ids (runs, matrices, decisions, annotations) are the destination's
// own, and the rows that cite them follow. docs/receipts.md "Import" says what is merged and why.
// Tests: tests/receipts/import_test.cpp, tests/harness/cli_import_test.cpp; benchmark: store_bench BM_Import.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "base/clock.h"
#include "base/host.h"
#include "base/sha256.h"
#include "base/temp_dir.h"
#include "receipts/schema.h"
#include "receipts/store.h"
#include "receipts/store_files.h"

namespace ablate::receipts {
namespace fs = std::filesystem;
namespace {

// Tables that hold a run_id but are not the run's own evidence: matrix membership and annotations are
// matched on their own; import_runs is this store's provenance, written for the runs an import adds.
const std::set<std::string> kRunIdTablesMergedApart = {"matrix_cells", "annotations", "import_runs"};

bool starts_with_sqlite_magic(const std::string& path) {
  // This process holds no SQLite connection on a source yet, so a descriptor of its own is safe here.
  constexpr std::string_view kMagic{"SQLite format 3\0", 16};
  std::string head(kMagic.size(), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in.gcount() == static_cast<std::streamsize>(kMagic.size()) && head == kMagic;
}

void copy_database(sql::Connection& from, sql::Connection& to) {
  sqlite3_backup* backup = sqlite3_backup_init(to.handle(), "main", from.handle(), "main");
  if (backup == nullptr) to.fail(sqlite3_extended_errcode(to.handle()), "sqlite3_backup_init");
  const int copied = sqlite3_backup_step(backup, -1);  // every page in one step: one consistent snapshot
  const int finished = sqlite3_backup_finish(backup);
  if (copied != SQLITE_DONE) from.fail(copied, "copying the source store (sqlite3_backup_step)");
  if (finished != SQLITE_OK) to.fail(finished, "copying the source store (sqlite3_backup_finish)");
}

// A source store as it is read: its facts, and a copy at this binary's schema in a folder of its own
// (removed with it; the Store closes first, being declared after the folder).
struct SourceSnapshot {
  ImportedSource facts;
  base::TempDir folder{"ablate-import"};
  std::optional<Store> store;
};

std::unique_ptr<SourceSnapshot> snapshot_source(const std::string& given, const StoreOptions& options) {
  std::error_code ec;
  if (!fs::exists(given, ec))
    throw StoreError(fmt::format("cannot import '{}': no such file; nothing was imported", given));
  if (!fs::is_regular_file(given, ec))
    throw StoreError(fmt::format("cannot import '{}': not a regular file; name receipt stores; nothing was imported", given));
  auto snapshot = std::make_unique<SourceSnapshot>();
  ImportedSource& facts = snapshot->facts;
  facts.path = fs::absolute(given).lexically_normal().string();
  facts.bytes = static_cast<std::int64_t>(fs::file_size(given));
  if (!starts_with_sqlite_magic(given))
    throw StoreError(fmt::format("cannot import '{}': it is not a SQLite database (it does not start with \"SQLite "
                                 "format 3\"); name receipt stores; nothing was imported",
                                 given));
  facts.sha256 = base::sha256_file(given);  // before SQLite opens it: see starts_with_sqlite_magic
  const std::string copy = snapshot->folder.file("source.db");
  {
    sql::Connection source(given, in_folder_nobody_writes(given) ? sql::OpenMode::immutable_snapshot
                                                                 : sql::OpenMode::read_only);
    source.set_busy_timeout(options.busy_timeout_ms);
    source.read_transaction([&] {
      const auto app_id = source.scalar_int("PRAGMA application_id");
      facts.schema_version = static_cast<int>(source.scalar_int("PRAGMA user_version"));
      const auto objects = source.scalar_int("SELECT count(*) FROM sqlite_master");
      if (app_id != schema::kApplicationId && !(app_id == 0 && facts.schema_version == 0 && objects == 0))
        throw StoreError(fmt::format("cannot import '{}': a SQLite database but not an ablate receipt store "
                                     "(application_id {}, {} schema objects); nothing was imported",
                                     given, app_id, objects));
      if (facts.schema_version > schema::latest_version())
        throw StoreError(fmt::format("cannot import '{}': it has schema version {}, this ablate knows up to {}: "
                                     "import it with a newer ablate; nothing was imported",
                                     given, facts.schema_version, schema::latest_version()));
    });
    sql::Connection target(copy);
    copy_database(source, target);
  }
  snapshot->store.emplace(Store::open(copy, options));
  return snapshot;
}

bool same_value(const sql::Statement& a, int a_col, const sql::Statement& b, int b_col) {
  const int ta = a.column_type(a_col), tb = b.column_type(b_col);
  if (ta == SQLITE_NULL || tb == SQLITE_NULL) return ta == tb;
  if (ta == SQLITE_INTEGER && tb == SQLITE_INTEGER) return a.get_int(a_col) == b.get_int(b_col);
  const auto numeric = [](int type) { return type == SQLITE_INTEGER || type == SQLITE_FLOAT; };
  if (numeric(ta) && numeric(tb)) return a.get_double(a_col) == b.get_double(b_col);
  return ta == tb && a.get_text(a_col) == b.get_text(b_col);
}

std::string shown_value(const sql::Statement& st, int col) {
  switch (st.column_type(col)) {
    case SQLITE_NULL:
      return "NULL";
    case SQLITE_INTEGER:
      return std::to_string(st.get_int(col));
    case SQLITE_FLOAT:
      return fmt::format("{}", st.get_double(col));  // shortest form that reads back as the same double
    default: {
      const std::string text = st.get_text(col);
      return text.size() <= 60 ? fmt::format("'{}'", text) : fmt::format("'{}...'", text.substr(0, 57));
    }
  }
}

std::string insert_sql(std::string_view table, const sql::Statement& columns_of) {
  std::string names, marks;
  for (int c = 0; c < columns_of.column_count(); ++c) {
    names += fmt::format("{}\"{}\"", c == 0 ? "" : ", ", columns_of.column_name(c));
    marks += c == 0 ? "?" : ", ?";
  }
  return fmt::format("INSERT INTO \"{}\" ({}) VALUES ({})", table, names, marks);
}

}  // namespace

// One source merged into the destination, inside the destination's write transaction.
class SourceImport {
 public:
  SourceImport(Store& dest, Store& source, ImportedSource& facts, const ImportOptions& options)
      : dest_(dest), source_(source), to_(*dest.db_), from_(*source.db_), facts_(facts), options_(options) {}

  void run() {
    find_run_tables();
    merge_matrices();
    merge_runs();
    merge_annotations();
    merge_decisions();
    record_provenance();
  }

 private:
  // Every table holding a run's own rows: those with a run_id column, but the ones merged apart. Read
  // from the schema, so a table a later migration adds is carried without a change here.
  void find_run_tables() {
    sql::Lease st = from_.prepare(
        "SELECT m.name FROM sqlite_schema AS m, pragma_table_info(m.name) AS c "
        "WHERE m.type = 'table' AND c.name = 'run_id' ORDER BY m.name");
    while (st->step()) {
      std::string table = st->get_text(0);
      if (!kRunIdTablesMergedApart.contains(table)) run_tables_.push_back(std::move(table));
    }
  }

  // A matrix is the same matrix when its name, spec and creation time are: a store copied from another
  // keeps its rows; runners of one matrix file on two machines made two rows, which stay two.
  void merge_matrices() {
    sql::Lease st = from_.prepare("SELECT id, name, spec_json, created_at FROM matrices ORDER BY id");
    while (st->step()) {
      sql::Lease find = to_.prepare(
          "SELECT id FROM matrices WHERE name = ? AND spec_json = ? AND created_at = ? ORDER BY id LIMIT 1");
      find->bind_all(st->get_text(1), st->get_text(2), st->get_double(3));
      if (find->step()) {
        matrices_[st->get_int(0)] = find->get_int(0);
        continue;
      }
      sql::Lease insert = to_.prepare("INSERT INTO matrices (name, spec_json, created_at) VALUES (?, ?, ?)");
      insert->execute(st->get_text(1), st->get_text(2), st->get_double(3));
      matrices_[st->get_int(0)] = to_.last_insert_rowid();
      ++facts_.matrices_added;
    }
  }

  void merge_runs() {
    const double live_after = source_.stale_cutoff();
    std::vector<std::string> conflicts;
    sql::Lease st = from_.prepare("SELECT id, uid, status, heartbeat_at, name, host FROM runs ORDER BY id");
    while (st->step()) {
      const std::int64_t id = st->get_int(0);
      // Still beating: its rows are still being written there. Left for a later import, once it ended.
      if (st->get_text(2) == "running" && st->get_double(3) >= live_after) {
        live_.insert(id);
        ++facts_.runs_left_running;
        facts_.notes.push_back(fmt::format("run {} ('{}', uid {}) is still running on {} (heartbeat {:.0f} s ago): "
                                           "left out; import this store again once it has ended",
                                           id, st->get_text(4), st->get_text(1), st->get_text(5),
                                           base::unix_now() - st->get_double(3)));
        continue;
      }
      sql::Lease find = to_.prepare("SELECT id FROM runs WHERE uid = ?");
      find->bind_all(st->get_text(1));
      if (!find->step()) {
        copy_run(id);
        continue;
      }
      const std::int64_t here = find->get_int(0);
      runs_[id] = here;
      ++facts_.runs_present;
      if (const auto fields = differences(id, here); !fields.empty())
        conflicts.push_back(fmt::format("run {} ('{}', uid {}) is run {} here with other content: {}", id,
                                        st->get_text(4), st->get_text(1), here, fmt::join(fields, "; ")));
    }
    if (conflicts.empty()) return;
    const std::size_t shown = std::min<std::size_t>(conflicts.size(), 5);
    throw StoreError(fmt::format(
        "cannot import '{}' into '{}': {} run(s) are already here with other content (a run's receipts never "
        "change, so one of the two stores was altered): {}{}. Nothing was imported; compare them with `ablate show "
        "RUN --json` on each store",
        facts_.path, dest_.path_, conflicts.size(),
        fmt::join(conflicts.begin(), conflicts.begin() + static_cast<std::ptrdiff_t>(shown), "; "),
        conflicts.size() > shown ? fmt::format("; and {} more", conflicts.size() - shown) : ""));
  }

  // The run row as the source holds it, but `running` and without its end: the append-only guards take
  // rows of a running run only, as when it was recorded. Its rows follow, then its end.
  void copy_run(std::int64_t source_id) {
    sql::Lease run = from_.prepare("SELECT * FROM runs WHERE id = ?");
    run->bind_all(source_id);
    run->step();
    std::string names, marks;
    int status_col = -1, ended_col = -1;
    for (int c = 0; c < run->column_count(); ++c) {
      const std::string name = run->column_name(c);
      if (name == "status") status_col = c;
      if (name == "ended_at") ended_col = c;
      if (name == "id") continue;
      names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", name);
      marks += marks.empty() ? "?" : ", ?";
    }
    sql::Lease insert = to_.prepare(fmt::format("INSERT INTO runs ({}) VALUES ({})", names, marks));
    int index = 0;
    for (int c = 0; c < run->column_count(); ++c) {
      const std::string name = run->column_name(c);
      if (name == "id") continue;
      ++index;
      if (name == "status") insert->bind(index, "running");
      else if (name == "ended_at") insert->bind(index, nullptr);
      else if (name == "matrix_id" && !run->is_null(c)) insert->bind(index, matrices_.at(run->get_int(c)));
      else insert->bind_column(index, *run, c);
    }
    insert->run();
    const std::int64_t here = to_.last_insert_rowid();
    runs_[source_id] = here;
    added_.emplace_back(here, source_id);
    ++facts_.runs_added;

    for (const std::string& table : run_tables_) {
      const std::int64_t rows = copy_rows(table, source_id, here);
      if (table == "steps") facts_.step_rows_added += rows;
    }
    {
      sql::Lease cell = from_.prepare("SELECT matrix_id, cell, repeat FROM matrix_cells WHERE run_id = ?");
      cell->bind_all(source_id);
      sql::Lease add = to_.prepare("INSERT INTO matrix_cells (matrix_id, cell, repeat, run_id) VALUES (?, ?, ?, ?)");
      while (cell->step()) add->execute(matrices_.at(cell->get_int(0)), cell->get_text(1), cell->get_int(2), here);
    }
    if (run->get_text(status_col) != "running") {
      sql::Lease end = to_.prepare("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?");
      end->bind_column(1, *run, status_col);
      end->bind_column(2, *run, ended_col);
      end->bind(3, here);
      end->run();
    }
  }

  std::int64_t copy_rows(const std::string& table, std::int64_t source_id, std::int64_t here) {
    sql::Lease read = from_.prepare(fmt::format("SELECT * FROM \"{}\" WHERE run_id = ?", table));
    read->bind_all(source_id);
    sql::Lease write = to_.prepare(insert_sql(table, *read));
    enum class Column { copied, run_id, artifact_path };
    std::vector<Column> columns;
    for (int c = 0; c < read->column_count(); ++c) {
      const std::string name = read->column_name(c);
      columns.push_back(name == "run_id"                                                      ? Column::run_id
                        : table == "artifacts" && name == "path" && options_.copy_artifacts ? Column::artifact_path
                                                                                            : Column::copied);
    }
    std::int64_t rows = 0;
    while (read->step()) {
      for (int c = 0; c < read->column_count(); ++c) {
        if (columns[c] == Column::run_id) write->bind(c + 1, here);
        else if (columns[c] == Column::artifact_path) write->bind(c + 1, artifact_here(*read));
        else write->bind_column(c + 1, *read, c);
      }
      write->run();
      write->reset();
      ++rows;
    }
    return rows;
  }

  // What differs between the source's run and the one here with its uid: the run row column by column
  // (matrix_id through the matrix it names), then how many rows each of its tables holds.
  std::vector<std::string> differences(std::int64_t source_id, std::int64_t here) {
    std::vector<std::string> fields;
    const std::string source_name = fs::path(facts_.path).filename().string();
    {
      sql::Lease there = from_.prepare("SELECT * FROM runs WHERE id = ?");
      sql::Lease mine = to_.prepare("SELECT * FROM runs WHERE id = ?");
      there->bind_all(source_id);
      mine->bind_all(here);
      there->step();
      mine->step();
      for (int c = 0; c < there->column_count(); ++c) {
        const std::string name = there->column_name(c);
        if (name == "id") continue;
        if (name == "matrix_id") {
          const std::optional<std::int64_t> expected =
              there->is_null(c) ? std::nullopt : std::optional(matrices_.at(there->get_int(c)));
          if (expected != mine->opt_int(c))
            fields.push_back(fmt::format("matrix_id (here {}, in {} a matrix that is {} here)", shown_value(*mine, c),
                                         source_name, expected ? std::to_string(*expected) : "NULL"));
          continue;
        }
        if (!same_value(*there, c, *mine, c))
          fields.push_back(fmt::format("{} (here {}, in {} {})", name, shown_value(*mine, c), source_name,
                                       shown_value(*there, c)));
      }
    }
    for (const std::string& table : run_tables_) {
      const auto count = [&](sql::Connection& db, std::int64_t id) {
        sql::Lease st = db.prepare(fmt::format("SELECT count(*) FROM \"{}\" WHERE run_id = ?", table));
        st->bind_all(id);
        st->step();
        return st->get_int(0);
      };
      const auto theirs = count(from_, source_id), ours = count(to_, here);
      if (theirs != ours) fields.push_back(fmt::format("{} rows (here {}, in {} {})", table, ours, source_name, theirs));
    }
    return fields;
  }

  // An annotation is the one write a finished run accepts: the source's that are not here yet are added,
  // to new runs and to runs already here alike.
  void merge_annotations() {
    sql::Lease st = from_.prepare("SELECT run_id, text, created_at FROM annotations ORDER BY id");
    while (st->step()) {
      const auto run = runs_.find(st->get_int(0));
      if (run == runs_.end()) continue;  // its run is still running there
      sql::Lease find = to_.prepare("SELECT 1 FROM annotations WHERE run_id = ? AND text = ? AND created_at = ?");
      find->bind_all(run->second, st->get_text(1), st->get_double(2));
      if (find->step()) continue;
      sql::Lease insert = to_.prepare("INSERT INTO annotations (run_id, text, created_at) VALUES (?, ?, ?)");
      insert->execute(run->second, st->get_text(1), st->get_double(2));
      ++facts_.annotations_added;
    }
  }

  // A decision cites its evidence by run id and its matrix by matrix id: both renumbered. The same
  // decision (every field equal once renumbered) is added once.
  void merge_decisions() {
    sql::Lease st = from_.prepare(
        "SELECT id, seam, backend, verdict, evidence_run_ids, matrix_id, details, decided_at FROM decisions ORDER BY id");
    while (st->step()) {
      std::vector<std::int64_t> evidence;
      for (const std::int64_t cited : nlohmann::json::parse(st->get_text(4)).get<std::vector<std::int64_t>>()) {
        if (live_.contains(cited))
          throw StoreError(fmt::format("cannot import '{}': its decision {} ({}/{}) cites run {}, which is still "
                                       "running there; import it again once that run has ended. Nothing was imported",
                                       facts_.path, st->get_int(0), st->get_text(1), st->get_text(2), cited));
        evidence.push_back(runs_.at(cited));  // the source's foreign checks ran when the decision was recorded
      }
      std::optional<std::int64_t> matrix;
      if (!st->is_null(5)) matrix = matrices_.at(st->get_int(5));
      const std::string evidence_json = nlohmann::json(evidence).dump();
      sql::Lease find = to_.prepare(
          "SELECT 1 FROM decisions WHERE seam = ? AND backend = ? AND verdict = ? AND evidence_run_ids = ? "
          "AND matrix_id IS ? AND details = ? AND decided_at = ?");
      find->bind_all(st->get_text(1), st->get_text(2), st->get_text(3), evidence_json, matrix, st->get_text(6),
                     st->get_double(7));
      if (find->step()) continue;
      sql::Lease insert = to_.prepare(
          "INSERT INTO decisions (seam, backend, verdict, evidence_run_ids, matrix_id, details, decided_at) "
          "VALUES (?, ?, ?, ?, ?, ?, ?)");
      insert->execute(st->get_text(1), st->get_text(2), st->get_text(3), evidence_json, matrix, st->get_text(6),
                      st->get_double(7));
      ++facts_.decisions_added;
    }
  }

  // An import that added nothing leaves no row: importing a store twice changes nothing.
  void record_provenance() {
    if (facts_.runs_added + facts_.matrices_added + facts_.decisions_added + facts_.annotations_added == 0) return;
    const std::string hosts = from_.scalar_text("SELECT json_group_array(host) FROM (SELECT DISTINCT host FROM runs ORDER BY host)");
    sql::Lease insert = to_.prepare(
        "INSERT INTO imports (source_path, source_sha256, source_bytes, source_schema_version, source_hosts, "
        "imported_at, imported_on, runs_added, runs_present, runs_left_running, step_rows_added, matrices_added, "
        "decisions_added, annotations_added, artifacts_copied) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert->execute(facts_.path, facts_.sha256, facts_.bytes, facts_.schema_version, hosts, base::unix_now(),
                    base::host_name(), facts_.runs_added, facts_.runs_present, facts_.runs_left_running,
                    facts_.step_rows_added, facts_.matrices_added, facts_.decisions_added, facts_.annotations_added,
                    facts_.artifacts_copied);
    facts_.import_id = to_.last_insert_rowid();
    sql::Lease link = to_.prepare("INSERT INTO import_runs (run_id, import_id, source_run_id) VALUES (?, ?, ?)");
    for (const auto& [here, there] : added_) link->execute(here, facts_.import_id, there);
  }

  // --copy-artifacts: the artifact's file, found where its record says or beside the source store (a
  // trace is written under the store's folder, so where the store moved, its traces moved along), copied
  // into `<DEST>.artifacts/<sha256>/<file name>`. A file not found, or not the one hashed, keeps the
  // source's path (a note says so).
  std::string artifact_here(const sql::Statement& row) {
    std::string recorded, sha256, kind;
    std::int64_t bytes = -1;
    for (int c = 0; c < row.column_count(); ++c) {
      const std::string name = row.column_name(c);
      if (name == "path") recorded = row.get_text(c);
      else if (name == "sha256") sha256 = row.get_text(c);
      else if (name == "bytes") bytes = row.get_int(c);
      else if (name == "kind") kind = row.get_text(c);
    }
    const fs::path path(recorded);
    std::vector<fs::path> candidates = {path};
    const fs::path relative = path.relative_path();
    const std::vector<fs::path> parts(relative.begin(), relative.end());
    const fs::path beside = fs::path(facts_.path).parent_path();
    for (std::size_t first = 0; first < parts.size(); ++first) {
      fs::path tail;
      for (std::size_t i = first; i < parts.size(); ++i) tail /= parts[i];
      candidates.push_back(beside / tail);
    }
    std::error_code ec;
    for (const fs::path& candidate : candidates) {
      if (!fs::is_regular_file(candidate, ec) || static_cast<std::int64_t>(fs::file_size(candidate, ec)) != bytes ||
          base::sha256_file(candidate.string()) != sha256)
        continue;
      const fs::path folder = fs::path(dest_.path_ + ".artifacts") / sha256;
      const fs::path target = fs::absolute(folder / path.filename()).lexically_normal();
      try {
        if (!fs::exists(target)) {
          fs::create_directories(folder);
          const fs::path partial = folder / (path.filename().string() + ".partial");
          fs::copy_file(candidate, partial, fs::copy_options::overwrite_existing);
          fs::rename(partial, target);  // content-addressed: a file under its hash is always whole
        }
      } catch (const fs::filesystem_error& e) {
        throw StoreError(fmt::format("cannot copy artifact '{}' to '{}': {}; nothing was imported", candidate.string(),
                                     target.string(), e.code().message()));
      }
      ++facts_.artifacts_copied;
      return target.string();
    }
    facts_.notes.push_back(fmt::format("{} artifact '{}' ({} bytes, sha256 {}) not found here nor beside the source "
                                       "store: its record keeps the source's path",
                                       kind, recorded, bytes, sha256));
    return recorded;
  }

  Store& dest_;
  Store& source_;
  sql::Connection& to_;
  sql::Connection& from_;
  ImportedSource& facts_;
  const ImportOptions& options_;
  std::vector<std::string> run_tables_;
  std::unordered_map<std::int64_t, std::int64_t> runs_;      // source run id -> id here
  std::unordered_map<std::int64_t, std::int64_t> matrices_;  // source matrix id -> id here
  std::set<std::int64_t> live_;                              // source runs left out: still running
  std::vector<std::pair<std::int64_t, std::int64_t>> added_;  // (id here, source id) of the runs added
};

std::vector<ImportedSource> Store::import_stores(const std::string& dest_path, const std::vector<std::string>& sources,
                                                 const ImportOptions& options, StoreOptions store_options) {
  if (sources.empty()) throw StoreError("nothing to import: name one or more receipt stores");
  // Every source is checked and copied before the destination is opened: a source that cannot be read
  // leaves the destination untouched, even unmade.
  std::vector<std::unique_ptr<SourceSnapshot>> snapshots;
  for (const std::string& source : sources) {
    std::error_code ec;
    if (fs::equivalent(source, dest_path, ec))
      throw StoreError(fmt::format("cannot import '{}' into itself: it is the destination (--db); nothing was imported",
                                   source));
    snapshots.push_back(snapshot_source(source, store_options));
  }
  Store dest = Store::open(dest_path, store_options);
  dest.check_can_record();
  std::vector<ImportedSource> imported;
  dest.db_->write_transaction([&] {
    for (auto& snapshot : snapshots) {
      SourceImport(dest, *snapshot->store, snapshot->facts, options).run();
      imported.push_back(snapshot->facts);
    }
  });
  return imported;
}

}  // namespace ablate::receipts
