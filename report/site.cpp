// report/site.cpp: the pages of `ablate site` and their atomic placement (see site.h).
// Tests: tests/report/site_test.cpp (report_tests), tests/harness/site_cli_test.cpp (harness_tests).
#include "report/site.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "base/clock.h"
#include "base/sha256.h"
#include "base/temp_dir.h"
#include "report/document.h"
#include "report/gate.h"
#include "report/plots.h"
#include "report/report.h"
#include "report/run_view.h"
#include "report/selection.h"

namespace ablate::report {
namespace {

namespace fs = std::filesystem;
using receipts::RunRow;

// ---- where each page lives ----

std::string run_page(std::int64_t id) { return fmt::format("runs/run-{}.html", id); }
std::string matrix_page(std::int64_t id) { return fmt::format("matrices/matrix-{}.html", id); }
std::string decision_page(std::int64_t id) { return fmt::format("decisions/decision-{}.html", id); }

// Lane names hold '/', '+' and anything a spec puts in a backend name: the file name keeps a readable
// part and a hash that keeps two lanes with the same readable part apart.
std::string lane_page(const std::string& lane) {
  std::string slug;
  for (const char c : lane.substr(0, 48))
    slug += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return fmt::format("lanes/lane-{}-{}.html", slug, base::sha256_hex(lane).substr(0, 8));
}

// A link from a page at `from` (a path relative to the site's root) to the page at `to`.
std::string href(const std::string& from, const std::string& to) {
  return from.find('/') == std::string::npos ? to : "../" + to;
}

std::vector<Link> navigation(const std::string& from) {
  return {{"index", href(from, "index.html")}, {"runs", href(from, "runs.html")}, {"gate decisions", href(from, "decisions.html")}};
}

std::string utc(double t) { return base::format_utc(t) + " UTC"; }
std::string ms(const std::optional<double>& v) { return text_or_dash(v, "{:.3f}"); }
std::string short_commit(const std::string& commit) { return commit.substr(0, 12); }

// Distinct commits in first-seen order, at most `shown` of them, then how many more.
std::string commit_list(const std::vector<std::string>& commits, std::size_t shown = 8) {
  std::vector<std::string> distinct;
  for (const auto& c : commits)
    if (!c.empty() && std::find(distinct.begin(), distinct.end(), short_commit(c)) == distinct.end())
      distinct.push_back(short_commit(c));
  if (distinct.empty()) return "-";
  std::string out = fmt::format("{}", fmt::join(distinct.begin(), distinct.begin() + std::min(shown, distinct.size()), ", "));
  if (distinct.size() > shown) out += fmt::format(" and {} more", distinct.size() - shown);
  return out;
}

// ---- what the pages are made of, read once ----

struct MatrixRow {
  std::int64_t id = 0;
  std::string name;
  double created_at = 0;
};

struct SiteData {
  std::string store_name;
  std::vector<RunRow> runs;                     // newest first
  std::map<std::int64_t, const RunRow*> run_by_id;
  std::map<std::int64_t, std::string> commit;   // run id -> run_env git_revision
  std::vector<std::string> lanes;               // sorted
  std::vector<Trend> trends;                    // one per lane, in lanes' order
  std::vector<MatrixRow> matrices;              // by id
  std::vector<receipts::Decision> decisions;    // newest first
  std::vector<StandingDecision> standing;
  std::map<std::int64_t, std::vector<std::int64_t>> decisions_citing;  // run id -> decision ids
  PlotSet trend_plots;
};

SiteData read_store(receipts::Store& store, const SiteOptions& options) {
  SiteData d;
  d.store_name = fs::path(store.path()).filename().string();
  d.runs = store.list_runs();
  std::set<std::string> lanes;
  for (const auto& r : d.runs) {
    d.run_by_id[r.id] = &r;
    if (!r.lane.empty()) lanes.insert(r.lane);
  }
  for (const auto& row : store.query("SELECT run_id, value FROM run_env WHERE key = 'git_revision'"))
    d.commit[row["run_id"].get<std::int64_t>()] = row["value"].is_string() ? row["value"].get<std::string>() : "";
  d.lanes.assign(lanes.begin(), lanes.end());
  for (const auto& lane : d.lanes) d.trends.push_back(build_trend(store, lane, options.trend));
  for (const auto& row : store.query("SELECT id, name, created_at FROM matrices ORDER BY id"))
    d.matrices.push_back({row["id"].get<std::int64_t>(), row["name"].get<std::string>(), row["created_at"].get<double>()});
  d.decisions = store.list_decisions();
  d.standing = standing_decisions(store);
  for (const auto& decision : d.decisions)
    for (const auto id : decision.evidence_run_ids) d.decisions_citing[id].push_back(decision.id);
  d.trend_plots = make_trend_plots(d.trends);
  return d;
}

std::string commit_of(const SiteData& d, std::int64_t run_id) {
  const auto it = d.commit.find(run_id);
  return it == d.commit.end() ? "" : it->second;
}

// Links to runs of this store; ids the store does not hold (a decision citing a run since removed
// from the evidence) are shown without a link.
LinkList run_links(const SiteData& d, const std::string& from, const std::vector<std::int64_t>& ids) {
  LinkList list;
  for (const auto id : ids)
    list.links.push_back({fmt::format("run {}", id), d.run_by_id.count(id) ? href(from, run_page(id)) : ""});
  return list;
}

// ---- pages ----

Document index_page(const SiteData& d) {
  const std::string from = "index.html";
  Document doc{fmt::format("Receipts of {}", d.store_name), navigation(from), {}};

  Section lanes{"Lanes", {}};
  if (d.lanes.empty()) lanes.blocks.push_back(Paragraph{"No run records a lane.", false});
  Table lane_table{{"lane", "ok runs in the trend", "levels", "regressions", "newest run"}, {}, {}};
  for (std::size_t i = 0; i < d.lanes.size(); ++i) {
    const auto& t = d.trends[i];
    lane_table.rows.push_back({d.lanes[i], std::to_string(t.points.size()), std::to_string(t.segments.size()),
                               std::to_string(t.regressions()),
                               t.points.empty() ? "-" : utc(t.points.back().started_at)});
    lane_table.links.push_back({href(from, lane_page(d.lanes[i])), "", "", "", ""});
  }
  if (!d.lanes.empty()) lanes.blocks.push_back(lane_table);
  doc.sections.push_back(lanes);

  Section matrices{"Matrices", {}};
  if (d.matrices.empty()) matrices.blocks.push_back(Paragraph{"No matrices.", false});
  Table matrix_table{{"matrix", "id", "created", "runs"}, {}, {}};
  std::map<std::int64_t, std::size_t> runs_per_matrix;
  for (const auto& r : d.runs)
    if (r.matrix_id) ++runs_per_matrix[*r.matrix_id];
  for (const auto& m : d.matrices) {
    matrix_table.rows.push_back({m.name, std::to_string(m.id), utc(m.created_at), std::to_string(runs_per_matrix[m.id])});
    matrix_table.links.push_back({href(from, matrix_page(m.id)), "", "", ""});
  }
  if (!d.matrices.empty()) matrices.blocks.push_back(matrix_table);
  doc.sections.push_back(matrices);

  Section gate{"Gate decisions", {}};
  gate.blocks.push_back(Paragraph{fmt::format("{} decision(s), {} standing (the newest KEEP or DROP with the minimum "
                                              "evidence per seam, backend and lane).",
                                              d.decisions.size(), d.standing.size()),
                                  false});
  gate.blocks.push_back(LinkList{{{"every decision by seam and backend", href(from, "decisions.html")}}});
  doc.sections.push_back(gate);

  Section runs{"Runs", {}};
  std::map<std::string, std::size_t> by_status;
  std::size_t without_lane = 0;
  for (const auto& r : d.runs) {
    ++by_status[std::string(receipts::to_string(r.status))];
    without_lane += r.lane.empty();
  }
  std::vector<std::string> counts;
  for (const auto& [status, n] : by_status) counts.push_back(fmt::format("{} {}", n, status));
  runs.blocks.push_back(Paragraph{fmt::format("{} run(s){}{}.", d.runs.size(), counts.empty() ? "" : ": ", fmt::join(counts, ", ")), false});
  if (without_lane)
    runs.blocks.push_back(Paragraph{fmt::format("{} run(s) record no lane (recorded before lanes existed): they are in "
                                                "no trend, only in the list of runs.",
                                                without_lane),
                                    false});
  runs.blocks.push_back(LinkList{{{"every run, newest first", href(from, "runs.html")}}});
  doc.sections.push_back(runs);
  return doc;
}

Document runs_page(const SiteData& d) {
  const std::string from = "runs.html";
  Document doc{fmt::format("Runs of {}", d.store_name), navigation(from), {}};
  Table table{{"run", "name", "status", "started", "lane", "matrix cell", "step ms", "tokens/s", "commit"}, {}, {}};
  for (const auto& r : d.runs) {
    table.rows.push_back({std::to_string(r.id), r.name, std::string(receipts::to_string(r.status)), utc(r.started_at),
                          r.lane.empty() ? "-" : r.lane, r.cell ? *r.cell : "-", ms(r.summary.median_step_ms),
                          text_or_dash(r.summary.tokens_per_s, "{:.0f}"), short_commit(commit_of(d, r.id))});
    table.links.push_back({href(from, run_page(r.id)), "", "", "", r.lane.empty() ? "" : href(from, lane_page(r.lane)),
                           r.matrix_id ? href(from, matrix_page(*r.matrix_id)) : "", "", "", ""});
  }
  doc.sections.push_back({fmt::format("{} run(s), newest first", d.runs.size()), {table}});
  return doc;
}

Document lane_document(const SiteData& d, std::size_t index) {
  const std::string& lane = d.lanes[index];
  const Trend& t = d.trends[index];
  const std::string from = lane_page(lane);
  Document doc{"Lane " + lane, navigation(from), {}};

  Section trend{"Trend", {}};
  trend.blocks.push_back(Paragraph{
      fmt::format("{} ok run(s) in {} level(s); a level shift is a change in median step time that a U test calls "
                  "significant; a regression is one slower by more than {:.1f} %.",
                  t.points.size(), t.segments.size(), t.options.threshold * 100),
      false});
  for (const auto& note : t.notes) trend.blocks.push_back(Paragraph{note, true});
  const std::string plot_file = fmt::format("trend_{}.svg", index);
  const auto plot = std::find_if(d.trend_plots.plots.begin(), d.trend_plots.plots.end(),
                                 [&](const Plot& p) { return p.file == plot_file; });
  if (plot != d.trend_plots.plots.end())
    trend.blocks.push_back(*plot);
  else if (!t.points.empty() && !d.trend_plots.note.empty())
    trend.blocks.push_back(Paragraph{d.trend_plots.note, true});
  doc.sections.push_back(trend);

  // Each point's level, for the runs table.
  std::map<std::int64_t, std::size_t> level_of;
  for (std::size_t s = 0; s < t.segments.size(); ++s)
    for (std::size_t i = t.segments[s].first; i <= t.segments[s].last; ++i) level_of[t.points[i].run_id] = s + 1;
  auto commits_of = [&](std::size_t segment) {
    std::vector<std::string> commits;
    for (const auto id : t.segment_run_ids(segment)) commits.push_back(commit_of(d, id));
    return commits;
  };

  if (!t.shifts.empty()) {
    Section shifts{"Level shifts", {}};
    for (const auto& s : t.shifts) {
      const auto first_after = t.points[t.segments[s.after].first].run_id;
      const std::string what = s.kind == ShiftKind::regression ? "REGRESSION" : std::string(to_string(s.kind));
      shifts.blocks.push_back(Paragraph{
          fmt::format("{} at run {} ({}): median step {:.3f} -> {:.3f} ms ({:+.1f} %), U test p {:.2g}; commits before: "
                      "{}; after: {}",
                      what, first_after, utc(t.points[t.segments[s.after].first].started_at),
                      t.segments[s.before].median_step_ms, t.segments[s.after].median_step_ms, s.change * 100, s.p_value,
                      commit_list(commits_of(s.before)), commit_list(commits_of(s.after))),
          s.kind == ShiftKind::regression});
      shifts.blocks.push_back(Paragraph{fmt::format("runs before (level {}):", s.before + 1), false});
      shifts.blocks.push_back(run_links(d, from, t.segment_run_ids(s.before)));
      shifts.blocks.push_back(Paragraph{fmt::format("runs after (level {}):", s.after + 1), false});
      shifts.blocks.push_back(run_links(d, from, t.segment_run_ids(s.after)));
    }
    doc.sections.push_back(shifts);
  }

  if (!t.segments.empty()) {
    Section levels{"Levels", {}};
    Table table{{"level", "from", "to", "runs", "median step ms", "median tokens/s", "commits"}, {}, {}};
    for (std::size_t s = 0; s < t.segments.size(); ++s) {
      const auto& seg = t.segments[s];
      table.rows.push_back({std::to_string(s + 1), utc(t.points[seg.first].started_at), utc(t.points[seg.last].started_at),
                            std::to_string(seg.last - seg.first + 1), fmt::format("{:.3f}", seg.median_step_ms),
                            text_or_dash(seg.median_tokens_per_s, "{:.0f}"), commit_list(commits_of(s))});
    }
    levels.blocks.push_back(table);
    doc.sections.push_back(levels);
  }

  Section runs{"Runs of the lane", {}};
  runs.blocks.push_back(Paragraph{"Every run recorded in the lane, newest first; level: its level in the trend (- when "
                                  "the trend leaves it out, as the notes above say).",
                                  false});
  Table table{{"run", "name", "status", "started", "step ms", "commit", "level"}, {}, {}};
  for (const auto& r : d.runs) {
    if (r.lane != lane) continue;
    const auto level = level_of.find(r.id);
    table.rows.push_back({std::to_string(r.id), r.name, std::string(receipts::to_string(r.status)), utc(r.started_at),
                          ms(r.summary.median_step_ms), short_commit(commit_of(d, r.id)),
                          level == level_of.end() ? "-" : std::to_string(level->second)});
    table.links.push_back({href(from, run_page(r.id)), "", "", "", "", "", ""});
  }
  runs.blocks.push_back(table);
  doc.sections.push_back(runs);
  return doc;
}

Document matrix_document(receipts::Store& store, const SiteData& d, const MatrixRow& m, std::size_t& plots) {
  const std::string from = matrix_page(m.id);
  Document doc;
  if (store.matrix_cells(m.id).empty()) {
    doc.title = fmt::format("matrix {} (id {})", m.name, m.id);
    doc.sections.push_back({"No runs", {Paragraph{"This matrix has no runs yet (run it with `ablate matrix run`).", true}}});
  } else {
    // The page is `ablate report --matrix`'s, for this matrix id (an older matrix of the same name too).
    const auto report = build_report(store, select_matrix_id(store, m.id));
    const auto drawn = make_plots(report);
    plots += drawn.plots.size();
    doc = to_document(report, drawn.plots, drawn.note);
    Section cell_runs{"Runs of each cell", {}};
    for (const auto& cell : report.declared_cells) {
      cell_runs.blocks.push_back(Paragraph{cell.run_ids.empty() ? cell.name + ": " + cell.no_runs_reason : cell.name + ":", false});
      if (!cell.run_ids.empty()) cell_runs.blocks.push_back(run_links(d, from, cell.run_ids));
    }
    if (report.declared_cells.empty())
      for (const auto& cell : report.cells) {
        std::vector<std::int64_t> ids = cell.side.evidence_ids();
        for (const auto& excluded : cell.side.excluded) ids.push_back(excluded.run_id);
        std::sort(ids.begin(), ids.end());
        cell_runs.blocks.push_back(Paragraph{cell.name + ":", false});
        cell_runs.blocks.push_back(run_links(d, from, ids));
      }
    doc.sections.push_back(cell_runs);
  }
  doc.navigation = navigation(from);
  std::vector<Link> citing;
  for (const auto& decision : d.decisions)
    if (decision.matrix_id == m.id)
      citing.push_back({fmt::format("decision {} ({} {}/{})", decision.id, receipts::to_string(decision.verdict),
                                    decision.seam, decision.backend),
                        href(from, decision_page(decision.id))});
  if (!citing.empty()) doc.sections.push_back({"Gate decisions on this matrix", {LinkList{citing}}});
  return doc;
}

Document decisions_document(const SiteData& d) {
  const std::string from = "decisions.html";
  Document doc{fmt::format("Gate decisions of {}", d.store_name), navigation(from), {}};
  Section standing{"Standing decisions", {}};
  standing.blocks.push_back(Paragraph{"Per seam, backend and lane: the newest KEEP or DROP with the minimum evidence. "
                                      "A standing KEEP makes the backend `keep` on the lane.",
                                      false});
  Table table{{"seam", "backend", "lane", "verdict", "decision", "decided"}, {}, {}};
  for (const auto& s : d.standing) {
    table.rows.push_back({s.seam, s.backend, s.lane, std::string(receipts::to_string(s.verdict)),
                          std::to_string(s.decision_id), utc(s.decided_at)});
    table.links.push_back({"", "", std::binary_search(d.lanes.begin(), d.lanes.end(), s.lane) ? href(from, lane_page(s.lane)) : "",
                           "", href(from, decision_page(s.decision_id)), ""});
  }
  if (d.standing.empty())
    standing.blocks.push_back(Paragraph{"None.", false});
  else
    standing.blocks.push_back(table);
  doc.sections.push_back(standing);

  // History, one section per seam and backend, newest first within each.
  std::map<std::pair<std::string, std::string>, std::vector<const receipts::Decision*>> by_backend;
  for (const auto& decision : d.decisions) by_backend[{decision.seam, decision.backend}].push_back(&decision);
  for (const auto& [key, decisions] : by_backend) {
    Table history{{"decision", "verdict", "decided", "evidence runs", "matrix", "details"}, {}, {}};
    for (const auto* decision : decisions) {
      const std::string first_line = decision->details.substr(0, decision->details.find('\n'));
      history.rows.push_back({std::to_string(decision->id), std::string(receipts::to_string(decision->verdict)),
                              utc(decision->decided_at), std::to_string(decision->evidence_run_ids.size()),
                              decision->matrix_id ? std::to_string(*decision->matrix_id) : "-",
                              first_line.size() > 160 ? first_line.substr(0, 157) + "..." : first_line});
      history.links.push_back({href(from, decision_page(decision->id)), "", "", "", 
                               decision->matrix_id ? href(from, matrix_page(*decision->matrix_id)) : "", ""});
    }
    doc.sections.push_back({fmt::format("{} / {}", key.first, key.second), {history}});
  }
  if (d.decisions.empty()) doc.sections.push_back({"History", {Paragraph{"No gate decisions.", false}}});
  return doc;
}

Document decision_document(const SiteData& d, const receipts::Decision& decision, const std::set<std::int64_t>& matrix_ids) {
  const std::string from = decision_page(decision.id);
  Document doc{fmt::format("Decision {}: {} / {} {}", decision.id, decision.seam, decision.backend,
                           receipts::to_string(decision.verdict)),
               navigation(from),
               {}};
  Section about{"Decision", {}};
  about.blocks.push_back(Paragraph{fmt::format("Decided {}; {} evidence run(s).", utc(decision.decided_at),
                                               decision.evidence_run_ids.size()),
                                   false});
  if (decision.matrix_id) {
    if (matrix_ids.count(*decision.matrix_id))
      about.blocks.push_back(LinkList{{{fmt::format("matrix {}", *decision.matrix_id), href(from, matrix_page(*decision.matrix_id))}}});
    else
      about.blocks.push_back(Paragraph{fmt::format("matrix {} (not in this store)", *decision.matrix_id), false});
  }
  std::vector<Link> stands;
  for (const auto& s : d.standing)
    if (s.decision_id == decision.id)
      stands.push_back({"stands on lane " + s.lane,
                        std::binary_search(d.lanes.begin(), d.lanes.end(), s.lane) ? href(from, lane_page(s.lane)) : ""});
  if (!stands.empty()) about.blocks.push_back(LinkList{stands});
  doc.sections.push_back(about);
  doc.sections.push_back({"Evidence runs", {run_links(d, from, decision.evidence_run_ids)}});
  doc.sections.push_back({"Details", {Preformatted{decision.details.empty() ? "(none recorded)" : decision.details}}});
  return doc;
}

Document run_document(receipts::Store& store, const SiteData& d, const RunRow& r, const SiteOptions& options) {
  const std::string from = run_page(r.id);
  Document doc{fmt::format("Run {}: {}", r.id, r.name), navigation(from), {}};
  std::vector<Link> related;
  if (!r.lane.empty()) related.push_back({"lane " + r.lane, href(from, lane_page(r.lane))});
  if (r.matrix_id)
    related.push_back({fmt::format("matrix {}{}", *r.matrix_id, r.cell ? ", cell " + *r.cell : ""), href(from, matrix_page(*r.matrix_id))});
  if (const auto it = d.decisions_citing.find(r.id); it != d.decisions_citing.end())
    for (const auto id : it->second) related.push_back({fmt::format("decision {}", id), href(from, decision_page(id))});
  if (!related.empty()) doc.sections.push_back({"Related", {LinkList{related}}});
  RunViewOptions view;
  view.top_kernels = static_cast<std::int64_t>(options.top_kernels);
  doc.sections.push_back({"Receipt (as `ablate show` prints it)", {Preformatted{render_run_text(store, r.id, view)}}});
  return doc;
}

// ---- writing ----

// Files of a folder that is not yet visible under its final name: plain writes suffice, the folder is
// swapped in only once every write has succeeded.
void write_page(const fs::path& root, const std::string& relative, const std::string& contents) {
  const fs::path path = root / relative;
  std::ofstream out(path, std::ios::binary);
  out << contents;
  out.flush();
  if (!out) {
    const int error = errno;
    throw std::invalid_argument(fmt::format("cannot write {}: {}", path.string(), std::strerror(error)));
  }
}

// The site folder's absolute path without a trailing separator ("site/" names the folder "site").
fs::path site_path(const std::string& out_dir) {
  if (out_dir.empty()) throw std::invalid_argument("the output folder must not be empty");
  fs::path target = fs::absolute(out_dir).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  return target;
}

// Refuses what must not be replaced, before any work.
void check_target(const fs::path& target) {
  std::error_code ec;
  const auto status = fs::symlink_status(target, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status))
    throw std::invalid_argument(fmt::format("{} exists and is not a folder: give a folder for the site", target.string()));
  if (fs::exists(target / kSiteMarker)) return;
  if (fs::directory_iterator(target, ec) != fs::directory_iterator())
    throw std::invalid_argument(fmt::format("{} is a folder with other files in it (no {}): the site replaces its "
                                            "folder, so give a new or empty folder, or one `ablate site` wrote",
                                            target.string(), kSiteMarker));
}

// Puts the finished folder `built` at `target`: one rename when target is missing, else an atomic
// exchange of the two (RENAME_EXCHANGE), after which `built` holds the old site for its owner to
// remove. Filesystems without the exchange get two renames (the old site moved aside first).
void swap_into_place(const fs::path& built, const fs::path& target) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(target, ec))) {
    if (::rename(built.c_str(), target.c_str()) != 0)
      throw std::invalid_argument(fmt::format("cannot move the site into {}: {}", target.string(), std::strerror(errno)));
    return;
  }
  if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) return;
  if (errno != EINVAL && errno != ENOSYS)
    throw std::invalid_argument(fmt::format("cannot replace {}: {}", target.string(), std::strerror(errno)));
  const fs::path aside = built.string() + ".old";
  if (::rename(target.c_str(), aside.c_str()) != 0)
    throw std::invalid_argument(fmt::format("cannot move the old site {} aside: {}", target.string(), std::strerror(errno)));
  if (::rename(built.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::rename(aside.c_str(), target.c_str());  // best effort: the old site back where it was
    throw std::invalid_argument(fmt::format("cannot move the site into {}: {}", target.string(), std::strerror(error)));
  }
  // `built` is gone; the old site, now at `aside`, takes its place for the owner to remove.
  ::rename(aside.c_str(), built.c_str());
}

}  // namespace

