// harness/cli/compare_command.cpp: `ablate compare A B [--allow-mismatch] [--json]`: two groups of runs compared
// by report::compare_runs (ratio of median step times with a bootstrap interval, Mann-Whitney U, what
// differs between the sides, kernel time per family when profiled). Selectors (report::select_runs):
// 12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (filters joined by &, picking ok runs) |
// cell:MATRIX/CELL. Read-only. Exit 2 for bad input, including sides that differ in more than the factor under test.
// Tests: report/compare.cpp is tested in tests/report/compare_test.cpp (report_tests).
#include <fmt/core.h>

#include "harness/cli/commands.h"
#include "report/compare.h"

namespace ablate::cli {

void register_compare(CLI::App& app, Globals& g) {
  static std::string selector_a, selector_b;
  static bool allow_mismatch = false, as_json = false;
  auto* cmd = app.add_subcommand("compare", "Compare two groups of runs: step-time ratio B/A, U test, what differs");
  cmd->add_option("A", selector_a, "baseline runs: 12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (joined by &) | cell:MATRIX/CELL")->required();
  cmd->add_option("B", selector_b, "candidate runs, same forms")->required();
  cmd->add_flag("--allow-mismatch", allow_mismatch,
                "compare even when environment or harness revision differ (marked in the output)");
  cmd->add_flag("--json", as_json, "print JSON");
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    report::CompareOptions options;
    options.allow_mismatch = allow_mismatch;
    const auto comparison = report::compare_runs(store, report::select_runs(store, selector_a),
                                                 report::select_runs(store, selector_b), options);
    if (as_json) {
      fmt::print("{}\n", report::to_json(comparison).dump(2));
    } else {
      fmt::print("{}", report::render_text(comparison));
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
