// data/tokenizer.h: the byte-level tokenizer of docs/model.md "Data": ids 0-255 are the bytes,
// 256 ends a document, 257 pads; a model's vocab must be at least 258. Token ids are held as
// uint16 in memory and in the corpus cache (half the size of int32 for a ~100 MB corpus).
// Tested in tests/data/ (DataTokenizerTest.*).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ablate::data {

using Token = uint16_t;
inline constexpr Token kEod = 256;
inline constexpr Token kPad = 257;
inline constexpr int64_t kMinVocab = 258;
// Bump when the mapping from text to ids changes: it is part of every corpus fingerprint.
inline constexpr uint32_t kTokenizerVersion = 1;

// Bytes to ids (no end-of-document id added).
std::vector<Token> encode(std::string_view text);
// Appends the ids of `text` to `out`.
void append_encoded(std::string_view text, std::vector<Token>& out);
// Ids back to text for debugging and tests: kEod renders as "<eod>", kPad as "<pad>", ids above
// 257 (synthetic data) as "<id N>".
std::string decode(std::span<const Token> ids);

}  // namespace ablate::data
