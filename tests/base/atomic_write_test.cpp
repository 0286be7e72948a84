// tests/base/atomic_write_test.cpp: a file written through base/atomic_write.h is whole or absent, and no
// temporary sibling remains. Run: build/tests/base_tests --gtest_filter='AtomicWrite*'
#include "base/atomic_write.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "base/temp_dir.h"

namespace ablate::base {
namespace {

TEST(AtomicWrite, LeavesNothingHalfWritten) {
  TempDir dir;
  const std::string target = dir.file("out.csv");
  write_file_atomically(target, "a,b\n1,2\n");
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "a,b\n1,2\n");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.file(""))) ++entries;
  EXPECT_EQ(entries, 1u) << "no temporary file may remain";
  EXPECT_THROW(write_file_atomically(dir.file("missing/out.csv"), "x"), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("missing")));
}

// A folder as the target is a bad output path: invalid_argument (exit 2), with the path.
TEST(AtomicWrite, AFolderIsABadOutputPath) {
  TempDir dir;
  try {
    write_file_atomically(dir.file(""), "x");
    ADD_FAILURE() << "a folder was accepted as the output file";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("it is a folder"), std::string::npos) << e.what();
  }
}

TEST(AtomicWrite, ManyFilesIntoANewFolder) {
  TempDir dir;
  const std::string out = dir.file("a/b");
  write_files_atomically(out, {{"one.txt", "1"}, {"two.txt", "22"}});
  EXPECT_EQ(std::filesystem::file_size(out + "/one.txt"), 1u);
  EXPECT_EQ(std::filesystem::file_size(out + "/two.txt"), 2u);
}

}  // namespace
}  // namespace ablate::base
