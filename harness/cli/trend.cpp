// harness/cli/trend.cpp: `ablate trend --lane LANE [--since DATE] [--threshold 0.05] [--min-segment 3]
// [--json]`: a lane's ok runs over time, level shifts in median step time found by binary segmentation
// with a U-test check, and regressions worse than the threshold (report/trend.h). Read-only.
// Exit 2 for an unknown lane, an unreadable date or a bad threshold.
// Tests: tests/harness/report_cli_test.cpp (harness_tests); the method: tests/report/trend_test.cpp.
#include <fmt/format.h>

#include "harness/cli/commands.h"
#include "report/trend.h"

namespace ablate::cli {

void register_trend(CLI::App& app, Globals& g) {
  static std::string lane;
  static report::TrendOptions options;
  static bool as_json = false;
  auto* cmd = app.add_subcommand("trend", "A lane's step time over time: level shifts and regressions");
  cmd->add_option("--lane", lane, "the lane (model + topology + backends; `ablate runs --json` shows each run's)")->required();
  cmd->add_option("--since", options.since, "unix seconds, ISO date/time (UTC), or an age: 90m, 12h, 30d");
  cmd->add_option("--threshold", options.threshold, "step-time growth that counts as a regression (0.05 = 5 %)");
  cmd->add_option("--min-segment", options.change_points.min_segment, "fewest runs on each side of a level shift (default 3)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", as_json, "print JSON");
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    const auto trend = report::build_trend(store, lane, options);
    fmt::print("{}", as_json ? report::to_json(trend).dump(2) + "\n" : report::render_text(trend));
    return kExitOk;
  }});
}

}  // namespace ablate::cli
