// tests/data/tokenizer_test.cpp: the byte-level tokenizer and its special ids (data/tokenizer.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataTokenizer*'
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

TEST(DataTokenizerTest, BytesAndSpecialIds) {
  EXPECT_EQ(kEod, 256);
  EXPECT_EQ(kPad, 257);
  EXPECT_EQ(kMinVocab, 258);
  EXPECT_EQ(encode(std::string("A\n\0\xff", 4)), (std::vector<Token>{65, 10, 0, 255}));
  EXPECT_TRUE(encode("").empty());
  std::vector<Token> ids = encode("ab");
  ids.push_back(kEod);
  ids.push_back(kPad);
  ids.push_back(300);
  EXPECT_EQ(decode(ids), "ab<eod><pad><id 300>");
  EXPECT_EQ(decode(encode("x\xc3\xa9")), "x\xc3\xa9");  // UTF-8 passes through as bytes
}
