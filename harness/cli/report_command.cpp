// harness/cli/report_command.cpp: `ablate report (SELECTOR | --matrix NAME) [--baseline CELL] [--out DIR]`:
// report.md, report.html (self-contained, plots inline) and report.json for a matrix or a group of runs
// (report/report.h), plus the plots as SVG files. Everything is rendered in memory first and each file
// is written under a temporary name and renamed, so bad input leaves no half-written report. Read-only
// on the store. gnuplot missing ($ABLATE_GNUPLOT or PATH): the report is written without plots, with a note.
// Tests: tests/harness/report_cli_test.cpp (harness_tests), tests/ablations/matrix_cli_test.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "harness/cli/commands.h"
#include "base/atomic_write.h"
#include "report/plots.h"
#include "report/report.h"

namespace ablate::cli {
namespace {

// A folder name from a matrix name or selector: report-tiny_cpu, report-tag_nightly.
std::string default_out_dir(const std::string& what) {
  std::string slug;
  for (const char c : what) slug += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return "report-" + slug.substr(0, 60);
}

}  // namespace

void register_report(CLI::App& app, Globals& g) {
  static std::string selector, matrix, baseline, out_dir;
  auto* cmd = app.add_subcommand("report", "Markdown + HTML + JSON report of a matrix or a group of runs, with SVG plots");
  cmd->add_option("runs", selector, "runs to report, grouped by matrix cell or name: 12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (joined by &) | cell:MATRIX/CELL");
  cmd->add_option("--matrix", matrix, "report the newest matrix of this name (its cells, baseline first)");
  cmd->add_option("--baseline", baseline, "the cell the others are compared with (default: 'baseline', else the first)");
  auto* out_option = cmd->add_option("--out", out_dir, "output folder (default: report-<matrix or selector>)");
  command_table().push_back({cmd, [&g, out_option] {
    if (out_option->count() > 0 && out_dir.empty())
      throw std::invalid_argument("report: --out \"\" names no folder: give a folder, or leave --out out for the default");
    auto store = receipts::Store::open_existing(g.db);
    auto selection = report::select_cells(store, selector, matrix);
    if (!baseline.empty()) report::set_baseline(selection, baseline);
    const auto rep = report::build_report(store, selection);
    const auto plots = report::make_plots(rep);
    const auto document = report::to_document(rep, plots.plots, plots.note);
    std::vector<std::pair<std::string, std::string>> files = {{"report.md", report::render_markdown(document)},
                                                              {"report.html", report::render_html(document)},
                                                              {"report.json", report::to_json(rep).dump(2) + "\n"}};
    for (const auto& plot : plots.plots) files.push_back({plot.file, plot.svg + "\n"});
    const std::string dir = out_dir.empty() ? default_out_dir(matrix.empty() ? selector : matrix) : out_dir;
    base::write_files_atomically(dir, files);
    if (!plots.note.empty()) fmt::print(stderr, "ablate: report: {}\n", plots.note);
    const auto without_runs = std::count_if(rep.declared_cells.begin(), rep.declared_cells.end(),
                                            [](const auto& d) { return d.run_ids.empty(); });
    const std::string declared =
        without_runs == 0 ? "" : fmt::format(" ({} declared, {} without runs: see report.md)", rep.declared_cells.size(), without_runs);
    fmt::print("report of {}: {} cell(s){}, baseline {}; wrote {}, report.html, report.json and {} plot(s)\n", rep.title,
               rep.cells.size(), declared, rep.baseline().name, (std::filesystem::path(dir) / "report.md").string(),
               plots.plots.size());
    return kExitOk;
  }});
}

}  // namespace ablate::cli
