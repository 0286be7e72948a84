// data/token_buffer.cpp: vector- or mmap-backed token stream (see token_buffer.h).
// Tested through tests/data/ (DataCacheTest.*).
#include "data/token_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ablate::data {

TokenBuffer TokenBuffer::map_file(int fd, size_t file_bytes, size_t offset, size_t count, std::string& why) {
  TokenBuffer b;
  if (file_bytes == 0 || offset % alignof(Token) != 0 || offset + count * sizeof(Token) > file_bytes) {
    why = "bad mapping range";
    return b;
  }
  // MAP_POPULATE: the checksum reads every page next, so fault them in as one batch.
  void* p = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    why = std::string("cannot map the cache file: ") + std::strerror(errno);
    return b;
  }
  b.map_ = p;
  b.map_bytes_ = file_bytes;
  b.map_data_ = reinterpret_cast<const Token*>(static_cast<const char*>(p) + offset);
  b.map_count_ = count;
  return b;
}

TokenBuffer::TokenBuffer(TokenBuffer&& o) noexcept
    : vec_(std::move(o.vec_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      map_data_(std::exchange(o.map_data_, nullptr)),
      map_count_(std::exchange(o.map_count_, 0)) {}

TokenBuffer& TokenBuffer::operator=(TokenBuffer&& o) noexcept {
  if (this != &o) {
    release();
    vec_ = std::move(o.vec_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    map_data_ = std::exchange(o.map_data_, nullptr);
    map_count_ = std::exchange(o.map_count_, 0);
  }
  return *this;
}

TokenBuffer::~TokenBuffer() { release(); }

void TokenBuffer::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  map_data_ = nullptr;
  map_count_ = 0;
  vec_.clear();
}

}  // namespace ablate::data
