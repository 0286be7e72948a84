// report/compare.h: comparison of two groups of runs from the receipt store (docs/architecture.md "Comparability and
// statistics"), behind `ablate compare A B` and `ablate gate`. Only evidence runs (receipts::is_evidence)
// count; the others are listed with the reason. Per run the statistic is its median steady-state step
// time; between groups: ratio of medians B/A with a bootstrap 95 % interval, Mann-Whitney U, a verdict.
// Comparability: environment fields and the spec are compared field by field. Spec fields that differ
// between the sides are the factor under test; any other difference (environment, harness revision, or
// anything differing among the runs of one side) is a mismatch, refused with MismatchError unless
// allowed, and then marked in the output.
// Tests: tests/report/compare_test.cpp (report_tests).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/store.h"
#include "report/stats.h"

namespace ablate::report {

// A comparison across a difference that is not the factor under test. An invalid_argument, so the CLI
// reports it as bad input (exit 2).
class MismatchError : public std::invalid_argument {
 public:
  MismatchError(const std::string& message, std::vector<std::string> fields)
      : std::invalid_argument(message), fields_(std::move(fields)) {}
  const std::vector<std::string>& fields() const { return fields_; }

 private:
  std::vector<std::string> fields_;
};

// Environment keys whose difference makes step times incomparable (run_env keys; git_revision is the
// harness revision, compiler what built it: a GPU machine's own build and a carried prebuilt one,
// docs/gpu.md, are different harness binaries).
const std::vector<std::string>& compared_env_keys();

// One run as the comparison sees it: its row and its comparable fields, "env.<key>" and
// "spec.<dotted.path>" -> value (JSON text for spec leaves, "(absent)" when the run lacks it).
struct RunFacts {
  receipts::RunRow row;
  std::map<std::string, std::string> fields;
};
// A run's comparable fields as RunFacts holds them (its run_env and run_spec rows).
std::map<std::string, std::string> comparable_fields(receipts::Store& store, std::int64_t run_id);

struct ExcludedRun {
  std::int64_t run_id = 0;
  receipts::RunStatus status = receipts::RunStatus::running;
  std::string reason;
};

struct Side {
  std::vector<RunFacts> evidence;     // in the order the ids were given
  std::vector<ExcludedRun> excluded;  // not evidence, with why
  std::vector<std::int64_t> evidence_ids() const;
  std::vector<double> step_ms() const;  // per evidence run, its median_step_ms
  // Medians over the evidence runs; absent when the side has none.
  std::optional<double> median_step_ms, median_tokens_per_s, median_goodput_pct, median_peak_memory_bytes;
};

// The runs `ids` sorted into evidence and excluded (with why), with the evidence medians filled in.
// Throws StoreError for an unknown run.
Side load_side(receipts::Store& store, const std::vector<std::int64_t>& ids);

// A field whose values differ: between the sides, or among the runs of one side (within_side).
struct FieldDifference {
  std::string field;
  std::vector<std::string> a_values;  // distinct values on side A, sorted
  std::vector<std::string> b_values;
  bool within_side = false;
};

// Kernel time per step of one family over the profiled window (profile_time, rank 0): per run the
// window's total divided by its steps, per side the median over evidence runs that were profiled.
struct FamilyTime {
  std::string family;
  std::optional<double> a_ms_per_step, b_ms_per_step;  // absent: that side has no trace of the family
  std::size_t a_runs = 0, b_runs = 0;                   // profiled evidence runs behind each median
};

struct Comparison {
  Side a, b;
  std::optional<RatioInterval> step_ratio;  // median step time B/A; absent when a side has no evidence
  std::optional<MannWhitney> u_test;
  Difference verdict = Difference::unreliable;  // of B against A, for step time
  std::optional<double> tokens_per_s_delta_pct;       // (B/A - 1) * 100
  std::optional<double> goodput_delta_points;         // B - A, percentage points
  std::optional<double> peak_memory_delta_bytes;      // B - A
  std::vector<FamilyTime> family_times;     // by family, when either side has profiled runs
  std::vector<FieldDifference> factor;      // spec fields that differ between the sides
  std::vector<FieldDifference> mismatches;  // every other difference
  bool mismatch_allowed = false;            // mismatches non-empty and --allow-mismatch given
};

struct CompareOptions {
  bool allow_mismatch = false;
  BootstrapOptions bootstrap;
};

// Throws StoreError for an unknown run, std::invalid_argument for an empty side or a run on both sides,
// MismatchError when the sides are not comparable and !allow_mismatch.
Comparison compare_runs(receipts::Store& store, const std::vector<std::int64_t>& a_ids,
                        const std::vector<std::int64_t>& b_ids, const CompareOptions& options = {});

// Run selectors of the CLI: "12", "12,13,14"; filters "tag:NAME", "name:GLOB", "lane:LANE", "since:DATE"
// (as `ablate runs --since`: ISO date, unix seconds or an age such as 30d), combinable with '&'
// ("lane:nam56r-small/1gpu&since:30d"); "cell:MATRIX/CELL" (that cell of the newest matrix of the
// name, every finished run: compare lists the failed ones as excluded). Filters pick runs with status
// ok, or, with include_unsuccessful, every finished or abandoned run too (the gate needs to see
// failures). Ids are returned oldest first. A filter's runs still running are left out (into *running
// when given, oldest first: the gate refuses them). Throws std::invalid_argument for a malformed
// selector or one that matches nothing.
std::vector<std::int64_t> select_runs(receipts::Store& store, std::string_view selector,
                                      bool include_unsuccessful = false, std::vector<std::int64_t>* running = nullptr);


nlohmann::json to_json(const Comparison& comparison);
std::string render_text(const Comparison& comparison);

}  // namespace ablate::report
