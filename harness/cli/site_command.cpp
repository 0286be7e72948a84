// harness/cli/site_command.cpp: `ablate site OUT [--threshold 0.05] [--min-segment 3]`: a static HTML
// site over the whole store (report/site.h): an index of lanes and matrices, a trend page per lane with
// its level shifts and regressions, every matrix's report, the gate decisions by seam and backend, and a
// page per run. Opened from disk, no server or network. Read-only on the store. Built beside OUT and
// swapped in whole: bad input (a missing store, OUT a file or a folder of other files, an unwritable
// place) is exit 2 and leaves no half site. gnuplot missing: the site is written without plots, with a note.
// Tests: tests/harness/site_cli_test.cpp (harness_tests), tests/scripts/site_browser_test.sh (ctest site_browser).
#include <fmt/format.h>

#include "harness/cli/commands.h"
#include "report/site.h"

namespace ablate::cli {

void register_site(CLI::App& app, Globals& g) {
  static std::string out_dir;
  static report::SiteOptions options;
  auto* cmd = app.add_subcommand("site", "A static HTML site over the whole store: lanes' trends, matrices' reports, "
                                         "gate decisions, every run (open OUT/index.html from disk)");
  cmd->add_option("out", out_dir, "the site's folder (new, empty, or a site written before: it is replaced)")->required();
  cmd->add_option("--threshold", options.trend.threshold,
                  "step-time growth that counts as a regression on the lane pages (0.05 = 5 %)");
  cmd->add_option("--min-segment", options.trend.change_points.min_segment,
                  "fewest runs on each side of a level shift (default 3)")
      ->check(at_least(1));
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    const auto site = report::write_site(store, out_dir, options);
    if (!site.plot_note.empty()) fmt::print(stderr, "ablate: site: {}\n", site.plot_note);
    fmt::print("site of {}: {} page(s) for {} run(s), {} lane(s) ({} regression(s)), {} matri{}, {} decision(s), "
               "{} plot(s); open {}/index.html\n",
               g.db, site.pages, site.runs, site.lanes, site.regressions, site.matrices,
               site.matrices == 1 ? "x" : "ces", site.decisions, site.plots, site.out_dir);
    return kExitOk;
  }});
}

}  // namespace ablate::cli
