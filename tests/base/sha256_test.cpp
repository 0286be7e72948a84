// tests/base/sha256_test.cpp: SHA-256 against the FIPS 180-2 vectors, padding boundaries (expected
// values from Python's hashlib), incremental hashing and file hashing.
// Run: build/tests/base_tests --gtest_filter='Sha256*'
#include "base/sha256.h"

#include <gtest/gtest.h>

#include "base/errors.h"
#include "base/atomic_write.h"
#include "base/temp_dir.h"

namespace ablate::base {
namespace {


TEST(Sha256, Fips180_2Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                 "mnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

std::string pattern(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s.push_back(static_cast<char>((i * 7 + 3) % 256));
  return s;
}

// Lengths around the 56-byte padding limit and the 64-byte block: one or two final blocks.
TEST(Sha256, PaddingBoundaries) {
  const std::vector<std::pair<std::size_t, std::string>> expected = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
  };
  for (const auto& [n, hex] : expected) EXPECT_EQ(sha256_hex(pattern(n)), hex) << n << " bytes";
}

TEST(Sha256, IncrementalEqualsOneShotForAnySplit) {
  const std::string data = pattern(300);
  const std::string whole = sha256_hex(data);
  for (std::size_t chunk : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 h;
    for (std::size_t i = 0; i < data.size(); i += chunk) h.update(std::string_view(data).substr(i, chunk));
    EXPECT_EQ(h.hex_digest(), whole) << "chunk " << chunk;
  }
}

TEST(Sha256, DigestTwiceIsAnError) {
  Sha256 h;
  h.update("abc");
  (void)h.digest();
  EXPECT_THROW(h.digest(), std::logic_error);
  EXPECT_THROW(h.update("x"), std::logic_error);
}

TEST(Sha256, FileIsStreamed) {
  TempDir dir;
  const std::string path = dir.file("million-a.bin");
  write_file_atomically(path, std::string(1000000, 'a'));  // larger than the 64 KiB read chunk
  EXPECT_EQ(sha256_file(path), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string empty = dir.file("empty");
  write_file_atomically(empty, "");
  EXPECT_EQ(sha256_file(empty), sha256_hex(""));
}

TEST(Sha256, UnreadableFileThrowsNamingThePath) {
  TempDir dir;
  const std::string missing = dir.file("nope.bin");
  try {
    sha256_file(missing);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sha256_file(dir.file("")), InputError);  // a directory
}

}  // namespace
}  // namespace ablate::base
