// report/plots.cpp: gnuplot scripts and data for the report plots, and running gnuplot (see plots.h).
// Tests: tests/report/report_test.cpp (report_tests).
#include "report/plots.h"
#include "base/temp_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace ablate::report {
namespace {

namespace fs = std::filesystem;

// Cell names can be long: tick labels hang down-right from their tic, below the axis.
constexpr const char* kTerminal =
    "set terminal svg size 720,420 noenhanced font 'sans,11' background rgb 'white'\n"
    "set xtics rotate by -25 left nomirror\nset bmargin 7\n";
constexpr const char* kInstallHint = "install gnuplot (Debian: apt-get install gnuplot-nox; scripts/bootstrap.sh does)";

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string data_label(std::string_view label) { return "\"" + plot_label(label) + "\""; }

// One plot: its data file(s) and the script lines that draw it.
struct PlotJob {
  std::string file, title, script;
  std::vector<std::pair<std::string, std::string>> data;  // file name -> contents
};

std::optional<PlotJob> step_time_job(const Report& r) {
  PlotJob job{"step_time.svg", "Median step time per cell with its bootstrap 95 % interval", "", {}};
  std::string data;
  for (std::size_t i = 0; i < r.cells.size(); ++i)
    if (const auto& s = r.cells[i].step_ms)
      data += fmt::format("{} {} {:.6f} {:.6f} {:.6f}\n", i, data_label(r.cells[i].name), s->ratio, s->low, s->high);
  if (data.empty()) return std::nullopt;
  job.data.push_back({"step_time.dat", data});
  job.script = fmt::format(
      "set title 'median step time (ms), 95 % bootstrap interval'\nset ylabel 'ms'\nset xrange [-0.5:{}]\n"
      "set offsets 0, 0, graph 0.1, graph 0.1\nplot 'step_time.dat' using 1:3:4:5:xtic(2) with yerrorbars pt 7 title 'median step ms'\n",
      static_cast<double>(r.cells.size()) - 0.5);
  return job;
}

// One line per cell over `curve` (the training loss per step, or the few held-out evaluations, drawn
// with their points: `style`).
std::optional<PlotJob> curve_job(const Report& r, const std::string& file, const std::string& title, const std::string& what,
                                 std::vector<LossPoint> CellReport::*curve, const std::string& style) {
  PlotJob job{file, title, "", {}};
  std::vector<std::string> clauses;
  for (std::size_t i = 0; i < r.cells.size(); ++i) {
    const auto& points = r.cells[i].*curve;
    if (points.empty()) continue;
    std::string data;
    for (const auto& p : points) data += fmt::format("{} {:.6g}\n", p.step, p.loss);
    const std::string name = fmt::format("{}_{}.dat", what, i);
    job.data.push_back({name, data});
    clauses.push_back(fmt::format("'{}' using 1:2 with {} lw 2 title {}", name, style, data_label(r.cells[i].name)));
  }
  if (clauses.empty()) return std::nullopt;
  job.script = fmt::format("set title '{} (median over ok runs)'\nset xlabel 'step'\nset ylabel 'loss'\nplot ", what);
  for (std::size_t i = 0; i < clauses.size(); ++i) job.script += (i ? ", \\\n  " : "") + clauses[i];
  job.script += "\n";
  return job;
}

std::optional<PlotJob> goodput_job(const Report& r) {
  PlotJob job{"goodput.svg", "Wall time per goodput category (median seconds over ok runs)", "", {}};
  const auto& categories = receipts::goodput_categories();
  std::string data = "cell";
  for (const auto& c : categories) data += " " + c;
  data += "\n";
  bool any = false;
  for (const auto& cell : r.cells) {
    if (cell.goodput_seconds.empty()) continue;
    any = true;
    data += data_label(cell.name);
    for (const auto& c : categories) data += fmt::format(" {:.6f}", cell.goodput_seconds.at(c));
    data += "\n";
  }
  if (!any) return std::nullopt;
  job.data.push_back({"goodput.dat", data});
  job.script = fmt::format(
      "set title 'goodput ledger (median seconds)'\nset ylabel 's'\nset style data histograms\n"
      "set style histogram rowstacked\nset style fill solid 0.8 border -1\nset boxwidth 0.6\nset key outside right\n"
      "set linetype 9 lc rgb 'gray60'\nplot for [c=2:{}] 'goodput.dat' using c:xtic(1) title columnheader(c)\n",
      categories.size() + 1);
  return job;
}

std::optional<PlotJob> memory_job(const Report& r) {
  PlotJob job{"memory.svg", "Median peak memory per cell (GiB)", "", {}};
  std::string data;
  for (const auto& cell : r.cells)
    if (const auto& bytes = cell.side.median_peak_memory_bytes)
      data += fmt::format("{} {:.6f}\n", data_label(cell.name), *bytes / (1024.0 * 1024 * 1024));
  if (data.empty()) return std::nullopt;
  job.data.push_back({"memory.dat", data});
  job.script =
      "set title 'median peak memory (GiB)'\nset ylabel 'GiB'\nset yrange [0:*]\nset style data histograms\n"
      "set style fill solid 0.8 border -1\nset boxwidth 0.6\n"
      "plot 'memory.dat' using 2:xtic(1) title 'peak memory'\n";
  return job;
}

// Several inline SVGs on one page share one id namespace: give each plot's gnuplot ids a prefix.
std::string embeddable_svg(std::string svg, const std::string& prefix) {
  const auto start = svg.find("<svg");
  if (start == std::string::npos) throw std::runtime_error("gnuplot wrote no <svg> element");
  svg.erase(0, start);
  for (const char* id : {"gnuplot_canvas", "gpDot", "gpPt", "gpClip", "textbox"}) {
    std::string out;
    std::size_t from = 0, at;
    while ((at = svg.find(id, from)) != std::string::npos) {
      out.append(svg, from, at - from);
      out += prefix + "_" + id;
      from = at + std::strlen(id);
    }
    out.append(svg, from);
    svg = std::move(out);
  }
  return svg;
}

// Runs `binary script` in `dir`; returns "" on success, else why it failed.
std::string run_gnuplot(const std::string& binary, const base::TempDir& dir) {
  const std::string script = (dir / "plots.gp").string(), log = (dir / "gnuplot.log").string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<char*> argv = {const_cast<char*>(binary.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return fmt::format("gnuplot could not be started ({}: {}); {}{}", binary, std::strerror(rc), kInstallHint,
                       std::getenv("ABLATE_GNUPLOT") ? " or fix ABLATE_GNUPLOT" : "");
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  std::string output = read_file(log);
  if (output.size() > 600) output = "..." + output.substr(output.size() - 600);
  return fmt::format("gnuplot ({}) failed ({}): {}", binary,
                     WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status)) : "killed by a signal", output);
}

}  // namespace

