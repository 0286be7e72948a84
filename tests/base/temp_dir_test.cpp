// tests/base/temp_dir_test.cpp: TempDir creates a fresh folder under $TMPDIR (or a given parent) with the prefix in its
// name, removes it with everything below it on destruction, hands ownership over on a move, and
// names the folder and errno's text when it cannot be created.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include "base/temp_dir.h"
#include "tests/base/scoped_env.h"

namespace fs = std::filesystem;
using ablate::base::TempDir;
using ablate::base::testing::ScopedEnv;

TEST(TempDir, CreatesAFolderAndRemovesItWithEverythingBelow) {
  fs::path where;
  {
    TempDir dir("ablate-tempdir-test");
    where = dir.path();
    EXPECT_TRUE(fs::is_directory(where));
    EXPECT_THAT(where.filename().string(), ::testing::StartsWith("ablate-tempdir-test-"));
    fs::create_directories(dir / "a/b");
    std::ofstream(dir / "a/b/file") << "x";
    std::ofstream(dir.file("top")) << "y";
    EXPECT_TRUE(fs::exists(where / "a/b/file"));
    EXPECT_EQ(dir.file("top"), (where / "top").string());
  }
  EXPECT_FALSE(fs::exists(where));
}

TEST(TempDir, TwoAreDifferent) {
  TempDir a("ablate-tempdir-test"), b("ablate-tempdir-test");
  EXPECT_NE(a.path(), b.path());
  EXPECT_TRUE(fs::is_directory(a.path()));
  EXPECT_TRUE(fs::is_directory(b.path()));
}

TEST(TempDir, AMoveHandsTheFolderOver) {
  TempDir a("ablate-tempdir-test");
  const fs::path where = a.path();
  {
    TempDir b(std::move(a));
    EXPECT_EQ(b.path(), where);
    EXPECT_TRUE(a.path().empty());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
    EXPECT_TRUE(fs::is_directory(where));
  }
  EXPECT_FALSE(fs::exists(where));

  TempDir c("ablate-tempdir-test"), d("ablate-tempdir-test");
  const fs::path old_c = c.path(), old_d = d.path();
  c = std::move(d);  // c's own folder goes, d's is c's now
  EXPECT_FALSE(fs::exists(old_c));
  EXPECT_EQ(c.path(), old_d);
  EXPECT_TRUE(fs::is_directory(old_d));
}

TEST(TempDir, NamesTheFolderAndTheReasonWhenItCannotBeCreated) {
  ScopedEnv tmp("TMPDIR", "/nonexistent-ablate-tmp");
  try {
    TempDir dir("ablate-tempdir-test");
    FAIL() << "created " << dir.path();
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("/nonexistent-ablate-tmp/ablate-tempdir-test-XXXXXX"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("No such file or directory"));
  }
}

TEST(TempDir, InAGivenParentIgnoresTmpdir) {
  TempDir parent("ablate-tempdir-test");
  ScopedEnv tmp("TMPDIR", "/nonexistent-ablate-tmp");
  fs::path where;
  {
    TempDir inside("site-build", parent.path());
    where = inside.path();
    EXPECT_EQ(where.parent_path(), parent.path());
    EXPECT_THAT(where.filename().string(), ::testing::StartsWith("site-build-"));
    EXPECT_TRUE(fs::is_directory(where));
  }
  EXPECT_FALSE(fs::exists(where));
}
