// harness/cli/trend_command.cpp: `ablate trend --lane LANE [--since DATE] [--threshold 0.05] [--min-segment 3]
// [--json] [--fail-on-regression]`: a lane's ok runs over time, level shifts in median step time found by
// binary segmentation with a U-test check, and regressions worse than the threshold (report/trend.h).
// Read-only. Exit 1 with --fail-on-regression when a regression is found (so the command can guard CI;
// without the flag regressions are listed and the exit code is 0); exit 2 for an unknown lane, an
// unreadable date or a bad threshold.
// Tests: tests/harness/report_cli_test.cpp (harness_tests); the method: tests/report/trend_test.cpp.
#include <fmt/format.h>

#include <cstdio>

#include "harness/cli/commands.h"
#include "report/trend.h"

namespace ablate::cli {

void register_trend(CLI::App& app, Globals& g) {
  static std::string lane;
  static report::TrendOptions options;
  static bool as_json = false;
  static bool fail_on_regression = false;
  auto* cmd = app.add_subcommand("trend", "A lane's step time over time: level shifts and regressions");
  cmd->add_option("--lane", lane, "the lane (model + topology + backends; `ablate runs --json` shows each run's)")->required();
  cmd->add_option("--since", options.since, "unix seconds, ISO date/time (UTC), or an age: 90m, 12h, 30d");
  cmd->add_option("--threshold", options.threshold, "step-time growth that counts as a regression (0.05 = 5 %)");
  cmd->add_option("--min-segment", options.change_points.min_segment, "fewest runs on each side of a level shift (default 3)")
      ->check(at_least(1));
  cmd->add_flag("--json", as_json, "print JSON");
  cmd->add_flag("--fail-on-regression", fail_on_regression,
                "exit 1 when any regression is found (for CI); without it regressions are listed and the exit code is 0");
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    const auto trend = report::build_trend(store, lane, options);
    fmt::print("{}", as_json ? report::to_json(trend).dump(2) + "\n" : report::render_text(trend));
    if (fail_on_regression && trend.regressions() > 0) {
      std::fflush(stdout);  // the listing first, then why the exit code is 1
      fmt::print(stderr, "ablate: trend: {} regression(s) worse than {:.1f} % in lane {}: exit 1 (--fail-on-regression)\n",
                 trend.regressions(), trend.options.threshold * 100, trend.lane);
      return kExitRunFailed;
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