std::string gnuplot_binary() {
  const char* configured = std::getenv("ABLATE_GNUPLOT");
  return configured && *configured ? configured : "gnuplot";
}

std::string plot_label(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (out.size() == 40) break;
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::strchr(" ._-=,:+/()%", c) != nullptr;
    out += safe && c != '\0' ? c : '?';
  }
  return out;
}

namespace {

// Runs every job in one gnuplot process; plots keep the jobs' order.
PlotSet draw(const std::vector<PlotJob>& jobs) {
  PlotSet set;
  if (jobs.empty()) return set;
  // A scratch folder for gnuplot's inputs and outputs, removed afterwards.
  base::TempDir dir("ablate-plots");
  std::string script = kTerminal;
  for (const auto& job : jobs) {
    for (const auto& [name, contents] : job.data) write_file(dir / name, contents);
    script += fmt::format("reset\n{}set output '{}'\n{}unset output\n", kTerminal, job.file, job.script);
  }
  // Paths in the script are relative: gnuplot runs with the scratch folder as its load directory.
  script = fmt::format("cd '{}'\n{}", (dir / "").string(), script);
  write_file(dir / "plots.gp", script);
  if (std::string failure = run_gnuplot(gnuplot_binary(), dir); !failure.empty()) {
    set.note = "Plots left out: " + failure +
               ". The tables below carry the plots' numbers, all but the per-step loss curves (ablate export "
               "--what steps has them).";
    return set;
  }
  for (const auto& job : jobs) {
    const std::string stem = job.file.substr(0, job.file.find('.'));
    set.plots.push_back({job.file, job.title, embeddable_svg(read_file(dir / job.file), "ablate_" + stem)});
  }
  return set;
}

// A lane's median step time per run over calendar time, each segment's median as a level line, and
// the first run after each regression marked.
std::optional<PlotJob> trend_job(const Trend& t, std::size_t index) {
  if (t.points.empty()) return std::nullopt;
  const std::string stem = fmt::format("trend_{}", index);
  PlotJob job{stem + ".svg", "Median step time per run over time; lines: each level's median; red: a regression starts",
              "", {}};
  std::string runs, levels, regressions;
  for (const auto& p : t.points) runs += fmt::format("{:.0f} {:.6f}\n", p.started_at, p.median_step_ms);
  for (const auto& s : t.segments)
    levels += fmt::format("{:.0f} {:.6f}\n{:.0f} {:.6f}\n\n", t.points[s.first].started_at, s.median_step_ms,
                          t.points[s.last].started_at, s.median_step_ms);
  for (const auto& shift : t.shifts) {
    if (shift.kind != ShiftKind::regression) continue;
    const auto& first_after = t.points[t.segments[shift.after].first];
    regressions += fmt::format("{:.0f} {:.6f}\n", first_after.started_at, first_after.median_step_ms);
  }
  job.data.push_back({stem + ".dat", runs});
  job.data.push_back({stem + "_levels.dat", levels});
  std::string plot = fmt::format("plot '{0}.dat' using 1:2 with points pt 7 ps 0.6 lc rgb 'gray40' title 'run', \\\n"
                                 "  '{0}_levels.dat' using 1:2 with lines lw 3 lc rgb 'blue' title 'level'",
                                 stem);
  if (!regressions.empty()) {
    job.data.push_back({stem + "_regressions.dat", regressions});
    plot += fmt::format(", \\\n  '{}_regressions.dat' using 1:2 with points pt 9 ps 1.8 lc rgb 'red' title 'regression'",
                        stem);
  }
  job.script = fmt::format(
      "set title 'lane {}: median step time (ms)'\nset ylabel 'ms'\nset xdata time\nset timefmt '%s'\n"
      "set format x '%Y-%m-%d'\nset offsets graph 0.02, graph 0.02, graph 0.1, graph 0.1\nset key outside right\n{}\n",
      plot_label(t.lane), plot);
  return job;
}

}  // namespace

PlotSet make_plots(const Report& report) {
  std::vector<PlotJob> jobs;
  for (auto job : {step_time_job(report),
                   curve_job(report, "loss.svg", "Loss per step (median over ok runs)", "loss", &CellReport::loss_curve, "lines"),
                   curve_job(report, "validation.svg", "Validation loss on held-out documents (median over ok runs)",
                             "validation", &CellReport::validation_curve, "linespoints"),
                   goodput_job(report), memory_job(report)})
    if (job) jobs.push_back(std::move(*job));
  return draw(jobs);
}

PlotSet make_trend_plots(const std::vector<Trend>& trends) {
  std::vector<PlotJob> jobs;
  for (std::size_t i = 0; i < trends.size(); ++i)
    if (auto job = trend_job(trends[i], i)) jobs.push_back(std::move(*job));
  return draw(jobs);
}

}  // namespace ablate::report
