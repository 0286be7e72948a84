// tests/receipts/store_file_test.cpp: a store FILE that is unusable as given (issue 15 item 7): damaged
// (truncated, overwritten) stores throw StoreFileError saying what is wrong and how to recover, without
// SQL, and are left byte for byte as they were; check_can_record passes a healthy store. (Read-only
// stores: tests/harness/cli_receipts_test.cpp, which can drop root's permission override.)
// Run: build/tests/receipts_tests --gtest_filter='StoreFile*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "receipts/sql.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::FileSnapshot;
using testing::make_steps;
using testing::sample_start;
namespace fs = std::filesystem;

class StoreFileTest : public ::testing::Test {
 protected:
  // A store with one finished run of 2,000 steps: many pages past the first.
  std::string make_store(const std::string& name) {
    const std::string path = dir_.file(name);
    auto store = Store::open(path);
    const auto id = store.begin_run(sample_start("kept"));
    store.append_steps(id, make_steps(2000));
    store.finish_run(id, RunStatus::ok, "", {});
    return path;
  }
  // The message of the StoreFileError that `fn` throws ("" when it throws none).
  template <typename Fn>
  std::string file_error(Fn&& fn) {
    try {
      fn();
    } catch (const StoreFileError& e) {
      return e.what();
    }
    return "";
  }
  base::TempDir dir_{"ablate-store-file"};
};

void expect_damaged_message(const std::string& msg, const std::string& path) {
  EXPECT_THAT(msg, HasSubstr("the receipt store '" + path + "' is damaged")) << msg;
  EXPECT_THAT(msg, HasSubstr("sqlite3 '" + path + "' .recover | sqlite3 recovered.db")) << msg;
  EXPECT_THAT(msg, HasSubstr("pass another --db")) << msg;
  for (const char* sql : {"SELECT", "INSERT", "PRAGMA", "while running"}) EXPECT_THAT(msg, Not(HasSubstr(sql))) << msg;
}

// A store reached through a symbolic link (to the file, or a folder on its path) is the store behind
// it; a new store behind a link that points nowhere yet is created there (SQLite resolves the link:
// SQLITE_OK_SYMLINK is success, not an error).
TEST_F(StoreFileTest, SymbolicLinksReachTheStoreBehindThem) {
  const std::string real = make_store("real.db");
  fs::create_symlink(real, dir_.file("file-link.db"));
  fs::create_directories(dir_.file("folder"));
  fs::create_symlink(dir_.file("folder"), dir_.file("folder-link"));
  fs::copy_file(real, dir_.file("folder/copy.db"));
  for (const std::string& path : {dir_.file("file-link.db"), dir_.file("folder-link/copy.db")}) {
    SCOPED_TRACE(path);
    auto store = Store::open(path);
    EXPECT_EQ(store.list_runs().size(), 1u);
    store.check_can_record();
    const auto id = store.begin_run(sample_start("through a link"));
    store.finish_run(id, RunStatus::ok, "", {});
  }
  EXPECT_EQ(Store::open(real).list_runs().size(), 2u);  // the link's run went into the file behind it
  fs::create_symlink(dir_.file("folder/new.db"), dir_.file("new-link.db"));
  {
    auto fresh = Store::open(dir_.file("new-link.db"));
    fresh.begin_run(sample_start("new"));
  }
  EXPECT_TRUE(fs::is_regular_file(dir_.file("folder/new.db")));
  EXPECT_TRUE(fs::is_symlink(dir_.file("new-link.db")));
}

TEST_F(StoreFileTest, AHealthyStoreCanRecord) {
  auto store = Store::open(make_store("ok.db"));
  EXPECT_NO_THROW(store.check_can_record());
}

TEST_F(StoreFileTest, ATruncatedStoreIsDamagedAndLeftAsItWas) {
  const std::string path = make_store("truncated.db");
  fs::resize_file(path, fs::file_size(path) / 2);
  const auto before = FileSnapshot::of(path);
  const std::string msg = file_error([&] { Store::open(path).check_can_record(); });
  expect_damaged_message(msg, path);
  EXPECT_TRUE(FileSnapshot::of(path) == before);
}

// Page 1 (the schema) intact, every later page garbage: opening works, the check finds it, and so
// does a reader that reaches a damaged page.
TEST_F(StoreFileTest, AnOverwrittenStoreIsDamagedForWritersAndReadersAndLeftAsItWas) {
  const std::string path = make_store("overwritten.db");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    f << std::string(fs::file_size(path) - 4096, 'Z');
  }
  const auto before = FileSnapshot::of(path);
  expect_damaged_message(file_error([&] { Store::open(path).check_can_record(); }), path);
  expect_damaged_message(file_error([&] { Store::open(path).list_runs({}); }), path);
  EXPECT_TRUE(FileSnapshot::of(path) == before);
}

// The codes that are about the file get the user's message; any other keeps SQLite's own text.
TEST_F(StoreFileTest, OnlyFileProblemsAreRephrased) {
  EXPECT_THAT(sql::file_problem(SQLITE_CORRUPT, "/x/r.db", "SQLite: database disk image is malformed"),
              HasSubstr("is damaged (SQLite: database disk image is malformed)"));
  EXPECT_THAT(sql::file_problem(SQLITE_NOTADB, "/x/r.db", "d"), HasSubstr("is damaged"));
  for (int rc : {SQLITE_READONLY, SQLITE_READONLY_DIRECTORY, SQLITE_CANTOPEN, SQLITE_PERM})
    EXPECT_THAT(sql::file_problem(rc, "/x/r.db", "d"), HasSubstr("the file or its folder is read-only (d)")) << rc;
  EXPECT_THAT(sql::file_problem(SQLITE_FULL, "/x/r.db", "d"), HasSubstr("the disk holding it is full"));
  for (int rc : {SQLITE_BUSY, SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_IOERR, SQLITE_ERROR})
    EXPECT_EQ(sql::file_problem(rc, "/x/r.db", "d"), "") << rc;
}

}  // namespace
}  // namespace ablate::receipts
