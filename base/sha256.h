// base/sha256.h: SHA-256 (FIPS 180-4), used to fingerprint artifacts and experiment specs.
// Own implementation so the floor needs nothing beyond fmt.
// Tested against the FIPS 180-2 vectors in tests/base/sha256_test.cpp (base_tests).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ablate::base {

// Incremental hasher: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(std::string_view data);
  std::array<std::uint8_t, 32> digest();  // finalises; the hasher must not be updated afterwards
  std::string hex_digest();               // digest() as 64 lowercase hex characters

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string sha256_hex(std::string_view data);
// Streams the file in blocks; throws InputError naming the path and the OS error when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace ablate::base
