// data/corpus.h: the default corpus (docs/model.md "Data"): every C/C++ source under a folder,
// in byte-wise sorted order of the relative path, each file one document, tokenised byte-level and
// joined with kEod after each document. The token stream is cached on disk under a fingerprint of
// the file list, written atomically (temp file, fsync, rename) and verified on read (magic, version,
// token count, checksum), so a half-written or stale cache is never used: it is rebuilt.
// Tested with small corpora in temp folders in tests/data/ (DataCorpusTest.*,
// DataCacheTest.*).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/token_buffer.h"
#include "data/tokenizer.h"

namespace ablate::data {

// .h .hh .hpp .hxx .c .cc .cpp .cu .cuh
std::vector<std::string> default_extensions();
// Each entry as ".ext" (a missing dot is added), in the given order without duplicates; an empty
// list or an empty entry is a DataError. Matching is case-sensitive.
std::vector<std::string> normalise_extensions(const std::vector<std::string>& exts);

struct CorpusFile {
  std::string rel_path;  // generic form ("sys/types.h"), relative to the corpus folder
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

struct CorpusListing {
  std::filesystem::path root;        // the folder as given, made absolute
  std::vector<std::string> extensions;  // normalised, in the given order
  uint64_t max_bytes = 0;            // 0: no cap
  std::vector<CorpusFile> files;     // the documents, in order
  uint64_t total_bytes = 0;          // sum of the files' sizes
  uint64_t matched_files = 0;        // files that matched before the cap
  uint64_t fingerprint = 0;          // see fingerprint_listing
  uint64_t token_count() const { return total_bytes + files.size(); }  // one kEod per document
};

// Walks `dir` recursively: regular files only (symlinks, to files or folders, are skipped, so a
// link loop cannot trap the walk and no file is read twice), whose extension is in `extensions`,
// sorted byte-wise by relative path. With max_bytes > 0 files are taken in that order while the
// running total stays within max_bytes; the first file that would pass the cap ends the list (a
// document is never cut). DataError when dir is missing or not a folder, when nothing matches, or
// when the cap leaves no file.
CorpusListing list_corpus(const std::filesystem::path& dir, const std::vector<std::string>& extensions,
                          uint64_t max_bytes);

// FNV-1a over: tokenizer version, extensions (sorted), cap, then per file its relative path, size and mtime.
uint64_t fingerprint_listing(const CorpusListing& listing);

// Reads the listed files and joins them with kEod after each. DataError if a file cannot be read
// or changed size since it was listed.
std::vector<Token> tokenise_listing(const CorpusListing& listing);

// $ABLATE_CACHE_DIR if set and non-empty, else $HOME/.cache/ablate/corpus.
std::filesystem::path default_cache_dir();
// <cache_dir>/corpus-<16 hex of fingerprint>.tokens
std::filesystem::path cache_file_for(const std::filesystem::path& cache_dir, uint64_t fingerprint);

inline constexpr uint32_t kCacheFormatVersion = 1;

// Maps a cache file and verifies it; `why` says why it was not usable ("" when ok). Never throws
// for a bad file.
struct CacheRead {
  bool ok = false;
  std::string why;
  TokenBuffer tokens;
};
CacheRead read_token_cache(const std::filesystem::path& file, uint64_t fingerprint, uint64_t expected_tokens);
// Writes atomically: a temp file in the same folder, fsync, rename, fsync of the folder. Creates
// the folder. Throws std::runtime_error (not DataError: a cache that cannot be written is not bad
// input, the run goes on without it).
void write_token_cache(const std::filesystem::path& file, uint64_t fingerprint, const std::vector<Token>& tokens);

struct Corpus {
  CorpusListing listing;
  TokenBuffer tokens;              // the joined stream (mapped from the cache on a hit)
  bool cache_hit = false;
  std::filesystem::path cache_file;
  std::string cache_note;          // why the cache was rebuilt or not written ("" on a plain hit)
  double prep_seconds = 0;         // walk + tokenise or cache read (+ cache write): charge to data_prep
};

// List, then read the cache or tokenise and write the cache. `cache_dir` empty: default_cache_dir().
Corpus load_corpus(const std::filesystem::path& dir, const std::vector<std::string>& extensions,
                   uint64_t max_bytes, const std::filesystem::path& cache_dir);

}  // namespace ablate::data
