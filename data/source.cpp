// data/source.cpp: options validation, the corpus and synthetic sources, the ordered
// batch iterator and open_data (see source.h). Tested in tests/data/.
#include "data/source.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <stdexcept>

#include "data/errors.h"
#include "data/hash.h"
#include "data/packing.h"
#include "base/rng.h"

namespace ablate::data {

namespace {

constexpr int64_t kMaxZipfVocab = int64_t{1} << 24;  // the CDF table is 8 bytes per id

class CorpusSource final : public DataSource {
 public:
  CorpusSource(const DataOptions& opts, Corpus corpus, DataDescription desc)
      : DataSource(opts, std::move(desc)), corpus_(std::move(corpus)) {
    if (opts.validation_fraction > 0) {
      split(opts.validation_fraction);
      rows_ = PackedRows(train_, opts.seq_len);
      validation_ = PackedRows(held_out_, opts.seq_len);
      desc_.validation_rows = validation_.size();
    } else {
      rows_ = PackedRows(corpus_.tokens.span(), opts.seq_len);
    }
    desc_.rows_per_epoch = rows_.size();
  }
  uint64_t rows_per_epoch() const override { return rows_.size(); }
  bool shuffled() const override { return true; }
  void fill_row(uint64_t, uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    rows_.fill(row, tokens, mask);
  }
  uint64_t validation_rows() const override { return validation_.size(); }
  void fill_validation_row(uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    if (row >= validation_.size()) DataSource::fill_validation_row(row, tokens, mask);  // throws
    validation_.fill(row, tokens, mask);
  }

 private:
  // Each document (its bytes and the kEod after it) whole to one side, in corpus order.
  void split(double fraction) {
    const auto all = corpus_.tokens.span();
    uint64_t at = 0;
    for (const auto& file : corpus_.listing.files) {
      const uint64_t n = file.size + 1;
      const bool held = held_out_document(file.rel_path, fraction);
      auto& side = held ? held_out_ : train_;
      side.insert(side.end(), all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n));
      if (held) ++desc_.validation_documents;
      at += n;
    }
    desc_.validation_fraction = fraction;
    desc_.validation_tokens = held_out_.size();
    const uint64_t docs = corpus_.listing.files.size();
    const uint64_t need = static_cast<uint64_t>(opts_.seq_len) + 1;
    if (held_out_.size() < need || train_.size() < need) {
      throw DataError(fmt::format(
          "data.validation_fraction = {} holds out {} of the {} documents in {} ({} tokens; each side needs at least "
          "model.seq_len + 1 = {}): documents go whole to one side, so {} data.validation_fraction or add documents",
          fraction, desc_.validation_documents, docs, corpus_.listing.root.string(), held_out_.size(), need,
          held_out_.size() < need ? "raise" : "lower"));
    }
  }

