// tests/data/packing_test.cpp: packing the stream into rows of T+1 ids (data/packing.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataPacking*'
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

TEST(DataPackingTest, RowsOverlapByOneAndTheLastRowIsPadded) {
  std::vector<Token> s(10);
  for (int i = 0; i < 10; ++i) s[i] = static_cast<Token>(100 + i);
  const PackedRows rows(s, 4);
  ASSERT_EQ(rows.size(), 3u);  // ceil((10-1)/4)
  std::vector<int32_t> t(5);
  std::vector<uint8_t> m(4);
  rows.fill(0, t.data(), m.data());
  EXPECT_EQ(t, (std::vector<int32_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(m, (std::vector<uint8_t>{1, 1, 1, 1}));
  rows.fill(1, t.data(), m.data());
  EXPECT_EQ(t, (std::vector<int32_t>{104, 105, 106, 107, 108}));  // starts where row 0's last target was
  EXPECT_EQ(m, (std::vector<uint8_t>{1, 1, 1, 1}));
  rows.fill(2, t.data(), m.data());
  EXPECT_EQ(t, (std::vector<int32_t>{108, 109, kPad, kPad, kPad}));
  EXPECT_EQ(m, (std::vector<uint8_t>{1, 0, 0, 0}));  // zero exactly where the target is padding
}

TEST(DataPackingTest, ExactFitHasNoPaddingAndTooShortIsAnError) {
  std::vector<Token> s(9, 'x');
  const PackedRows rows(s, 4);
  ASSERT_EQ(rows.size(), 2u);
  std::vector<int32_t> t(5);
  std::vector<uint8_t> m(4);
  rows.fill(1, t.data(), m.data());
  EXPECT_EQ(t, (std::vector<int32_t>{'x', 'x', 'x', 'x', 'x'}));
  EXPECT_EQ(m, (std::vector<uint8_t>{1, 1, 1, 1}));
  EXPECT_EQ(PackedRows(std::span<const Token>(s.data(), 5), 4).size(), 1u);
  EXPECT_THAT([&] { PackedRows(std::span<const Token>(s.data(), 4), 4); },
              ::testing::ThrowsMessage<DataError>(HasSubstr("has 4 tokens but one row needs seq_len+1 = 5")));
}
