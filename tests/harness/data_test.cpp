// tests/harness/data_test.cpp: the data pipeline (harness/data/): tokenizer, corpus walk and cap,
// token cache, packing, deterministic shuffle, batch iteration and resume, the loader thread, the
// synthetic source and every bad-input message. Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: harness_tests --gtest_filter='Data*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "receipts/temp_dir.h"
#include "harness/data/corpus.h"
#include "harness/data/errors.h"
#include "harness/data/hash.h"
#include "harness/data/loader.h"
#include "harness/data/packing.h"
#include "harness/data/rng.h"
#include "harness/data/source.h"
#include "harness/data/tokenizer.h"

namespace fs = std::filesystem;
using namespace ablate::data;
using ::testing::HasSubstr;

namespace {

using ablate::receipts::TempDir;

void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << content;
}

void set_mtime(const fs::path& p, int64_t seconds) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = seconds;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), ts, 0), 0);
}

std::vector<std::string> rel_paths(const CorpusListing& l) {
  std::vector<std::string> out;
  for (const auto& f : l.files) out.push_back(f.rel_path);
  return out;
}

// A corpus of three documents with known text, and options that read it with a private cache.
struct SmallCorpus {
  TempDir dir;
  TempDir cache;
  SmallCorpus() {
    write_file(dir / "a.h", "int a;\n");            // 7 bytes
    write_file(dir / "b.cpp", "void b() {}\n");     // 12 bytes
    write_file(dir / "c/d.hpp", "struct D { int x; };\n");  // 21 bytes
  }
  DataOptions options(int64_t seq_len = 4, int64_t batch = 3, uint64_t seed = 7) const {
    DataOptions o;
    o.corpus_dir = dir.path().string();
    o.cache_dir = cache.path().string();
    o.seq_len = seq_len;
    o.batch_size = batch;
    o.seed = seed;
    o.vocab = 512;
    return o;
  }
  // The joined stream: each document followed by kEod.
  static std::vector<Token> stream() {
    std::vector<Token> s;
    for (const char* doc : {"int a;\n", "void b() {}\n", "struct D { int x; };\n"}) {
      append_encoded(doc, s);
      s.push_back(kEod);
    }
    return s;
  }
};

bool same_batch(const Batch& a, const Batch& b) {
  return a.batch_size == b.batch_size && a.seq_len == b.seq_len && a.tokens == b.tokens &&
         a.loss_mask == b.loss_mask && a.state_after == b.state_after;
}

