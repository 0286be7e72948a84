// tests/data/synthetic_source_test.cpp: the synthetic source (uniform and Zipf ids) (data/source.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataSynthetic*'
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

TEST(DataSyntheticTest, UniformIdsInRangeDeterministicAndWithoutFiles) {
  DataOptions o;
  o.source = "synthetic";
  o.corpus_dir = "/nonexistent/never/read";
  o.cache_dir = "/nonexistent/never/written";
  o.vocab = 300;
  o.seq_len = 64;
  o.batch_size = 4;
  o.seed = 5;
  const auto a = open_data(o);
  const auto b = open_data(o);
  EXPECT_EQ(a->rows_per_epoch(), 0u);
  EXPECT_EQ(a->description().source, "synthetic");
  EXPECT_EQ(a->description().synthetic_distribution, "uniform");
  BatchIterator ia(*a, {}), ib(*b, {});
  std::set<int32_t> seen;
  for (int i = 0; i < 20; ++i) {
    const Batch x = ia.next();
    EXPECT_TRUE(same_batch(x, ib.next()));
    for (int32_t t : x.tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 300);
      seen.insert(t);
    }
    for (uint8_t m : x.loss_mask) ASSERT_EQ(m, 1);
    EXPECT_EQ(x.state_after, (DataState{0, static_cast<uint64_t>(4 * (i + 1))}));
  }
  EXPECT_GT(seen.size(), 290u);  // 5200 draws over 300 ids
  o.seed = 6;
  const auto other_seed = open_data(o);
  BatchIterator ic(*other_seed, {});
  BatchIterator ia2(*a, {});
  EXPECT_NE(ia2.next().tokens, ic.next().tokens);
  // Resume: any state gives the rows a continuous walk would.
  BatchIterator from8(*a, {0, 8});
  BatchIterator cont(*a, {});
  cont.next();
  cont.next();
  EXPECT_TRUE(same_batch(from8.next(), cont.next()));
}

TEST(DataSyntheticTest, HandComputedFirstIds) {
  DataOptions o;
  o.source = "synthetic";
  o.vocab = 512;
  o.seq_len = 5;
  o.batch_size = 1;
  o.seed = 5;
  const auto src = open_data(o);
  BatchIterator it(*src, {});
  // splitmix64 seeded with derive_seed(derive_seed(5, 2, 0), 2, 0), below(512), worked out by hand.
  EXPECT_EQ(it.next().tokens, (std::vector<int32_t>{272, 163, 451, 437, 408, 135}));
}

TEST(DataSyntheticTest, ZipfIsSkewedTowardsLowIds) {
  DataOptions o;
  o.source = "synthetic";
  o.synthetic_distribution = "zipf";
  o.vocab = 1000;
  o.seq_len = 128;
  o.batch_size = 16;
  o.seed = 11;
  const auto src = open_data(o);
  EXPECT_EQ(src->description().zipf_exponent, 1.1);
  BatchIterator it(*src, {});
  std::vector<int64_t> count(1000, 0);
  for (int i = 0; i < 8; ++i) {
    const Batch b = it.next();
    for (int32_t t : b.tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 1000);
      ++count[static_cast<size_t>(t)];
    }
  }
  // P(0)/P(999) = 1000^1.1 ~ 2000; with ~16.5k draws id 0 appears ~2000 times, id 999 about once.
  EXPECT_GT(count[0], 1000);
  EXPECT_GT(count[0], 50 * (count[999] + 1));
  EXPECT_GT(count[0], count[1]);
  EXPECT_GT(count[1], count[10]);
  const auto reopened = open_data(o);
  BatchIterator again(*reopened, {});
  BatchIterator first(*src, {});
  EXPECT_TRUE(same_batch(again.next(), first.next()));
  o.synthetic_distribution = "uniform";
  EXPECT_NE(open_data(o)->description().fingerprint, src->description().fingerprint);

  const ZipfTable z(10, 1.1);
  EXPECT_EQ(z.draw(0.0), 0);
  EXPECT_EQ(z.draw(0.9999999999), 9);
}

// Synthetic validation rows come from a seed domain of their own: reproducible, and none of them is a
// training row of the first epochs.
TEST(DataSyntheticTest, ValidationRowsAreTheirOwn) {
  DataOptions o;
  o.source = "synthetic";
  o.seq_len = 16;
  o.batch_size = 2;
  o.seed = 3;
  o.validation_fraction = 0.05;
  const auto src = open_data(o);
  ASSERT_EQ(src->validation_rows(), DataSource::kUnbounded);
  std::set<std::vector<int32_t>> training;
  std::vector<int32_t> row(17);
  std::vector<uint8_t> mask(16);
  for (uint64_t epoch = 0; epoch < 2; ++epoch)
    for (uint64_t r = 0; r < 64; ++r) {
      src->fill_row(epoch, r, row.data(), mask.data());
      training.insert(row);
    }
  for (uint64_t r = 0; r < 64; ++r) {
    src->fill_validation_row(r, row.data(), mask.data());
    EXPECT_EQ(training.count(row), 0u) << "validation row " << r;
    std::vector<int32_t> again(17);
    open_data(o)->fill_validation_row(r, again.data(), mask.data());
    EXPECT_EQ(again, row);
  }
  o.validation_fraction = 0;
  EXPECT_EQ(open_data(o)->validation_rows(), 0u);
}
