// data/hash.h: the small hashes the data pipeline writes itself so that fingerprints and
// checksums are the same on every machine and standard library: FNV-1a 64 for fingerprints, and a
// four-lane word-wise FNV-1a variant for checksumming large token payloads at memory speed.
// Tested (known FNV vectors, lane/tail handling) in tests/data/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ablate::data {

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

// Incremental FNV-1a 64. Integers are fed as fixed-width little-endian bytes and strings are
// length-prefixed, so the value does not depend on the host's byte order and ("ab","c") differs
// from ("a","bc").
class Fnv1a64 {
 public:
  Fnv1a64& bytes(const void* data, size_t n);
  Fnv1a64& u64(uint64_t v);
  Fnv1a64& str(std::string_view s);
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = kFnvOffset;
};

// Plain FNV-1a 64 of a byte range (the textbook function: fnv1a64("a", 1) = 0xaf63dc4c8601ec8c).
uint64_t fnv1a64(const void* data, size_t n);

// Checksum of a large payload: four independent FNV-1a lanes over 8-byte words (independent
// multiply chains run several times faster than byte-wise FNV), the tail bytes fed to lane 0, the
// lanes and the length folded together with FNV-1a. Words are read in host order: the cache it
// protects is local to one machine and its header records the byte order.
uint64_t checksum64(const void* data, size_t n);

// 16 lower-case hex digits.
std::string hex64(uint64_t v);

}  // namespace ablate::data
