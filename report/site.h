// report/site.h: `ablate site OUT/`: a static HTML site over the whole store, readable from disk
// (file://) with no server and no network: every page is self-contained (styles inline, plots as
// inline SVG) and links only to other pages of the site, by relative path.
//   index.html                 lanes, matrices, gate decisions and runs at a glance
//   runs.html                  every run, newest first
//   lanes/lane-<name>-<h>.html a lane's trend (report/trend.h): its runs over time, level shifts, the
//                              runs and commits (run_env git_revision) of each level, regressions flagged
//   matrices/matrix-<id>.html  the matrix's `ablate report` (report/report.h), with links to its runs
//   decisions.html             gate decisions by seam and backend, newest first, and which stand
//   decisions/decision-<id>.html  one decision: verdict, evidence runs, details
//   runs/run-<id>.html         what `ablate show` prints (report/run_view.h)
// The site is built in a folder beside OUT and swapped in when complete, so a failure leaves no half
// site and a reader never sees one. A folder is replaced only when it is empty or a site written
// before (it holds .ablate-site); anything else is refused. Output is deterministic for a given store
// (no clock), so a rebuild of an unchanged store is byte-identical. gnuplot missing: the pages say
// why the plots are missing, as `ablate report` does.
// Tests: tests/report/site_test.cpp (report_tests), tests/harness/site_cli_test.cpp (harness_tests),
// tests/scripts/site_browser_test.sh (ctest site_browser: every page in headless Chromium);
// benchmark: report/report_bench.cpp (BM_Site).
#pragma once

#include <cstddef>
#include <string>

#include "receipts/store.h"
#include "report/trend.h"

namespace ablate::report {

struct SiteOptions {
  TrendOptions trend;  // the lane pages' level shifts and regression threshold
  std::size_t top_kernels = 10;  // per run page, for runs with a profiled window
};

struct SiteSummary {
  std::string out_dir;  // absolute
  std::size_t pages = 0, runs = 0, lanes = 0, matrices = 0, decisions = 0, plots = 0, regressions = 0;
  std::string plot_note;  // non-empty when plots are missing: why
};

// The file every site holds at its root; its presence lets a rebuild replace the folder.
inline constexpr const char* kSiteMarker = ".ablate-site";

// Writes the site of `store` to `out_dir`. Throws std::invalid_argument (CLI exit 2) when out_dir is
// a file, a folder that is neither empty nor a site, or cannot be written (its folder read-only, a
// full disk), naming the path and the reason; nothing is left behind then.
SiteSummary write_site(receipts::Store& store, const std::string& out_dir, const SiteOptions& options = {});

}  // namespace ablate::report
