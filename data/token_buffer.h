// data/token_buffer.h: owner of a corpus token stream, either a vector (just tokenised) or a
// read-only mapping of a cache file's payload. Mapping a warm cache skips copying ~200 MB through
// freshly faulted anonymous memory, and the ranks of one node share the same page-cache pages.
// Tested through the cache tests in tests/data/ (DataCacheTest.*).
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace ablate::data {

class TokenBuffer {
 public:
  TokenBuffer() = default;
  explicit TokenBuffer(std::vector<Token> tokens) : vec_(std::move(tokens)) {}
  // Maps the whole file (fd, file_bytes long) read-only and exposes `count` ids starting at byte
  // `offset` (even). Returns an empty buffer and sets `why` on failure. The file must not be
  // changed in place while mapped; the cache writer only ever replaces files by rename.
  static TokenBuffer map_file(int fd, size_t file_bytes, size_t offset, size_t count, std::string& why);

  TokenBuffer(TokenBuffer&& o) noexcept;
  TokenBuffer& operator=(TokenBuffer&& o) noexcept;
  TokenBuffer(const TokenBuffer&) = delete;
  TokenBuffer& operator=(const TokenBuffer&) = delete;
  ~TokenBuffer();

  const Token* data() const { return map_ ? map_data_ : vec_.data(); }
  size_t size() const { return map_ ? map_count_ : vec_.size(); }
  std::span<const Token> span() const { return {data(), size()}; }
  bool mapped() const { return map_ != nullptr; }

 private:
  void release();
  std::vector<Token> vec_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const Token* map_data_ = nullptr;
  size_t map_count_ = 0;
};

}  // namespace ablate::data
