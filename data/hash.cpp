// data/hash.cpp: FNV-1a 64 and the word-wise payload checksum (see hash.h).
// Tested in tests/data/ (DataHashTest.*).
#include "data/hash.h"

#include <cstring>

namespace ablate::data {

Fnv1a64& Fnv1a64::bytes(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h_ ^= p[i];
    h_ *= kFnvPrime;
  }
  return *this;
}

Fnv1a64& Fnv1a64::u64(uint64_t v) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
  return bytes(le, 8);
}

Fnv1a64& Fnv1a64::str(std::string_view s) {
  u64(s.size());
  return bytes(s.data(), s.size());
}

uint64_t fnv1a64(const void* data, size_t n) { return Fnv1a64().bytes(data, n).value(); }

uint64_t checksum64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {kFnvOffset, kFnvOffset ^ 1, kFnvOffset ^ 2, kFnvOffset ^ 3};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      lane[l] = (lane[l] ^ w) * kFnvPrime;
    }
  }
  for (; i < n; ++i) lane[0] = (lane[0] ^ p[i]) * kFnvPrime;
  Fnv1a64 out;
  out.u64(n);
  for (uint64_t v : lane) out.u64(v);
  return out.value();
}

std::string hex64(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = digits[v & 0xf];
  return s;
}

}  // namespace ablate::data
