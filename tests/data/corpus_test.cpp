// tests/data/corpus_test.cpp: the corpus walk (order, filters, symlinks, cap) and its fingerprint (data/corpus.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataCorpus*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/corpus.h"
#include "data/errors.h"
#include "data/hash.h"
#include "data/loader.h"
#include "data/packing.h"
#include "base/rng.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "tests/data/data_fixtures.h"

namespace fs = std::filesystem;
using namespace ablate::data;
using namespace ablate::data::test_fixtures;
using ::testing::HasSubstr;

TEST(DataCorpusTest, WalkOrderIsBytewiseAndFiltersExtensions) {
  ablate::base::TempDir d;
  for (const char* f : {"b.h", "a.cpp", "sub/c.hpp", "sub/Z.h", "sub.h", "x.txt", "noext", "d.H", "e.h.bak",
                        "deep/er/f.cu", "g.cuh", "h.hh", "i.hxx", "j.c", "k.cc"}) {
    write_file(d / f, std::string("/* ") + f + " */\n");
  }
  const CorpusListing l = list_corpus(d.path(), default_extensions(), 0);
  // Byte-wise: "sub.h" < "sub/..." ('.' = 0x2e < '/' = 0x2f) and "Z" < "c" (upper case first); a
  // path-element comparison would order these differently.
  EXPECT_EQ(rel_paths(l), (std::vector<std::string>{"a.cpp", "b.h", "deep/er/f.cu", "g.cuh", "h.hh", "i.hxx", "j.c",
                                                    "k.cc", "sub.h", "sub/Z.h", "sub/c.hpp"}));
  EXPECT_EQ(l.matched_files, 11u);
  uint64_t bytes = 0;
  for (const auto& f : l.files) bytes += f.size;
  EXPECT_EQ(l.total_bytes, bytes);
  EXPECT_EQ(l.token_count(), bytes + 11);

  const CorpusListing txt = list_corpus(d.path(), {"txt", ".H"}, 0);  // a missing dot is added
  EXPECT_EQ(rel_paths(txt), (std::vector<std::string>{"d.H", "x.txt"}));
}

TEST(DataCorpusTest, SymlinksAreSkippedAndLoopsDoNotTrapTheWalk) {
  ablate::base::TempDir d;
  write_file(d / "a.h", "a\n");
  write_file(d / "sub/b.h", "b\n");
  fs::create_directory_symlink(d.path(), d / "sub/loop");   // sub/loop -> root: a cycle
  fs::create_directory_symlink(d / "sub", d / "alias");      // a second path to sub/
  fs::create_symlink(d / "a.h", d / "link.h");               // a file link: same text twice
  fs::create_symlink(d / "missing.h", d / "dangling.h");
  const CorpusListing l = list_corpus(d.path(), default_extensions(), 0);
  EXPECT_EQ(rel_paths(l), (std::vector<std::string>{"a.h", "sub/b.h"}));
  // The corpus folder itself may be a link, and spellings of one folder give one root and fingerprint.
  ablate::base::TempDir other;
  fs::create_directory_symlink(d.path(), other / "corpus");
  EXPECT_EQ(rel_paths(list_corpus(other / "corpus", default_extensions(), 0)), rel_paths(l));
  const CorpusListing respelled = list_corpus(d.path().string() + "/sub/.././", default_extensions(), 0);
  EXPECT_EQ(respelled.root, d.path());
  EXPECT_EQ(respelled.fingerprint, l.fingerprint);
}

TEST(DataCorpusTest, CapNeverCutsADocument) {
  ablate::base::TempDir d;
  write_file(d / "a.h", std::string(10, 'a'));
  write_file(d / "b.h", std::string(20, 'b'));
  write_file(d / "c.h", std::string(30, 'c'));
  auto files_under = [&](uint64_t cap) { return rel_paths(list_corpus(d.path(), default_extensions(), cap)); };
  EXPECT_EQ(files_under(0), (std::vector<std::string>{"a.h", "b.h", "c.h"}));
  EXPECT_EQ(files_under(60), (std::vector<std::string>{"a.h", "b.h", "c.h"}));
  EXPECT_EQ(files_under(59), (std::vector<std::string>{"a.h", "b.h"}));
  EXPECT_EQ(files_under(30), (std::vector<std::string>{"a.h", "b.h"}));
  EXPECT_EQ(files_under(29), (std::vector<std::string>{"a.h"}));
  EXPECT_EQ(files_under(10), (std::vector<std::string>{"a.h"}));
  const CorpusListing capped = list_corpus(d.path(), default_extensions(), 59);
  EXPECT_EQ(capped.total_bytes, 30u);
  EXPECT_EQ(capped.matched_files, 3u);
  const auto tokens = tokenise_listing(capped);
  ASSERT_EQ(tokens.size(), 32u);
  EXPECT_EQ(tokens[10], kEod);
  EXPECT_EQ(tokens[11], 'b');
  EXPECT_EQ(tokens[31], kEod);
  // The cap is part of the fingerprint even when it selects the same files.
  EXPECT_NE(list_corpus(d.path(), default_extensions(), 0).fingerprint,
            list_corpus(d.path(), default_extensions(), 1000).fingerprint);
  EXPECT_THAT([&] { list_corpus(d.path(), default_extensions(), 9); },
              ::testing::ThrowsMessage<DataError>(HasSubstr("data.max_bytes = 9 is smaller than the first file")));
}

TEST(DataCorpusTest, TokenisingJoinsDocumentsWithEod) {
  SmallCorpus c;
  const CorpusListing l = list_corpus(c.dir.path(), default_extensions(), 0);
  EXPECT_EQ(rel_paths(l), (std::vector<std::string>{"a.h", "b.cpp", "c/d.hpp"}));
  EXPECT_EQ(tokenise_listing(l), SmallCorpus::stream());
}

TEST(DataCorpusTest, FingerprintFollowsNamesSizesMtimesAndExtensions) {
  SmallCorpus c;
  const uint64_t fp = list_corpus(c.dir.path(), default_extensions(), 0).fingerprint;
  EXPECT_EQ(fp, list_corpus(c.dir.path(), default_extensions(), 0).fingerprint);
  // The same set of extensions in another order selects the same files: same fingerprint.
  auto reversed = default_extensions();
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(fp, list_corpus(c.dir.path(), reversed, 0).fingerprint);
  EXPECT_NE(fp, list_corpus(c.dir.path(), {".h", ".cpp", ".hpp", ".txt"}, 0).fingerprint);
  set_mtime(c.dir / "a.h", 1000000000);
  const uint64_t fp2 = list_corpus(c.dir.path(), default_extensions(), 0).fingerprint;
  EXPECT_NE(fp, fp2);
  fs::rename(c.dir / "a.h", c.dir / "a2.h");
  EXPECT_NE(fp2, list_corpus(c.dir.path(), default_extensions(), 0).fingerprint);
}
