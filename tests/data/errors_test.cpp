// tests/data/errors_test.cpp: every bad-input message says what, where and how to fix (data/errors.h). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataError*'
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

TEST(DataErrorTest, MessagesSayWhatWhereAndHowToFix) {
  ablate::base::TempDir d;
  DataOptions o;
  o.cache_dir = (d / "cache").string();
  static_assert(std::is_base_of_v<std::runtime_error, DataError>);

  o.corpus_dir = (d / "missing").string();
  EXPECT_EQ(error_of(o), "data.corpus_dir " + (d / "missing").string() +
                             " does not exist: point data.corpus_dir at a folder of C/C++ sources or use "
                             "data.source = \"synthetic\"");

  write_file(d / "file.h", "x");
  o.corpus_dir = (d / "file.h").string();
  EXPECT_THAT(error_of(o), HasSubstr("data.corpus_dir " + (d / "file.h").string() + " is not a folder"));

  fs::create_directories(d / "empty/sub");
  write_file(d / "empty/readme.txt", "no code here");
  o.corpus_dir = (d / "empty").string();
  EXPECT_EQ(error_of(o), "no .h .hh .hpp .hxx .c .cc .cpp .cu .cuh files under " + (d / "empty").string() +
                             ": point data.corpus_dir at a folder of C/C++ sources or use data.source = \"synthetic\"");

  write_file(d / "small/a.h", std::string(899, 'x'));  // 899 bytes + kEod = 900 tokens
  o.corpus_dir = (d / "small").string();
  o.seq_len = 2048;
  EXPECT_EQ(error_of(o),
            "the corpus has 900 tokens but one row needs seq_len+1 = 2049: lower model.seq_len or add files (or "
            "raise data.max_bytes)");

  o.seq_len = 128;
  o.vocab = 257;
  EXPECT_THAT(error_of(o), HasSubstr("data.vocab = 257 is too small: the byte-level tokenizer needs at least 258"));
  o.source = "synthetic";
  EXPECT_THAT(error_of(o), HasSubstr("data.vocab = 257 is too small"));
  o.vocab = 512;

  o.source = "files";
  EXPECT_EQ(error_of(o), "data.source = \"files\" is not known: use \"corpus\" or \"synthetic\"");
  o.source = "synthetic";
  o.synthetic_distribution = "normal";
  EXPECT_THAT(error_of(o), HasSubstr("data.synthetic_distribution = \"normal\" is not known"));
  o.synthetic_distribution = "zipf";
  o.zipf_exponent = 0;
  EXPECT_THAT(error_of(o), HasSubstr("data.zipf_exponent must be a positive number"));
  o.zipf_exponent = 1.1;
  o.seq_len = 0;
  EXPECT_THAT(error_of(o), HasSubstr("model.seq_len must be at least 1 (got 0)"));
  o.seq_len = 8;
  o.batch_size = 0;
  EXPECT_THAT(error_of(o), HasSubstr("data.batch_size must be at least 1"));
  o.batch_size = 1;
  o.prefetch = 0;
  EXPECT_THAT(error_of(o), HasSubstr("data.prefetch must be at least 1"));
  o.prefetch = 4;
  o.source = "corpus";
  o.extensions = {};
  EXPECT_THAT(error_of(o), HasSubstr("data.extensions is empty"));
  o.extensions = {".h", ""};
  EXPECT_THAT(error_of(o), HasSubstr("data.extensions has an empty entry"));
}
