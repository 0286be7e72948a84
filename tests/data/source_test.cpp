// tests/data/source_test.cpp: the corpus source: seeded epochs, resume, the description for the receipt (data/source.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataSource*'
#include <fmt/format.h>
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

TEST(DataSourceTest, FirstEpochFollowsTheSeededOrderOverPackedRows) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));
  const auto stream = SmallCorpus::stream();  // 43 ids -> ceil(42/4) = 11 rows
  const PackedRows rows(stream, 4);
  ASSERT_EQ(src->rows_per_epoch(), 11u);
  const auto order = ablate::base::shuffled_order(11, 7, 0);
  BatchIterator it(*src, {});
  const Batch b = it.next();
  EXPECT_EQ(b.batch_size, 3);
  EXPECT_EQ(b.seq_len, 4);
  ASSERT_EQ(b.tokens.size(), 15u);
  ASSERT_EQ(b.loss_mask.size(), 12u);
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> t(5);
    std::vector<uint8_t> m(4);
    rows.fill(order[static_cast<size_t>(r)], t.data(), m.data());
    EXPECT_EQ(std::vector<int32_t>(b.tokens.begin() + r * 5, b.tokens.begin() + r * 5 + 5), t) << r;
    EXPECT_EQ(std::vector<uint8_t>(b.loss_mask.begin() + r * 4, b.loss_mask.begin() + r * 4 + 4), m) << r;
  }
  EXPECT_EQ(b.state_after, (DataState{0, 3}));
}

TEST(DataSourceTest, EpochsWrapAndReshuffle) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));  // 11 rows, batches of 3
  BatchIterator it(*src, {});
  std::vector<Batch> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(it.next());  // 24 rows: epochs 0, 1 and 2 rows of epoch 2
  EXPECT_EQ(batches[2].state_after, (DataState{0, 9}));
  EXPECT_EQ(batches[3].state_after, (DataState{1, 1}));  // the batch straddles the epoch boundary
  EXPECT_EQ(batches[7].state_after, (DataState{2, 2}));
  // Every row appears once per epoch: the multiset of rows of epoch 0 equals that of epoch 1, the orders differ.
  auto row = [&](int k) {
    const Batch& b = batches[static_cast<size_t>(k / 3)];
    const int r = k % 3;
    return std::vector<int32_t>(b.tokens.begin() + r * 5, b.tokens.begin() + r * 5 + 5);
  };
  std::multiset<std::vector<int32_t>> e0, e1;
  std::vector<std::vector<int32_t>> o0, o1;
  for (int k = 0; k < 11; ++k) {
    e0.insert(row(k));
    o0.push_back(row(k));
    e1.insert(row(11 + k));
    o1.push_back(row(11 + k));
  }
  EXPECT_EQ(e0, e1);
  EXPECT_NE(o0, o1);
  // Normalised state at an exact epoch end.
  const auto src11 = open_data(c.options(4, 11, 7));
  BatchIterator it11(*src11, {});
  EXPECT_EQ(it11.next().state_after, (DataState{1, 0}));
}

TEST(DataSourceTest, SameSeedSameBatchesOtherSeedOtherBatches) {
  SmallCorpus c;
  const auto a = open_data(c.options(4, 3, 7));
  const auto b = open_data(c.options(4, 3, 7));
  const auto other = open_data(c.options(4, 3, 8));
  BatchIterator ia(*a, {}), ib(*b, {}), io(*other, {});
  bool any_diff = false;
  for (int i = 0; i < 6; ++i) {
    const Batch x = ia.next();
    EXPECT_TRUE(same_batch(x, ib.next())) << i;
    any_diff |= x.tokens != io.next().tokens;
  }
  EXPECT_TRUE(any_diff);
}

TEST(DataSourceTest, ResumeFromStateEqualsContinuing) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));
  BatchIterator it(*src, {});
  std::vector<Batch> all;
  for (int i = 0; i < 9; ++i) all.push_back(it.next());
  for (int k : {0, 2, 3, 5}) {
    // Through JSON, as a checkpoint would store it.
    const nlohmann::json j = all[static_cast<size_t>(k)].state_after;
    BatchIterator resumed(*src, j.get<DataState>());
    for (int i = k + 1; i < 9; ++i) EXPECT_TRUE(same_batch(resumed.next(), all[static_cast<size_t>(i)])) << k << " " << i;
  }
  // A cursor at the epoch end is the start of the next epoch; past it is an error.
  BatchIterator at_end(*src, {0, 11});
  EXPECT_EQ(at_end.state(), (DataState{1, 0}));
  EXPECT_THAT([&] { BatchIterator(*src, {0, 12}); },
              ::testing::ThrowsMessage<DataError>(HasSubstr("lies beyond the 11 rows of this data")));
}

