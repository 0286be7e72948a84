// data/packing.cpp: packed rows as views over the token stream (see packing.h).
// Tested in tests/data/ (DataPackingTest.*).
#include "data/packing.h"

#include <algorithm>
#include <fmt/format.h>

#include "data/errors.h"

namespace ablate::data {

PackedRows::PackedRows(std::span<const Token> stream, int64_t seq_len) : stream_(stream), seq_len_(seq_len) {
  if (seq_len < 1) throw DataError(fmt::format("model.seq_len must be at least 1 (got {})", seq_len));
  const uint64_t need = static_cast<uint64_t>(seq_len) + 1;
  if (stream.size() < need) {
    throw DataError(fmt::format(
        "the corpus has {} tokens but one row needs seq_len+1 = {}: lower model.seq_len or add files "
        "(or raise data.max_bytes)",
        stream.size(), need));
  }
  const uint64_t T = static_cast<uint64_t>(seq_len);
  rows_ = (stream.size() - 1 + T - 1) / T;
}

void PackedRows::fill(uint64_t row, int32_t* tokens, uint8_t* mask) const {
  const uint64_t T = static_cast<uint64_t>(seq_len_);
  const uint64_t n = stream_.size();
  const uint64_t start = row * T;
  const uint64_t real = start < n ? std::min<uint64_t>(T + 1, n - start) : 0;  // ids before padding
  for (uint64_t i = 0; i < real; ++i) tokens[i] = stream_[start + i];
  for (uint64_t i = real; i <= T; ++i) tokens[i] = kPad;
  // Target t is id t+1 of the row: real iff t+1 < real. The stream itself never holds kPad.
  for (uint64_t t = 0; t < T; ++t) mask[t] = t + 1 < real ? 1 : 0;
}

}  // namespace ablate::data
