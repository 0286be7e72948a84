// harness/cli/export_command.cpp: `ablate export --format csv|json [--what runs|steps|evaluations|summaries]
// [--all] [SELECTOR | --matrix NAME] [--out FILE]`: receipts as flat tables for pandas (report/export.h).
// No selector: every finished run (summaries need one). Steps and evaluations are of evidence runs only
// unless --all; the runs left out are named on stderr. --out writes via a temporary file and a rename;
// without it the table goes to stdout. Read-only on the store.
// Tests: tests/harness/report_cli_test.cpp (harness_tests), tests/report/export_test.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "harness/cli/commands.h"
#include "base/atomic_write.h"
#include "report/export.h"
#include "report/report.h"

namespace ablate::cli {

void register_export(CLI::App& app, Globals& g) {
  static std::string format, what = "runs", selector, matrix, out;
  static bool all_runs = false;
  auto* cmd = app.add_subcommand("export", "Runs, steps, held-out evaluations or cell summaries as CSV or JSON (for pandas)");
  cmd->add_option("--format", format, "csv | json")->required()->check(CLI::IsMember({"csv", "json"}));
  cmd->add_option("--what", what, "runs | steps | evaluations | summaries (default runs)")
      ->check(CLI::IsMember({"runs", "steps", "evaluations", "summaries"}));
  cmd->add_option("runs", selector, "12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (joined by &) | cell:MATRIX/CELL (default: every finished run)");
  cmd->add_option("--matrix", matrix, "the newest matrix of this name");
  cmd->add_option("--out", out, "write to this file (default: stdout)");
  cmd->add_flag("--all", all_runs,
                "with --what steps or evaluations: also the rows of runs that are not evidence (failed, killed, "
                "abandoned, incomplete)");
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    const auto table = report::parse_export_table(what);
    const bool everything = selector.empty() && matrix.empty();
    const bool per_run_rows = table == report::ExportTable::steps || table == report::ExportTable::evaluations;
    if (all_runs && !per_run_rows)
      throw std::invalid_argument(fmt::format("--all applies to --what steps or evaluations only: --what runs lists every "
                                              "run with its evidence column already, --what summaries counts evidence "
                                              "runs (got --what {})",
                                              what));
    if (everything && table == report::ExportTable::summaries)
      throw std::invalid_argument("--what summaries needs the runs to group: --matrix NAME or a run selector");
    report::RowTable records;
    if (table == report::ExportTable::summaries) {
      records = report::summary_table(report::build_report(store, report::select_cells(store, selector, matrix)));
    } else {
      const auto ids = everything ? report::all_finished_runs(store) : report::select_cells(store, selector, matrix).run_ids();
      std::vector<std::int64_t> left_out;
      records = table == report::ExportTable::runs    ? report::export_runs(store, ids)
                : table == report::ExportTable::steps ? report::export_steps(store, ids, all_runs, &left_out)
                                                      : report::export_evaluations(store, ids, all_runs, &left_out);
      if (!left_out.empty())
        fmt::print(stderr, "ablate: export: left out the {} of {} run(s) that are not evidence ({}); --all includes them\n",
                   what, left_out.size(), fmt::join(left_out, ", "));
    }
    const std::string text = format == "csv" ? report::to_csv(records) : report::to_json_text(records);
    if (out.empty()) {
      fmt::print("{}", text);
    } else {
      base::write_file_atomically(out, text);
      fmt::print(stderr, "ablate: export: {} {} row(s) to {}\n", records.rows.size(), what, out);
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
