// tests/report/site_test.cpp: `ablate site`'s pages (report/site.h) on tests/report/site_fixture.h's
// store: a page for every run, lane, matrix and decision; every relative link resolves to a file of
// the site and none leaves it; a rebuild is byte-identical; the regression is flagged with the commits
// on each side; a run page is `ablate show`'s text; markup in a run name stays text; no gnuplot still
// gives every page, with a note; a file, a foreign folder and a full disk are refused, leaving nothing.
// Build and run: cmake --build build --target report_tests && build/tests/report_tests --gtest_filter='Site*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "base/temp_dir.h"
#include "report/document.h"
#include "report/run_view.h"
#include "report/site.h"
#include "tests/base/scoped_env.h"
#include "tests/report/site_fixture.h"
#include "tests/small_disk.h"

namespace ablate::report {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every file below `root`, by path relative to it, with its contents.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file()) files[fs::relative(entry.path(), root).string()] = read(entry.path());
  return files;
}

// The values of every href="..." and src="..." attribute of a page.
std::vector<std::string> link_targets(const std::string& html) {
  static const std::regex attribute(R"re(\b(?:href|src)\s*=\s*"([^"]*)")re");
  std::vector<std::string> targets;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), attribute); it != std::sregex_iterator(); ++it)
    targets.push_back((*it)[1].str());
  return targets;
}

class Site : public ::testing::Test {
 protected:
  void SetUp() override { f = testing::populate_site_fixture(fixture); }
  receipts::Store& store() { return fixture.store(); }

  testing::FixtureStore fixture;
  testing::SiteFixture f;
  base::TempDir out{"ablate-site-test"};
};

TEST_F(Site, WritesAPageForEveryRunLaneMatrixAndDecision) {
  const auto summary = write_site(store(), out.file("site"));
  const fs::path site = out / "site";
  for (const char* page : {"index.html", "runs.html", "decisions.html", kSiteMarker})
    EXPECT_TRUE(fs::is_regular_file(site / page)) << page;
  const auto runs = store().list_runs();
  EXPECT_EQ(summary.runs, runs.size());
  for (const auto& r : runs) EXPECT_TRUE(fs::is_regular_file(site / fmt::format("runs/run-{}.html", r.id))) << r.id;
  EXPECT_TRUE(fs::is_regular_file(site / fmt::format("matrices/matrix-{}.html", f.matrix_id)));
  EXPECT_TRUE(fs::is_regular_file(site / fmt::format("decisions/decision-{}.html", f.decision_id)));
  EXPECT_EQ(summary.lanes, 2u);  // tiny/1gpu/reference and tiny/1gpu/sdpa_flash
  std::size_t lane_pages = 0;
  for (const auto& entry : fs::directory_iterator(site / "lanes")) lane_pages += entry.path().extension() == ".html";
  EXPECT_EQ(lane_pages, 2u);
  EXPECT_EQ(summary.pages, 3 + runs.size() + 2 + 1 + 1);
  const std::string index = read(site / "index.html");
  EXPECT_THAT(index, HasSubstr("tiny/1gpu/reference"));
  EXPECT_THAT(index, HasSubstr(fmt::format("href=\"matrices/matrix-{}.html\"", f.matrix_id)));
}

