// tests/data/data_fixtures.h: what the data pipeline's tests share: files written into temp folders,
// a small three-document corpus with a private cache, batch equality and the message of a DataError.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/errors.h"
#include "data/source.h"
#include "data/tokenizer.h"
#include "base/temp_dir.h"

namespace ablate::data::test_fixtures {

namespace fs = std::filesystem;
using ablate::base::TempDir;

inline void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << content;
}

inline void set_mtime(const fs::path& p, int64_t seconds) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = seconds;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), ts, 0), 0);
}

inline std::vector<std::string> rel_paths(const CorpusListing& l) {
  std::vector<std::string> out;
  for (const auto& f : l.files) out.push_back(f.rel_path);
  return out;
}

// A corpus of three documents with known text, and options that read it with a private cache.
struct SmallCorpus {
  ablate::base::TempDir dir;
  ablate::base::TempDir cache;
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

inline bool same_batch(const Batch& a, const Batch& b) {
  return a.batch_size == b.batch_size && a.seq_len == b.seq_len && a.tokens == b.tokens &&
         a.loss_mask == b.loss_mask && a.state_after == b.state_after;
}

inline std::string error_of(const DataOptions& o) {
  try {
    open_data(o);
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError>";
}

}  // namespace ablate::data::test_fixtures
