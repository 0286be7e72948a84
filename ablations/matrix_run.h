// ablations/matrix_run.h: running a matrix as child processes (`ablate matrix run`). Each (cell,
// repeat) is one `ablate run BASE --set ... --db DB` process, so a crash or OOM in one cell cannot take
// the others down and each run gets a clean CUDA context. The child learns its matrix coordinates from
// ABLATE_MATRIX_ID / ABLATE_MATRIX_CELL / ABLATE_MATRIX_REPEAT (read in harness/cli/run_command.cpp) and
// records them itself; this side only schedules, logs and resumes.
// Tests: tests/ablations/matrix_run_test.cpp (a shell script stands in for `ablate run`).
#pragma once
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ablations/matrix.h"
#include "receipts/store.h"

namespace ablate::ablations {

// The matrix row whose name and identity_json equal this matrix's, if the store has one.
std::optional<int64_t> find_matrix(receipts::Store& store, const Matrix& matrix);
// find_matrix, else a new row, in one store transaction (two runners started at once share the row):
// re-running the same matrix resumes it.
int64_t find_or_create_matrix(receipts::Store& store, const Matrix& matrix);

// The run order without the (cell, repeat) pairs that already have an `ok` run in the matrix;
// failed, killed and abandoned pairs run again.
std::vector<Slot> pending_slots(receipts::Store& store, int64_t matrix_id, const Matrix& matrix);

// The arguments after the binary: run BASE --set ... --db DB; `launch` instead of `run` for a cell whose
// distributed.nproc is above 1 (its ranks on as many GPUs of --gpus, CUDA_VISIBLE_DEVICES listing them).
std::vector<std::string> child_args(const Matrix& matrix, const Slot& slot, const std::string& db);

struct RunnerOptions {
  std::string binary;             // the `ablate` executable the children run
  std::string db;                 // passed to every child as --db
  // One child per listed GPU at a time (CUDA_VISIBLE_DEVICES), a data-parallel cell on nproc of them;
  // empty: one child at a time, seeing every device.
  std::vector<std::string> gpus;
  std::string log_dir;            // stdout+stderr of each child, one file per run (created if missing)
  std::FILE* out = stdout;        // progress lines
};

struct Outcome {
  size_t ok = 0, failed = 0;
  size_t skipped = 0;  // pairs another runner took or finished after `slots` was listed
};

// Runs `slots` in order, keeping every GPU slot busy; prints one progress line per finished run.
// Registers as a runner of matrix `matrix_id` in options.db and claims each pair just before starting
// it (receipts::Store::claim_matrix_slot): a pair another live runner holds, or one already ok, is
// skipped, so concurrent `matrix run`s of one matrix run each pair once between them.
// A child that cannot be started counts as a failed run.
Outcome run_slots(const Matrix& matrix, int64_t matrix_id, const std::vector<Slot>& slots, const RunnerOptions& options);

// "45s", "3m10s", "2h05m" (for ETAs).
std::string format_eta(double seconds);
// The log file of one run under `log_dir`: m<id>-<cell, filesystem-safe>-r<repeat>.log.
std::string log_path(const std::string& log_dir, int64_t matrix_id, const Cell& cell, int64_t repeat);

}  // namespace ablate::ablations