TEST_F(Site, EveryRelativeLinkResolvesAndNoneLeavesTheSite) {
  write_site(store(), out.file("site"));
  const fs::path site = out / "site";
  std::size_t pages = 0, links = 0;
  for (const auto& [name, html] : tree(site)) {
    if (!name.ends_with(".html")) continue;
    ++pages;
    for (const auto& target : link_targets(html)) {
      ++links;
      EXPECT_THAT(target, Not(HasSubstr(":"))) << name << " links outside the site: " << target;
      EXPECT_FALSE(target.starts_with("/")) << name << ": " << target;
      EXPECT_TRUE(fs::is_regular_file((site / name).parent_path() / target)) << name << " -> " << target;
    }
    // Namespace declarations of the inline SVGs name URLs without fetching them; nothing else may.
    const std::string without_namespaces = std::regex_replace(html, std::regex(R"re(xmlns(:\w+)?="[^"]*")re"), "");
    EXPECT_THAT(without_namespaces, Not(HasSubstr("http://"))) << name;
    EXPECT_THAT(without_namespaces, Not(HasSubstr("https://"))) << name;
    EXPECT_THAT(html, Not(HasSubstr("<script"))) << name;
  }
  EXPECT_GT(pages, 20u);
  EXPECT_GT(links, 100u);
}

TEST_F(Site, ARebuildIsByteIdenticalAndReplacesTheEarlierSite) {
  write_site(store(), out.file("a"));
  write_site(store(), out.file("b"));
  const auto first = tree(out / "a");
  std::ofstream(out / "a" / "left-over.html") << "from an older site";
  write_site(store(), out.file("a") + "/");  // the trailing separator names the same folder
  const auto rebuilt = tree(out / "a");
  EXPECT_EQ(rebuilt, first);
  EXPECT_EQ(tree(out / "b"), first);
  // Only the two sites: the build folders and the old site are gone.
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(out.path())) entries.push_back(entry.path().filename().string());
  EXPECT_THAT(entries, ::testing::UnorderedElementsAre("a", "b"));
}

TEST_F(Site, TheLanePageFlagsTheRegressionWithTheRunsAndCommitsOnEachSide) {
  write_site(store(), out.file("site"));
  std::string lane;
  for (const auto& entry : fs::directory_iterator(out / "site" / "lanes")) {
    const std::string html = read(entry.path());
    if (html.find("Lane tiny/1gpu/reference") != std::string::npos) lane = html;
  }
  ASSERT_FALSE(lane.empty());
  EXPECT_THAT(lane, HasSubstr(fmt::format("<p class=\"note\">REGRESSION at run {}", f.after.front())));
  EXPECT_THAT(lane, HasSubstr("commits before: aaaa1111aaaa; after: bbbb2222bbbb"));
  for (const auto id : f.before) EXPECT_THAT(lane, HasSubstr(fmt::format("href=\"../runs/run-{0}.html\">run {0}<", id)));
  for (const auto id : f.after) EXPECT_THAT(lane, HasSubstr(fmt::format("href=\"../runs/run-{0}.html\">run {0}<", id)));
  // The trend chart, inline; on a machine without gnuplot (a GPU machine may lack it) the note saying so.
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0)
    EXPECT_THAT(lane, HasSubstr("<svg"));
  else
    EXPECT_THAT(lane, HasSubstr("Plots left out: gnuplot could not be started"));
}

TEST_F(Site, ARunPageShowsWhatShowPrintsWithLinksToItsLaneMatrixAndDecisions) {
  write_site(store(), out.file("site"));
  const auto matrix_run = store().list_decisions().front().evidence_run_ids.front();
  const std::string page = read(out / "site" / fmt::format("runs/run-{}.html", matrix_run));
  RunViewOptions view;
  view.top_kernels = 10;
  EXPECT_THAT(page, HasSubstr("<pre>" + html_escape(render_run_text(store(), matrix_run, view)) + "</pre>"));
  EXPECT_THAT(page, HasSubstr(fmt::format("href=\"../matrices/matrix-{}.html\"", f.matrix_id)));
  EXPECT_THAT(page, HasSubstr(fmt::format("href=\"../decisions/decision-{}.html\"", f.decision_id)));
  EXPECT_THAT(page, HasSubstr("href=\"../lanes/lane-tiny_1gpu_reference-"));
}

TEST_F(Site, TheMatrixPageIsTheReportAndTheDecisionsPageHasItsHistory) {
  write_site(store(), out.file("site"));
  const std::string matrix = read(out / "site" / fmt::format("matrices/matrix-{}.html", f.matrix_id));
  EXPECT_THAT(matrix, HasSubstr(fmt::format("matrix attention (id {})", f.matrix_id)));
  EXPECT_THAT(matrix, HasSubstr("faster"));  // the report's verdict for the flash cell
  const std::string decisions = read(out / "site" / "decisions.html");
  EXPECT_THAT(decisions, HasSubstr("<h2>attention / sdpa_flash</h2>"));
  EXPECT_THAT(decisions, HasSubstr(fmt::format("href=\"decisions/decision-{0}.html\">{0}<", f.decision_id)));
  const std::string decision = read(out / "site" / fmt::format("decisions/decision-{}.html", f.decision_id));
  EXPECT_THAT(decision, HasSubstr("<pre>faster: step time ratio 0.80 [0.79, 0.81]\nloss within 2 %</pre>"));
}

