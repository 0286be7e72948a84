// tests/harness/site_cli_test.cpp: `ablate site` through the built binary on tests/report/site_fixture.h's
// store: the site is written and summarised; a missing store, OUT a file, OUT a folder of other files
// and a bad threshold are exit 2 with a message that says what to do, leaving no site behind.
// Build and run: cmake --build build --target ablate harness_tests && build/tests/harness_tests --gtest_filter='SiteCli*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_runner.h"
#include "tests/report/site_fixture.h"

namespace fs = std::filesystem;

namespace {

using ablate::testing::run_cli;
using ::testing::HasSubstr;

class SiteCli : public ::testing::Test {
 protected:
  void SetUp() override { site = ablate::report::testing::populate_site_fixture(fixture); }
  std::string db() { return fixture.store().path(); }
  std::string out(const std::string& name) { return (fs::path(db()).parent_path() / name).string(); }
  ablate::report::testing::FixtureStore fixture;
  ablate::report::testing::SiteFixture site;
};

TEST_F(SiteCli, WritesTheSiteAndSaysWhereToOpenIt) {
  const std::string dir = out("site");
  const auto r = run_cli("site " + dir + " --db " + db());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("regression(s)"));
  EXPECT_THAT(r.out, HasSubstr("open " + dir + "/index.html"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / "index.html"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(dir) / fmt::format("decisions/decision-{}.html", site.decision_id)));
  // A second run replaces the first site.
  const auto again = run_cli("site " + dir + " --db " + db());
  EXPECT_EQ(again.rc, 0) << again.out;
}

TEST_F(SiteCli, BadInputExitsTwoAndWritesNoSite) {
  const auto missing = run_cli("site " + out("a") + " --db " + out("nope.db"));
  EXPECT_EQ(missing.rc, 2) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr("nope.db"));
  EXPECT_FALSE(fs::exists(out("a")));

  std::ofstream(out("file.txt")) << "x";
  const auto file = run_cli("site " + out("file.txt") + " --db " + db());
  EXPECT_EQ(file.rc, 2) << file.out;
  EXPECT_THAT(file.out, HasSubstr("exists and is not a folder"));

  fs::create_directory(out("mine"));
  std::ofstream(out("mine") + "/notes.md") << "mine";
  const auto foreign = run_cli("site " + out("mine") + " --db " + db());
  EXPECT_EQ(foreign.rc, 2) << foreign.out;
  EXPECT_THAT(foreign.out, HasSubstr("give a new or empty folder"));
  EXPECT_FALSE(fs::exists(out("mine") + "/index.html"));

  const auto threshold = run_cli("site " + out("b") + " --threshold 0 --db " + db());
  EXPECT_EQ(threshold.rc, 2) << threshold.out;
  EXPECT_THAT(threshold.out, HasSubstr("--threshold must be > 0"));
  EXPECT_FALSE(fs::exists(out("b")));
}

}  // namespace
