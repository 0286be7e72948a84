// data/tokenizer.cpp: the byte-level tokenizer (see tokenizer.h).
// Tested in tests/data/ (DataTokenizerTest.*).
#include "data/tokenizer.h"

namespace ablate::data {

void append_encoded(std::string_view text, std::vector<Token>& out) {
  out.reserve(out.size() + text.size());
  for (char c : text) out.push_back(static_cast<Token>(static_cast<unsigned char>(c)));
}

std::vector<Token> encode(std::string_view text) {
  std::vector<Token> out;
  append_encoded(text, out);
  return out;
}

std::string decode(std::span<const Token> ids) {
  std::string s;
  s.reserve(ids.size());
  for (Token t : ids) {
    if (t < 256) {
      s.push_back(static_cast<char>(t));
    } else if (t == kEod) {
      s += "<eod>";
    } else if (t == kPad) {
      s += "<pad>";
    } else {
      s += "<id " + std::to_string(t) + ">";
    }
  }
  return s;
}

}  // namespace ablate::data
