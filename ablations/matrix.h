// ablations/matrix.h: an ablation matrix file (TOML) and its expansion into cells and a run order.
//
//   [matrix]
//   name = "tiny-loss"
//   base = "../experiments/tiny.toml"   # relative to this file
//   mode = "one-at-a-time"              # or "factorial", or "zip"
//   repeats = 3
//   seeds = [1, 2, 3]                   # optional: repeat r runs with experiment.seed = seeds[r]
//   [axes]
//   "backends.loss" = ["reference", "chunked"]   # the first value of every axis is the baseline
//   [set]
//   "train.steps" = 12                  # applied to every cell
//
// Every cell is validated against the base spec up front (parse_spec_file with its overrides), so a
// bad matrix fails before anything runs; errors are SpecError (exit 2) pointing into the matrix file.
//
// The command line may change a file's matrix without copying it (MatrixOverrides: `--set`, `--axis`,
// `--name`), e.g. a 4-GPU matrix run on 2 GPUs; those changes are part of the matrix's identity, so its
// runs never pool with the file's own.
// Tests: tests/ablations/matrix_test.cpp (ablations_tests).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ablate::ablations {

// one_at_a_time: the baseline, then each axis's other values alone; factorial: every combination;
// zip: cell i takes value i of every axis (axes of one length, a value may repeat down an axis), for
// settings that only make sense together, such as the fastest layout at each world size.
enum class Mode { one_at_a_time, factorial, zip };
std::string_view to_string(Mode mode);  // "one-at-a-time" | "factorial" | "zip"

// One `--set key=value` that the matrix applies to the base spec. `where` is the matrix file's
// line:column that declared it, so a spec error caused by it points there, not at a synthetic --set.
struct Override {
  std::string key;    // section.key, e.g. backends.loss
  std::string value;  // TOML literal, e.g. "chunked" (with quotes) or 20
  std::string label;  // the value as a cell name shows it: chunked, 20
  std::string where;  // file:line:column
  std::string set_arg() const { return key + "=" + value; }
};

struct Axis {
  std::string key;
  std::vector<Override> values;  // values[0] is the baseline
};

// What `ablate matrix expand|run` changes in a matrix file, from the command line. Each entry is applied
// as written ("--set KEY=VALUE"), fails closed like the file's own keys, and is recorded.
struct MatrixOverrides {
  std::optional<int64_t> repeats;  // [matrix].repeats (not part of the identity: more repeats extend a matrix)
  std::optional<std::string> name;  // [matrix].name: the name the store and `--matrix NAME` know it by
  // "section.key=VALUE" (VALUE a TOML literal; a bare word is a string, as in `ablate run --set`): replaces
  // that key of [set] or adds it. A key an axis varies is an error (fix it with a one-value --axis).
  std::vector<std::string> set;
  // "section.key=[V1, V2, ...]": replaces that axis's values (first = baseline) or adds an axis; a key the
  // file fixes in [set] becomes this axis.
  std::vector<std::string> axes;
};

struct MatrixSpec {
  std::string name;
  std::string source_path;  // the matrix file
  std::string base;         // as written in the file
  std::string base_path;    // resolved against the matrix file's folder
  Mode mode = Mode::one_at_a_time;
  int64_t repeats = 3;
  std::vector<Override> seeds;  // experiment.seed per repeat; empty: the base spec's seed every time
  std::vector<Axis> axes;       // in file order
  std::vector<Override> fixed;  // [set], in file order (a command-line --set replaces in place or appends)
  // The command line's changes as given ("--name N", "--axis K=[...]", "--set K=V"; repeats left out),
  // in that order: stored in the identity and printed by describe(). Empty for the file as it is.
  std::vector<std::string> command_line;
};

struct Cell {
  std::string name;                 // "baseline", "backends.loss=chunked", "a.b=1,c.d=x" (factorial, zip)
  std::vector<Override> overrides;  // a value for every axis, in axis order
  std::string spec_hash;            // of the cell's spec with the base seed (set by load_matrix)
  int64_t nproc = 1;                // the cell's distributed.nproc: > 1 runs as `ablate launch` on nproc GPUs
};

// One run of the matrix: a cell (index into Matrix::cells) and a repeat.
struct Slot {
  size_t cell = 0;
  int64_t repeat = 0;
  bool operator==(const Slot&) const = default;
};

struct Matrix {
  MatrixSpec spec;
  std::vector<Cell> cells;
};

// Parses and checks a matrix file (keys, types, conflicts) without touching the base spec, with the
// command line's changes applied. Throws spec::SpecError.
MatrixSpec parse_matrix_file(const std::string& path, const MatrixOverrides& overrides = {});
MatrixSpec parse_matrix_string(const std::string& text, const std::string& source_path,
                               const MatrixOverrides& overrides = {});

// one-at-a-time: the baseline, then per axis each non-baseline value; factorial: the cartesian
// product (last axis varies fastest); zip: the axes' i-th values together, in order. Names are unique.
std::vector<Cell> expand(const MatrixSpec& spec);

// parse_matrix_file + expand + every (cell, seed) validated against the base spec and hashed.
// Throws spec::SpecError listing every problem of every cell.
Matrix load_matrix(const std::string& path, const MatrixOverrides& overrides = {});

// The overrides one run passes to `ablate run`: [set], then the cell's axis values, then the seed.
std::vector<Override> run_overrides(const MatrixSpec& spec, const Cell& cell, int64_t repeat);

// Interleaved by repeat (r0: every cell, r1: every cell, ...) so slow drift of the machine spreads
// over all cells instead of biasing the ones that ran last.
std::vector<Slot> run_order(const Matrix& matrix);

// The matrix's identity in the store (matrices.spec_json): base, mode, seeds, [set], axes, every cell
// with its overrides and spec hash, and the command line's changes when there are any. Repeats are left
// out on purpose: running more repeats later extends the same matrix instead of starting a new one.
nlohmann::json identity_json(const Matrix& matrix);

// Human-readable listing for `ablate matrix expand`: the cells, then the run order.
std::string describe(const Matrix& matrix);

}  // namespace ablate::ablations