  Corpus corpus_;    // owns the token stream that rows_ views; never moved after construction
  std::vector<Token> train_, held_out_;  // with a validation split: the two sides of the stream
  PackedRows rows_, validation_;
};

class SyntheticSource final : public DataSource {
 public:
  SyntheticSource(const DataOptions& opts, DataDescription desc) : DataSource(opts, std::move(desc)) {
    const auto t0 = std::chrono::steady_clock::now();
    if (opts.synthetic_distribution == "zipf") zipf_ = std::make_unique<ZipfTable>(opts.vocab, opts.zipf_exponent);
    desc_.prep_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  uint64_t rows_per_epoch() const override { return 0; }
  bool shuffled() const override { return false; }
  // Each row comes from its own generator, so any row can be made without making those before it:
  // resuming from a DataState costs nothing.
  void fill_row(uint64_t epoch, uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    draw(base::derive_seed(base::derive_seed(opts_.seed, base::kSyntheticDomain, epoch), base::kSyntheticDomain, row), tokens,
         mask);
  }
  uint64_t validation_rows() const override { return opts_.validation_fraction > 0 ? kUnbounded : 0; }
  // From a seed domain of their own: no training row of any epoch is drawn from the same generator.
  void fill_validation_row(uint64_t row, int32_t* tokens, uint8_t* mask) const override {
    draw(base::derive_seed(base::derive_seed(opts_.seed, base::kValidationDomain, 0), base::kSyntheticDomain, row), tokens,
         mask);
  }

 private:
  void draw(uint64_t seed, int32_t* tokens, uint8_t* mask) const {
    base::SplitMix64 g(seed);
    const int64_t T = opts_.seq_len;
    const auto V = static_cast<uint64_t>(opts_.vocab);
    for (int64_t i = 0; i <= T; ++i) {
      tokens[i] = zipf_ ? zipf_->draw(g.unit()) : static_cast<int32_t>(g.below(V));
    }
    std::fill(mask, mask + T, uint8_t{1});
  }

  std::unique_ptr<ZipfTable> zipf_;
};

}  // namespace

void validate(const DataOptions& o) {
  if (o.source != "corpus" && o.source != "synthetic") {
    throw DataError(fmt::format("data.source = \"{}\" is not known: use \"corpus\" or \"synthetic\"", o.source));
  }
  if (o.vocab < kMinVocab) {
    throw DataError(fmt::format(
        "data.vocab = {} is too small: the byte-level tokenizer needs at least {} ids (256 bytes, end of "
        "document, padding): use the model's vocab (tiny: 512)",
        o.vocab, kMinVocab));
  }
  if (o.vocab > std::numeric_limits<int32_t>::max()) {
    throw DataError(fmt::format("data.vocab = {} does not fit the int32 token ids: lower it", o.vocab));
  }
  if (o.seq_len < 1) throw DataError(fmt::format("model.seq_len must be at least 1 (got {})", o.seq_len));
  if (o.batch_size < 1) throw DataError(fmt::format("data.batch_size must be at least 1 (got {})", o.batch_size));
  if (o.prefetch < 1) throw DataError(fmt::format("data.prefetch must be at least 1 (got {})", o.prefetch));
  if (!(o.validation_fraction >= 0 && o.validation_fraction <= 0.5)) {
    throw DataError(fmt::format(
        "data.validation_fraction must be between 0 and 0.5 (got {}): the share of documents held out for validation",
        o.validation_fraction));
  }
  if (o.source == "corpus") {
    normalise_extensions(o.extensions);
  } else {
    if (o.synthetic_distribution != "uniform" && o.synthetic_distribution != "zipf") {
      throw DataError(fmt::format(
          "data.synthetic_distribution = \"{}\" is not known: use \"uniform\" or \"zipf\"", o.synthetic_distribution));
    }
    if (o.synthetic_distribution == "zipf") {
      if (!std::isfinite(o.zipf_exponent) || o.zipf_exponent <= 0) {
        throw DataError(fmt::format("data.zipf_exponent must be a positive number (got {}); the usual value is 1.1",
                                    o.zipf_exponent));
      }
      if (o.vocab > kMaxZipfVocab) {
        throw DataError(fmt::format("data.vocab = {} is too large for zipf synthetic data (at most {})", o.vocab,
                                    kMaxZipfVocab));
      }
    }
  }
}

void to_json(nlohmann::json& j, const DataState& s) { j = nlohmann::json{{"epoch", s.epoch}, {"cursor", s.cursor}}; }

void from_json(const nlohmann::json& j, DataState& s) {
  s.epoch = j.at("epoch").get<uint64_t>();
  s.cursor = j.at("cursor").get<uint64_t>();
}

nlohmann::json to_json(const DataDescription& d) {
  nlohmann::json j{{"source", d.source},
                   {"fingerprint", d.fingerprint},
                   {"tokenizer_version", d.tokenizer_version},
                   {"prep_seconds", d.prep_seconds},
                   {"rows_per_epoch", d.rows_per_epoch},
                   {"seq_len", d.seq_len},
                   {"batch_size", d.batch_size},
                   {"vocab", d.vocab},
                   {"seed", d.seed}};
  if (d.validation_fraction > 0) {  // absent without a split: descriptions made before it read the same
    j["validation_fraction"] = d.validation_fraction;
    if (d.source == "corpus") {
      j["validation_documents"] = d.validation_documents;
      j["validation_tokens"] = d.validation_tokens;
      j["validation_rows"] = d.validation_rows;
    }
  }
  if (d.source == "corpus") {
    j["corpus_dir"] = d.corpus_dir;
    j["extensions"] = d.extensions;
    j["max_bytes"] = d.max_bytes;
    j["file_count"] = d.file_count;
    j["source_bytes"] = d.source_bytes;
    j["token_count"] = d.token_count;
    j["cache_hit"] = d.cache_hit;
    j["cache_file"] = d.cache_file;
    j["cache_note"] = d.cache_note;
  } else {
    j["synthetic_distribution"] = d.synthetic_distribution;
    if (d.synthetic_distribution == "zipf") j["zipf_exponent"] = d.zipf_exponent;
  }
  return j;
}

bool held_out_document(std::string_view rel_path, double fraction) {
  const uint64_t h = Fnv1a64().str("ablate-validation").str(rel_path).value();
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

void DataSource::fill_validation_row(uint64_t row, int32_t*, uint8_t*) const {
  throw std::logic_error(fmt::format("fill_validation_row: row {} is not held out (this data holds out {} rows; "
                                     "data.validation_fraction = {})",
                                     row, validation_rows(), opts_.validation_fraction));
}

BatchIterator::BatchIterator(const DataSource& source, DataState start) : src_(source), state_(start) {
  const uint64_t rows = src_.rows_per_epoch();
  if (rows > 0) {
    if (state_.cursor > rows) {
      throw DataError(fmt::format(
          "the data state (epoch {}, cursor {}) lies beyond the {} rows of this data: the checkpoint was made with "
          "other data or another seq_len; resume with the same data options or start fresh",
          state_.epoch, state_.cursor, rows));
    }
    if (state_.cursor == rows) state_ = {state_.epoch + 1, 0};
  }
}

uint64_t BatchIterator::row_at(uint64_t epoch, uint64_t cursor) {
  if (src_.rows_per_epoch() == 0 || !src_.shuffled()) return cursor;
  if (!have_order_ || order_epoch_ != epoch) {
    order_ = base::shuffled_order(src_.rows_per_epoch(), src_.options().seed, epoch);
    order_epoch_ = epoch;
    have_order_ = true;
  }
  return order_[cursor];
}

Batch BatchIterator::next() {
  const int64_t B = src_.options().batch_size, T = src_.options().seq_len;
  const uint64_t rows = src_.rows_per_epoch();
  Batch b;
  b.batch_size = B;
  b.seq_len = T;
  b.tokens.resize(static_cast<size_t>(B * (T + 1)));
  b.loss_mask.resize(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B; ++i) {
    src_.fill_row(state_.epoch, row_at(state_.epoch, state_.cursor), b.tokens.data() + i * (T + 1),
                  b.loss_mask.data() + i * T);
    // Kept normalised: a finished epoch reads as {epoch + 1, 0}, and the next epoch is reshuffled.
    if (++state_.cursor == rows && rows > 0) state_ = {state_.epoch + 1, 0};
  }
  b.state_after = state_;
  return b;
}

std::unique_ptr<DataSource> open_data(const DataOptions& opts) {
  validate(opts);
  DataDescription d;
  d.source = opts.source;
  d.seq_len = opts.seq_len;
  d.batch_size = opts.batch_size;
  d.vocab = opts.vocab;
  d.seed = opts.seed;
  if (opts.source == "synthetic") {
    d.synthetic_distribution = opts.synthetic_distribution;
    d.zipf_exponent = opts.synthetic_distribution == "zipf" ? opts.zipf_exponent : 0.0;
    Fnv1a64 h;
    h.str("ablate-synthetic").str(d.synthetic_distribution).u64(static_cast<uint64_t>(d.vocab));
    h.u64(std::bit_cast<uint64_t>(d.zipf_exponent));
    d.fingerprint = hex64(h.value());
    d.validation_fraction = opts.validation_fraction;
    return std::make_unique<SyntheticSource>(opts, std::move(d));
  }
  Corpus c = load_corpus(opts.corpus_dir, opts.extensions, opts.max_bytes, opts.cache_dir);
  d.corpus_dir = c.listing.root.string();
  d.extensions = c.listing.extensions;
  d.max_bytes = c.listing.max_bytes;
  d.file_count = c.listing.files.size();
  d.source_bytes = c.listing.total_bytes;
  d.token_count = c.tokens.size();
  d.fingerprint = hex64(c.listing.fingerprint);
  d.cache_hit = c.cache_hit;
  d.cache_file = c.cache_file.string();
  d.cache_note = c.cache_note;
  d.prep_seconds = c.prep_seconds;
  return std::make_unique<CorpusSource>(opts, std::move(c), std::move(d));
}

ZipfTable::ZipfTable(int64_t vocab, double exponent) : cdf_(static_cast<size_t>(vocab)) {
  double sum = 0;
  for (int64_t k = 0; k < vocab; ++k) {
    sum += std::pow(static_cast<double>(k + 1), -exponent);
    cdf_[static_cast<size_t>(k)] = sum;
  }
}

int32_t ZipfTable::draw(double unit) const {
  const double x = unit * cdf_.back();
  const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), x);
  const auto k = static_cast<int64_t>(it - cdf_.begin());
  return static_cast<int32_t>(std::min<int64_t>(k, static_cast<int64_t>(cdf_.size()) - 1));
}

}  // namespace ablate::data
