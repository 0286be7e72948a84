// tests/data/hash_test.cpp: FNV-1a and the checksum (data/hash.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataHash*'
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

TEST(DataHashTest, Fnv1aKnownVectors) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Length-prefixed strings: the split between fields matters.
  EXPECT_NE(Fnv1a64().str("ab").str("c").value(), Fnv1a64().str("a").str("bc").value());
  EXPECT_EQ(hex64(0xaf63dc4c8601ec8cULL), "af63dc4c8601ec8c");
  EXPECT_EQ(hex64(1), "0000000000000001");
}

TEST(DataHashTest, ChecksumSeesEveryByteAndTheLength) {
  std::vector<unsigned char> buf(1000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 31);
  const uint64_t base = checksum64(buf.data(), buf.size());
  for (size_t pos : {size_t{0}, size_t{9}, size_t{31}, size_t{500}, size_t{990}, size_t{999}}) {  // lanes and tail
    auto copy = buf;
    copy[pos] ^= 1;
    EXPECT_NE(checksum64(copy.data(), copy.size()), base) << pos;
  }
  std::vector<unsigned char> zeros(64, 0);
  EXPECT_NE(checksum64(zeros.data(), 63), checksum64(zeros.data(), 64));
}
