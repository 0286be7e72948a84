// data/packing.h: packed rows over a token stream (docs/model.md "Data"). Row r is the T+1 ids
// starting at r*T, so consecutive rows overlap by one id (inputs are ids 0..T-1, targets 1..T); the
// final partial row is padded with kPad and loss_mask[t] = 0 exactly where target t is padding.
// Rows are views: nothing is copied until a row is filled into a batch.
// Tested in tests/data/ (DataPackingTest.*).
#pragma once
#include <cstdint>
#include <span>

#include "data/tokenizer.h"

namespace ablate::data {

class PackedRows {
 public:
  PackedRows() = default;
  // `stream` must outlive this object. DataError when the stream is shorter than one row (T+1 ids).
  PackedRows(std::span<const Token> stream, int64_t seq_len);

  // ceil((N-1)/T) for a stream of N ids: every row has at least one real target.
  uint64_t size() const { return rows_; }
  int64_t seq_len() const { return seq_len_; }

  // tokens: T+1 ids, mask: T bytes.
  void fill(uint64_t row, int32_t* tokens, uint8_t* mask) const;

 private:
  std::span<const Token> stream_;
  int64_t seq_len_ = 0;
  uint64_t rows_ = 0;
};

}  // namespace ablate::data
