// tests/harness/cli_import_test.cpp: `ablate import` through the built binary: stores merged with a line
// per source saying what it added, a second import saying there is nothing new, --copy-artifacts, and
// bad input (a conflicting run, a newer store, no source) as exit 2 with the destination as it was.
// Run: build/tests/harness_tests --gtest_filter='ImportCli*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/sha256.h"
#include "base/temp_dir.h"
#include "receipts/schema.h"
#include "receipts/sql.h"
#include "receipts/store.h"
#include "tests/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using ablate::testing::run_cli;
using ::testing::HasSubstr;

class ImportCli : public ::testing::Test {
 protected:
  ablate::base::TempDir dir_{"ablate-cli-import"};

  // A store holding one finished run `name` of `steps` steps, with a trace beside the store.
  std::string make_store(const std::string& name, int steps) const {
    const std::string path = dir_.file(name + ".db");
    auto store = ablate::receipts::Store::open(path);
    ablate::receipts::RunStart start;
    start.name = name;
    start.spec_json = "{}";
    const auto id = store.begin_run(start);
    std::vector<ablate::receipts::StepRow> rows(static_cast<std::size_t>(steps));
    for (int i = 0; i < steps; ++i) rows[i].step = i, rows[i].wall_ms = 10.0 + i;
    store.append_steps(id, rows);
    const std::string trace = dir_.file(name + ".trace.json");
    std::ofstream(trace) << "trace of " << name;
    store.add_artifact(id, "trace", trace);
    store.finish_run(id, ablate::receipts::RunStatus::ok, "", {});
    return path;
  }
};

TEST_F(ImportCli, MergesStoresSayingWhatEachAddedThenThatNothingIsNew) {
  const std::string a = make_store("node-a", 5), b = make_store("node-b", 7), dest = dir_.file("archive.db");
  const auto first = run_cli("import " + a + " " + b + " --db " + dest);
  ASSERT_EQ(first.rc, 0) << first.out;
  EXPECT_THAT(first.out, HasSubstr(a + " (schema " + std::to_string(ablate::receipts::schema::latest_version())));
  EXPECT_THAT(first.out, HasSubstr("1 run added (0 here already), 5 step rows, 0 matrices, 0 decisions, 0 annotations; import 1"));
  EXPECT_THAT(first.out, HasSubstr("7 step rows"));
  EXPECT_THAT(first.out, HasSubstr("import 2 in " + dest));

  const auto runs = run_cli("runs --db " + dest);
  EXPECT_THAT(runs.out, HasSubstr("node-a"));
  EXPECT_THAT(runs.out, HasSubstr("node-b"));

  const auto again = run_cli("import " + a + " --db " + dest);
  ASSERT_EQ(again.rc, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr(a + ": nothing new (1 run here already)"));
}

TEST_F(ImportCli, CopyArtifactsCopiesTracesBesideTheDestination) {
  const std::string a = make_store("node-a", 2), dest = dir_.file("archive.db");
  const auto r = run_cli("import --copy-artifacts " + a + " --db " + dest);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("1 artifact copied"));
  const std::string sha = ablate::base::sha256_hex("trace of node-a");
  EXPECT_TRUE(fs::exists(fs::path(dest + ".artifacts") / sha / "node-a.trace.json"));
}

TEST_F(ImportCli, BadInputIsExitTwoWithTheDestinationAsItWas) {
  const std::string a = make_store("node-a", 3), dest = dir_.file("archive.db");
  ASSERT_EQ(run_cli("import " + a + " --db " + dest).rc, 0);
  const std::string before = ablate::base::sha256_file(dest);

  // The same run (uid) with another status: refused, naming the run and the field.
  const std::string altered = dir_.file("altered.db");
  fs::copy_file(a, altered);
  // Through SQLite itself, not its shell (which a machine may lack: the edit would silently not happen).
  ablate::receipts::sql::Connection(altered).exec(
      "DROP TRIGGER runs_append_only_update; UPDATE runs SET status = 'killed', error = 'x'");
  const auto conflict = run_cli("import " + altered + " --db " + dest);
  EXPECT_EQ(conflict.rc, 2) << conflict.out;
  EXPECT_THAT(conflict.out, HasSubstr("ablate: error: cannot import '" + fs::absolute(altered).string()));
  EXPECT_THAT(conflict.out, HasSubstr("run 1 ('node-a', uid "));
  EXPECT_THAT(conflict.out, HasSubstr("status (here 'ok', in altered.db 'killed')"));

  const std::string newer = dir_.file("newer.db");
  fs::copy_file(a, newer);
  ablate::receipts::sql::Connection(newer).exec("PRAGMA user_version = 99");
  const auto refused = run_cli("import " + newer + " --db " + dest);
  EXPECT_EQ(refused.rc, 2) << refused.out;
  EXPECT_THAT(refused.out, HasSubstr("schema version 99"));

  const auto none = run_cli("import --db " + dest);
  EXPECT_EQ(none.rc, 2) << none.out;
  EXPECT_THAT(none.out, HasSubstr("sources is required"));
  EXPECT_EQ(ablate::base::sha256_file(dest), before);
}

}  // namespace