SiteSummary write_site(receipts::Store& store, const std::string& out_dir, const SiteOptions& options) {
  const fs::path target = site_path(out_dir);
  check_target(target);
  const fs::path parent = target.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create {}: {}", parent.string(), ec.message()));

  SiteData d = read_store(store, options);  // every page's data before the first file is written
  std::optional<base::TempDir> build;
  try {
    build.emplace(target.filename().string() + ".partial", parent);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(fmt::format("cannot write the site beside {}: {}", target.string(), e.what()));
  }
  const fs::path root = build->path();
  for (const char* folder : {"runs", "lanes", "matrices", "decisions"}) {
    fs::create_directory(root / folder, ec);
    if (ec) throw std::invalid_argument(fmt::format("cannot create {}: {}", (root / folder).string(), ec.message()));
  }

  SiteSummary summary;
  summary.out_dir = target.string();
  summary.runs = d.runs.size();
  summary.lanes = d.lanes.size();
  summary.matrices = d.matrices.size();
  summary.decisions = d.decisions.size();
  summary.plots = d.trend_plots.plots.size();
  summary.plot_note = d.trend_plots.note;
  auto page = [&](const std::string& relative, const Document& doc) {
    write_page(root, relative, render_html(doc));
    ++summary.pages;
  };
  page("index.html", index_page(d));
  page("runs.html", runs_page(d));
  page("decisions.html", decisions_document(d));
  for (std::size_t i = 0; i < d.lanes.size(); ++i) {
    page(lane_page(d.lanes[i]), lane_document(d, i));
    summary.regressions += d.trends[i].regressions();
  }
  std::set<std::int64_t> matrix_ids;
  for (const auto& m : d.matrices) matrix_ids.insert(m.id);
  for (const auto& m : d.matrices) page(matrix_page(m.id), matrix_document(store, d, m, summary.plots));
  for (const auto& decision : d.decisions) page(decision_page(decision.id), decision_document(d, decision, matrix_ids));
  for (const auto& r : d.runs) page(run_page(r.id), run_document(store, d, r, options));
  write_page(root, kSiteMarker, fmt::format("written by `ablate site` from {}; `ablate site` may replace this folder\n",
                                            d.store_name));

  // mkdtemp made the folder private (0700); a site is for reading, as any folder the user makes is.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(root.c_str(), 0777 & ~mask);
  swap_into_place(root, target);
  return summary;
}

}  // namespace ablate::report
