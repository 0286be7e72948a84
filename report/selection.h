// report/selection.h: which runs a report or an export covers, grouped into cells. Either a matrix by
// name (its cells in the matrix file's order, from matrix_cells) or a run selector as `ablate compare`
// takes it (12 | 12,13 | tag:NAME | name:GLOB; report::select_runs), grouped by matrix cell when the run
// has one, else by run name. Every finished run is selected, failed ones too: a report lists them (they
// are never evidence, see compare.h).
// Tests: tests/report/report_test.cpp, export_test.cpp (report_tests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/store.h"

namespace ablate::report {

struct RunGroup {
  std::string name;                    // the cell
  std::vector<std::int64_t> run_ids;   // oldest first
};

// A cell a matrix declares, and why it has no run when it has none ("" when it has runs).
struct DeclaredCell {
  std::string name;
  std::string no_runs_reason;
};

struct RunSelection {
  std::string title;                    // "matrix tiny_cpu (id 3)" or "runs tag:nightly"
  std::optional<std::int64_t> matrix_id;
  std::vector<RunGroup> groups;         // the baseline first
  std::vector<DeclaredCell> declared_cells;  // a matrix's cells in its order, with or without runs; else empty
  std::vector<std::string> notes;       // e.g. other matrices sharing the name
  std::vector<std::int64_t> run_ids() const;  // every group's, in group order
  // A matrix's own baseline cell (its first declared) when it has no run, else nullptr: the first group
  // is then another cell.
  const DeclaredCell* baseline_without_runs() const;
};

// The newest matrix called `name`. Cells follow the matrix's own order (its identity_json), so the
// baseline cell comes first; a cell without runs is not a group but is in declared_cells, with why:
// `matrix run` refuses a cell wider than its --gpus without recording a run, and an interrupted
// matrix has cells it never started. Throws std::invalid_argument for an
// unknown name (listing the names the store knows) or a matrix without runs.
RunSelection select_matrix(receipts::Store& store, std::string_view name);

// The same for the matrix with this id (matrices share a name when their cells or base changed).
// Throws std::invalid_argument for an unknown id or a matrix without runs.
RunSelection select_matrix_id(receipts::Store& store, std::int64_t matrix_id);

// Runs picked by a compare-style selector, grouped by cell (else run name). Groups are ordered by
// their oldest run, except that a group named "baseline" comes first. Throws std::invalid_argument
// for a bad selector or one that matches nothing.
RunSelection select_grouped(receipts::Store& store, std::string_view selector);

// The command-line form shared by `ablate report` and `ablate export`: exactly one of a selector or
// --matrix NAME. Throws std::invalid_argument when both or neither are given.
RunSelection select_cells(receipts::Store& store, const std::string& selector, const std::string& matrix_name);

// Splits every group whose runs ran different specs into one group per spec, so that no cell pools
// two configurations. A spec here is every spec leaf but the descriptive ones (compare.h) and
// experiment.seed, which a matrix varies per repeat. The parts keep the group's place, in the order
// of their oldest run, each labelled with the keys that differ among them ("tiny [model.d_model=128]");
// a note names each split group, the keys and the runs of each part.
void split_groups_by_spec(receipts::Store& store, RunSelection& selection);

// Moves the group called `baseline` to the front. Throws std::invalid_argument naming the groups
// when there is none of that name.
void set_baseline(RunSelection& selection, std::string_view baseline);

}  // namespace ablate::report