TEST_F(Site, MarkupInARunNameStaysText) {
  write_site(store(), out.file("site"));
  const std::string page = read(out / "site" / fmt::format("runs/run-{}.html", f.markup_run));
  EXPECT_THAT(page, HasSubstr("&lt;script&gt;alert(&#39;site&#39;)&lt;/script&gt;"));
  EXPECT_THAT(read(out / "site" / "runs.html"), Not(HasSubstr("<script>")));
}

TEST_F(Site, WithoutGnuplotEveryPageIsWrittenAndTheLanePagesSayWhy) {
  base::testing::ScopedEnv gnuplot("ABLATE_GNUPLOT", "/nonexistent/gnuplot");
  const auto summary = write_site(store(), out.file("site"));
  EXPECT_THAT(summary.plot_note, HasSubstr("gnuplot could not be started"));
  EXPECT_EQ(summary.plots, 0u);
  for (const auto& entry : fs::directory_iterator(out / "site" / "lanes")) {
    const std::string html = read(entry.path());
    EXPECT_THAT(html, HasSubstr("Plots left out: gnuplot could not be started")) << entry.path();
    EXPECT_THAT(html, Not(HasSubstr("<svg"))) << entry.path();
  }
  EXPECT_TRUE(fs::is_regular_file(out / "site" / fmt::format("matrices/matrix-{}.html", f.matrix_id)));
}

TEST_F(Site, RefusesAFileAndAFolderItDidNotWriteLeavingThemAsTheyWere) {
  std::ofstream(out / "file.txt") << "keep me";
  EXPECT_THROW(write_site(store(), out.file("file.txt")), std::invalid_argument);
  EXPECT_EQ(read(out / "file.txt"), "keep me");
  fs::create_directory(out / "mine");
  std::ofstream(out / "mine" / "notes.md") << "mine";
  try {
    write_site(store(), out.file("mine"));
    FAIL() << "replaced a folder that is not a site";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("is a folder with other files in it"));
  }
  EXPECT_EQ(tree(out / "mine"), (std::map<std::string, std::string>{{"notes.md", "mine"}}));
  // Under a file: the folder cannot be made.
  EXPECT_THROW(write_site(store(), out.file("file.txt") + "/site"), std::invalid_argument);
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(out.path())) entries.push_back(entry.path().filename().string());
  EXPECT_THAT(entries, ::testing::UnorderedElementsAre("file.txt", "mine"));
}

TEST_F(Site, AFullDiskLeavesNoHalfSiteAndTheEarlierOneIntact) {
  ablate::testing::SmallDisk disk(out.file("disk"), 64);
  if (!disk.ready()) GTEST_SKIP() << disk.why_not();
  // An earlier small site (a store with one run) fits; the fixture's does not.
  testing::FixtureStore small;
  small.add("one", testing::FixtureRun{});
  base::testing::ScopedEnv gnuplot("ABLATE_GNUPLOT", "/nonexistent/gnuplot");  // keeps the small site small
  write_site(small.store(), out.file("disk/site"));
  const auto earlier = tree(out / "disk" / "site");
  try {
    write_site(store(), out.file("disk/site"));
    FAIL() << "a site larger than the disk was written";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("No space left on device"));
  }
  EXPECT_EQ(tree(out / "disk" / "site"), earlier);
  std::vector<std::string> entries;
  for (const auto& entry : fs::directory_iterator(out / "disk")) entries.push_back(entry.path().filename().string());
  EXPECT_THAT(entries, ::testing::ElementsAre("site"));
}

}  // namespace
}  // namespace ablate::report