std::string error_of(const DataOptions& o) {
  try {
    open_data(o);
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
TEST(DataRngTest, SplitMix64ReferenceValues) {
  // Seed 0: the published splitmix64 sequence.
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(g.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(g.next(), 0x06c45d188009454fULL);
  EXPECT_EQ(derive_seed(42, kShuffleDomain, 0), 0x2c192542774d0c07ULL);
}

TEST(DataRngTest, BoundedDrawsAreInRangeAndFixed) {
  SplitMix64 g(123);
  std::vector<uint64_t> got;
  for (int i = 0; i < 8; ++i) got.push_back(g.below(10));
  EXPECT_EQ(got, (std::vector<uint64_t>{7, 9, 8, 6, 6, 6, 9, 4}));  // computed by hand from the algorithm
  SplitMix64 h(5);
  for (int i = 0; i < 10000; ++i) {
    EXPECT_LT(h.below(3), 3u);
    const double u = h.unit();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_EQ(h.below(1), 0u);
}

TEST(DataShuffleTest, FixedSeedGivesHandComputedOrder) {
  // Values worked out from splitmix64 + Lemire + Fisher-Yates by hand (a Python transcription of
  // rng.cpp): a standard-library change cannot alter them.
  EXPECT_EQ(shuffled_order(10, 42, 0), (std::vector<uint64_t>{3, 5, 1, 8, 9, 7, 2, 0, 4, 6}));
  EXPECT_EQ(shuffled_order(10, 42, 1), (std::vector<uint64_t>{3, 2, 0, 4, 7, 1, 6, 9, 8, 5}));
  const auto big = shuffled_order(1000, 7, 0);
  EXPECT_EQ(std::vector<uint64_t>(big.begin(), big.begin() + 8),
            (std::vector<uint64_t>{269, 738, 735, 495, 391, 176, 195, 350}));
}

TEST(DataShuffleTest, DeterministicPermutationThatDependsOnSeedAndEpoch) {
  const auto a = shuffled_order(5000, 1, 0);
  EXPECT_EQ(a, shuffled_order(5000, 1, 0));
  EXPECT_NE(a, shuffled_order(5000, 2, 0));
  EXPECT_NE(a, shuffled_order(5000, 1, 1));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_TRUE(shuffled_order(0, 1, 0).empty());
  EXPECT_EQ(shuffled_order(1, 1, 0), (std::vector<uint64_t>{0}));
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
TEST(DataCorpusTest, WalkOrderIsBytewiseAndFiltersExtensions) {
  TempDir d;
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
  TempDir d;
  write_file(d / "a.h", "a\n");
  write_file(d / "sub/b.h", "b\n");
  fs::create_directory_symlink(d.path(), d / "sub/loop");   // sub/loop -> root: a cycle
  fs::create_directory_symlink(d / "sub", d / "alias");      // a second path to sub/
  fs::create_symlink(d / "a.h", d / "link.h");               // a file link: same text twice
  fs::create_symlink(d / "missing.h", d / "dangling.h");
  const CorpusListing l = list_corpus(d.path(), default_extensions(), 0);
  EXPECT_EQ(rel_paths(l), (std::vector<std::string>{"a.h", "sub/b.h"}));
  // The corpus folder itself may be a link, and spellings of one folder give one root and fingerprint.
  TempDir other;
  fs::create_directory_symlink(d.path(), other / "corpus");
  EXPECT_EQ(rel_paths(list_corpus(other / "corpus", default_extensions(), 0)), rel_paths(l));
  const CorpusListing respelled = list_corpus(d.path().string() + "/sub/.././", default_extensions(), 0);
  EXPECT_EQ(respelled.root, d.path());
  EXPECT_EQ(respelled.fingerprint, l.fingerprint);
}

TEST(DataCorpusTest, CapNeverCutsADocument) {
  TempDir d;
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

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
TEST(DataSourceTest, FirstEpochFollowsTheSeededOrderOverPackedRows) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));
  const auto stream = SmallCorpus::stream();  // 43 ids -> ceil(42/4) = 11 rows
  const PackedRows rows(stream, 4);
  ASSERT_EQ(src->rows_per_epoch(), 11u);
  const auto order = shuffled_order(11, 7, 0);
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

// ---------------------------------------------------------------------------------------------
TEST(DataCacheTest, SecondOpenHitsTheCache) {
  SmallCorpus c;
  const auto first = open_data(c.options());
  EXPECT_FALSE(first->description().cache_hit);
  EXPECT_THAT(first->description().cache_note, HasSubstr("no cache file"));
  EXPECT_TRUE(fs::exists(first->description().cache_file));
  EXPECT_EQ(fs::path(first->description().cache_file).parent_path(), c.cache.path());
  const auto second = open_data(c.options());
  EXPECT_TRUE(second->description().cache_hit);
  EXPECT_EQ(second->description().cache_note, "");
  EXPECT_EQ(second->description().fingerprint, first->description().fingerprint);
  BatchIterator a(*first, {}), b(*second, {});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_batch(a.next(), b.next()));
  // The hit maps the verified payload: exactly the joined stream.
  const CorpusListing l = list_corpus(c.dir.path(), default_extensions(), 0);
  const CacheRead r = read_token_cache(first->description().cache_file, l.fingerprint, l.token_count());
  ASSERT_TRUE(r.ok) << r.why;
  EXPECT_TRUE(r.tokens.mapped());
  const auto expect = SmallCorpus::stream();
  EXPECT_EQ(std::vector<Token>(r.tokens.span().begin(), r.tokens.span().end()), expect);
  EXPECT_FALSE(read_token_cache(first->description().cache_file, l.fingerprint + 1, l.token_count()).ok);
  // Only the cache file: no temp files left behind.
  int n = 0;
  for (const auto& e : fs::directory_iterator(c.cache.path())) {
    EXPECT_THAT(e.path().filename().string(), ::testing::MatchesRegex("corpus-[0-9a-f]{16}\\.tokens"));
    ++n;
  }
  EXPECT_EQ(n, 1);
}

TEST(DataCacheTest, RebuiltAfterAFileChanges) {
  SmallCorpus c;
  const std::string fp0 = open_data(c.options())->description().fingerprint;
  set_mtime(c.dir / "b.cpp", 1500000000);  // same size, other mtime
  const auto after_touch = open_data(c.options());
  EXPECT_FALSE(after_touch->description().cache_hit);
  EXPECT_NE(after_touch->description().fingerprint, fp0);
  EXPECT_TRUE(open_data(c.options())->description().cache_hit);

  write_file(c.dir / "b.cpp", "void bb() {}\n");  // other size and content
  set_mtime(c.dir / "b.cpp", 1500000000);         // even with the old mtime
  const auto after_edit = open_data(c.options());
  EXPECT_FALSE(after_edit->description().cache_hit);
  EXPECT_EQ(after_edit->description().token_count, 44u);
  BatchIterator it(*after_edit, {});
  std::string all;
  for (uint64_t i = 0; i < after_edit->rows_per_epoch(); ++i) {
    const Batch b = it.next();
    for (int32_t t : b.tokens) all += t < 256 ? static_cast<char>(t) : '#';
  }
  EXPECT_THAT(all, HasSubstr("bb()"));
}

TEST(DataCacheTest, CorruptOrTruncatedCacheIsRebuilt) {
  SmallCorpus c;
  const auto first = open_data(c.options());
  const fs::path file = first->description().cache_file;
  const auto size = fs::file_size(file);
  {  // flip one payload byte
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 3));
    f.put('\x7f');
  }
  const auto after_flip = open_data(c.options());
  EXPECT_FALSE(after_flip->description().cache_hit);
  EXPECT_THAT(after_flip->description().cache_note, HasSubstr("payload checksum mismatch"));
  BatchIterator a(*first, {}), b(*after_flip, {});
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(same_batch(a.next(), b.next()));  // rebuilt from the files
  EXPECT_TRUE(open_data(c.options())->description().cache_hit);

  fs::resize_file(file, size - 10);  // a half-written file
  const auto after_cut = open_data(c.options());
  EXPECT_FALSE(after_cut->description().cache_hit);
  EXPECT_THAT(after_cut->description().cache_note, HasSubstr("file size"));

  {  // damage the header
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x01');
  }
  EXPECT_THAT(open_data(c.options())->description().cache_note, HasSubstr("header checksum mismatch"));
  write_file(file, "garbage");
  EXPECT_THAT(open_data(c.options())->description().cache_note, HasSubstr("truncated header"));
  EXPECT_TRUE(open_data(c.options())->description().cache_hit);
}

TEST(DataCacheTest, UnwritableCacheIsNotFatal) {
  SmallCorpus c;
  DataOptions o = c.options();
  write_file(c.cache / "blocker", "x");
  o.cache_dir = (c.cache / "blocker" / "sub").string();  // a path under a regular file
  const auto src = open_data(o);
  EXPECT_FALSE(src->description().cache_hit);
  EXPECT_THAT(src->description().cache_note, HasSubstr("cache not written"));
  EXPECT_EQ(src->rows_per_epoch(), 11u);
}

TEST(DataCacheTest, DefaultCacheDirFollowsEnvironment) {
  const char* old = std::getenv("ABLATE_CACHE_DIR");
  const std::string saved = old ? old : "";
  ::setenv("ABLATE_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(default_cache_dir(), fs::path("/some/where"));
  ::setenv("ABLATE_CACHE_DIR", "", 1);
  EXPECT_THAT(default_cache_dir().string(), ::testing::EndsWith(".cache/ablate/corpus"));
  if (old) {
    ::setenv("ABLATE_CACHE_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("ABLATE_CACHE_DIR");
  }
  EXPECT_EQ(cache_file_for("/c", 0xabcULL), fs::path("/c/corpus-0000000000000abc.tokens"));
}

// ---------------------------------------------------------------------------------------------
namespace {

// Rows are their index repeated; optionally throws at a given row, or sleeps per row.
class TestSource final : public DataSource {
 public:
  TestSource(int64_t seq_len, int64_t batch, uint64_t rows, int64_t throw_at = -1, int sleep_ms = 0)
      : DataSource(make_opts(seq_len, batch), DataDescription{}), rows_(rows), throw_at_(throw_at), sleep_ms_(sleep_ms) {}
  uint64_t rows_per_epoch() const override { return rows_; }
  bool shuffled() const override { return true; }
  void fill_row(uint64_t epoch, uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    const int64_t n = filled_++;
    if (sleep_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (throw_at_ >= 0 && n >= throw_at_) throw std::runtime_error("disk on fire at row " + std::to_string(row));
    for (int64_t i = 0; i <= opts_.seq_len; ++i) tokens[i] = static_cast<int32_t>(row + 1000 * epoch);
    for (int64_t i = 0; i < opts_.seq_len; ++i) mask[i] = 1;
  }
  mutable std::atomic<int64_t> filled_{0};

 private:
  static DataOptions make_opts(int64_t seq_len, int64_t batch) {
    DataOptions o;
    o.seq_len = seq_len;
    o.batch_size = batch;
    o.seed = 3;
    return o;
  }
  uint64_t rows_;
  int64_t throw_at_;
  int sleep_ms_;
};

}  // namespace

TEST(DataLoaderTest, SameBatchesAsDirectIterationAndResume) {
  SmallCorpus c;
  const auto src = open_data(c.options(4, 3, 7));
  BatchIterator it(*src, {});
  std::vector<Batch> direct;
  for (int i = 0; i < 12; ++i) direct.push_back(it.next());
  {
    Loader loader(*src, {}, 2);
    for (int i = 0; i < 12; ++i) {
      const LoadedBatch lb = loader.next();
      EXPECT_GE(lb.wait_ns, 0);
      EXPECT_TRUE(same_batch(lb.batch, direct[static_cast<size_t>(i)])) << i;
    }
  }
  Loader resumed(*src, direct[4].state_after, 4);
  for (int i = 5; i < 12; ++i) EXPECT_TRUE(same_batch(resumed.next().batch, direct[static_cast<size_t>(i)])) << i;
  EXPECT_THROW(Loader(*src, {0, 99}, 4), DataError);
}

TEST(DataLoaderTest, ProducerErrorSurfacesInNextAfterEarlierBatches) {
  TestSource src(8, 2, 100, /*throw_at=*/5);  // rows 0-4 fine: batches 0 and 1 complete, batch 2 fails
  Loader loader(src, {}, 4);
  EXPECT_EQ(loader.next().batch.state_after, (DataState{0, 2}));
  EXPECT_EQ(loader.next().batch.state_after, (DataState{0, 4}));
  EXPECT_THAT([&] { loader.next(); }, ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("disk on fire")));
  EXPECT_THROW(loader.next(), std::runtime_error);  // stays failed, does not hang
}

TEST(DataLoaderTest, EarlyDestructionDoesNotHang) {
  TestSource src(16, 2, 1000);
  const auto t0 = std::chrono::steady_clock::now();
  { Loader never_read(src, {}, 1); }
  {
    Loader one(src, {}, 2);
    one.next();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the producer block on a full queue
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Bounded by the queue depths (1 and 2, plus one batch in hand each, 2 rows a batch), not the epoch.
  EXPECT_LE(src.filled_.load(), 2 * ((1 + 1) + (1 + 2 + 1)));
}

TEST(DataLoaderTest, WaitTimeIsReportedWhenTheProducerIsSlow) {
  TestSource src(4, 1, 100, -1, /*sleep_ms=*/30);
  Loader loader(src, {}, 1);
  loader.next();
  const LoadedBatch lb = loader.next();  // the producer needs ~30 ms per batch
  EXPECT_GT(lb.wait_ns, 5'000'000);
  // The source sees epoch and shuffled row: the ids are those of shuffled_order(100, 3, 0).
  EXPECT_EQ(lb.batch.tokens[0], static_cast<int32_t>(shuffled_order(100, 3, 0)[1]));
}

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
TEST(DataErrorTest, MessagesSayWhatWhereAndHowToFix) {
  TempDir d;
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
            "the corpus has 900 tokens but one row needs seq_len+1 = 2049: lower data.seq_len or add files (or "
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
  EXPECT_THAT(error_of(o), HasSubstr("data.seq_len must be at least 1 (got 0)"));
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