TEST(DataSourceTest, DescriptionForTheReceipt) {
  SmallCorpus c;
  const auto src = open_data(c.options());
  const DataDescription& d = src->description();
  EXPECT_EQ(d.source, "corpus");
  EXPECT_EQ(fs::path(d.corpus_dir), c.dir.path());
  EXPECT_EQ(d.file_count, 3u);
  EXPECT_EQ(d.source_bytes, 40u);
  EXPECT_EQ(d.token_count, 43u);
  EXPECT_EQ(d.fingerprint.size(), 16u);
  EXPECT_EQ(d.rows_per_epoch, 11u);
  EXPECT_FALSE(d.cache_hit);
  EXPECT_GE(d.prep_seconds, 0.0);
  const nlohmann::json j = to_json(d);
  for (const char* key : {"source", "corpus_dir", "file_count", "source_bytes", "token_count", "fingerprint",
                          "cache_hit", "prep_seconds", "tokenizer_version", "rows_per_epoch"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
}

// The held-out split: each document whole to one side by the hash of its path, the sides' streams the
// documents in corpus order with their kEod, nothing on both sides; recorded in the description.
TEST(DataSourceTest, ValidationHoldsOutWholeDocumentsByPathHash) {
  ablate::base::TempDir dir, cache;
  std::vector<std::string> paths;
  for (int i = 0; i < 40; ++i) {
    paths.push_back(fmt::format("d{:02}.h", i));
    write_file(dir / paths.back(), fmt::format("int document_{} = {};\n", i, i * 7));
  }
  DataOptions o;
  o.corpus_dir = dir.path().string();
  o.cache_dir = cache.path().string();
  o.seq_len = 8;
  o.batch_size = 2;
  o.validation_fraction = 0.25;
  std::vector<Token> train, held;
  uint64_t held_docs = 0;
  for (int i = 0; i < 40; ++i) {
    const bool out = held_out_document(paths[static_cast<size_t>(i)], o.validation_fraction);
    if (out) {
      EXPECT_TRUE(held_out_document(paths[static_cast<size_t>(i)], 0.5)) << "held out at 0.25, so at 0.5 too";
    }
    auto& side = out ? held : train;
    append_encoded(fmt::format("int document_{} = {};\n", i, i * 7), side);
    side.push_back(kEod);
    held_docs += out ? 1 : 0;
  }
  ASSERT_GT(held_docs, 0u);
  ASSERT_LT(held_docs, 40u);
  const auto src = open_data(o);
  const PackedRows want_train(train, 8), want_held(held, 8);
  ASSERT_EQ(src->rows_per_epoch(), want_train.size());
  ASSERT_EQ(src->validation_rows(), want_held.size());
  std::vector<int32_t> got(9), want(9);
  std::vector<uint8_t> got_mask(8), want_mask(8);
  for (uint64_t r = 0; r < want_train.size(); ++r) {
    src->fill_row(0, r, got.data(), got_mask.data());
    want_train.fill(r, want.data(), want_mask.data());
    EXPECT_EQ(got, want) << "training row " << r;
  }
  for (uint64_t r = 0; r < want_held.size(); ++r) {
    src->fill_validation_row(r, got.data(), got_mask.data());
    want_held.fill(r, want.data(), want_mask.data());
    EXPECT_EQ(got, want) << "validation row " << r;
    EXPECT_EQ(got_mask, want_mask) << "validation row " << r;
  }
  const auto& d = src->description();
  EXPECT_EQ(d.validation_fraction, 0.25);
  EXPECT_EQ(d.validation_documents, held_docs);
  EXPECT_EQ(d.validation_tokens, held.size());
  EXPECT_EQ(to_json(d)["validation_rows"], want_held.size());

  // No split: every document trains, as before, and there is nothing to evaluate on.
  o.validation_fraction = 0;
  const auto whole = open_data(o);
  EXPECT_EQ(whole->validation_rows(), 0u);
  EXPECT_FALSE(to_json(whole->description()).contains("validation_fraction"));
  EXPECT_THROW(whole->fill_validation_row(0, got.data(), got_mask.data()), std::logic_error);
}

TEST(DataSourceTest, AValidationSplitThatLeavesASideEmptyIsRefused) {
  SmallCorpus c;
  auto o = c.options();
  o.validation_fraction = 1e-9;  // holds out none of the three documents
  EXPECT_THAT(error_of(o), HasSubstr("data.validation_fraction = 1e-09 holds out 0 of the 3 documents"));
  EXPECT_THAT(error_of(o), HasSubstr("raise data.validation_fraction or add documents"));
  o.validation_fraction = 0.75;
  EXPECT_THAT(error_of(o), HasSubstr("data.validation_fraction must be between 0 and 0.5 (got 0.75)"));
}
