// tests/data/corpus_cache_test.cpp: the on-disk token cache: hit, rebuild after a change, corruption, unwritable folders (data/corpus.cpp, data/token_buffer.cpp). Small corpora are written to temp folders; nothing
// touches ~/.cache. Run: build/tests/data_tests --gtest_filter='DataCache*'
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
