// report/plots.h: the SVG plots of `ablate report` and of the lane pages of `ablate site`, drawn by gnuplot run as a child process (a data
// file per plot and one script, `set terminal svg`). gnuplot is $ABLATE_GNUPLOT when set, else `gnuplot`
// on PATH. When it is missing or fails, the report is still written, without plots and with a note
// saying why: plots are a convenience, the tables carry the numbers.
// Labels handed to gnuplot are reduced to a safe character set (no quotes, no markup), so a cell name
// can neither break the script nor put markup into the SVG that the HTML page embeds.
// Tests: tests/report/report_test.cpp (report_tests).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "report/document.h"
#include "report/report.h"
#include "report/trend.h"

namespace ablate::report {

struct PlotSet {
  std::vector<Plot> plots;  // step_time.svg, loss.svg, goodput.svg, memory.svg (those with data)
  std::string note;         // non-empty when plots are missing: why, and how to get them
};

PlotSet make_plots(const Report& report);

// One plot per trend with runs, trend_<index>.svg for trends[index], all drawn by one gnuplot process:
// the runs' median step time over calendar time, each level's median, the first run of each
// regression marked. Lanes without runs get none.
PlotSet make_trend_plots(const std::vector<Trend>& trends);

// The gnuplot executable: $ABLATE_GNUPLOT, else "gnuplot" (looked up on PATH).
std::string gnuplot_binary();

// A label as gnuplot may show it: letters, digits and " ._-=,:+/()%" kept, anything else '?', at
// most 40 characters.
std::string plot_label(std::string_view text);

}  // namespace ablate::report
