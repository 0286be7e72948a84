// data/source.h: what the runner sees of the data pipeline. One options struct
// (DataOptions), one entry (open_data) that returns a DataSource (the byte-level corpus or synthetic
// ids), a BatchIterator that walks the rows in the seeded order from a DataState {epoch, cursor}, and
// a description for the receipt. The prefetching thread is in loader.h.
// Tested in tests/data/ (DataSourceTest.*, DataSyntheticTest.*, DataErrorTest.*).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"

namespace ablate::data {

struct DataOptions {
  std::string source = "corpus";  // "corpus" | "synthetic"
  std::string corpus_dir = "/usr/include";
  std::vector<std::string> extensions = default_extensions();
  uint64_t max_bytes = 0;         // corpus bytes cap, 0 = none; part of the fingerprint
  std::string cache_dir;          // "" = $ABLATE_CACHE_DIR, else ~/.cache/ablate/corpus
  int64_t seq_len = 128;          // T
  int64_t batch_size = 4;         // B
  uint64_t seed = 0;
  int64_t vocab = 512;            // V >= 258
  std::string synthetic_distribution = "uniform";  // "uniform" | "zipf"
  double zipf_exponent = 1.1;
  int64_t prefetch = 4;           // loader queue depth
  // Share of the corpus's documents held out for validation, chosen by the hash of each document's
  // relative path (held_out_document); 0: nothing held out, every document trains. Synthetic data
  // draws its validation rows from a seed domain of their own instead.
  double validation_fraction = 0;
};

// Whether the corpus document at `rel_path` is held out for validation at `fraction`: FNV-1a 64 of
// the path mapped to [0, 1) below the fraction. The same on every machine, and a document is held
// out at every larger fraction too.
bool held_out_document(std::string_view rel_path, double fraction);

// DataError naming the offending data.* key, for anything open_data would reject before any I/O.
void validate(const DataOptions& opts);

// The position in the data order: `cursor` rows of epoch `epoch` have been consumed. Small and
// serialisable, so a checkpoint resume continues the exact order.
struct DataState {
  uint64_t epoch = 0;
  uint64_t cursor = 0;
  bool operator==(const DataState&) const = default;
};
void to_json(nlohmann::json& j, const DataState& s);
void from_json(const nlohmann::json& j, DataState& s);

struct Batch {
  int64_t batch_size = 0, seq_len = 0;
  std::vector<int32_t> tokens;     // B*(T+1): row b is tokens[b*(T+1) .. b*(T+1)+T]
  std::vector<uint8_t> loss_mask;  // B*T: 1 where the target (tokens[b*(T+1)+t+1]) counts
  DataState state_after;           // resume from here to continue after this batch
};

// For the receipt: what data a run saw.
struct DataDescription {
  std::string source;               // "corpus" | "synthetic"
  std::string corpus_dir;           // corpus: absolute folder
  std::vector<std::string> extensions;
  uint64_t max_bytes = 0;
  uint64_t file_count = 0;
  uint64_t source_bytes = 0;
  uint64_t token_count = 0;         // corpus: bytes + one kEod per file
  std::string fingerprint;          // 16 hex; corpus: the file list; synthetic: distribution and vocab
  uint32_t tokenizer_version = kTokenizerVersion;
  bool cache_hit = false;
  std::string cache_file;
  std::string cache_note;
  double prep_seconds = 0;          // charge to the goodput category data_prep
  uint64_t rows_per_epoch = 0;      // 0: unbounded (synthetic)
  int64_t seq_len = 0, batch_size = 0, vocab = 0;
  uint64_t seed = 0;
  std::string synthetic_distribution;
  double zipf_exponent = 0;
  // The held-out split (validation_fraction > 0): documents and tokens on the validation side (corpus),
  // and its rows of seq_len + 1 ids (0 for synthetic data: as many as asked).
  double validation_fraction = 0;
  uint64_t validation_documents = 0, validation_tokens = 0, validation_rows = 0;
};
nlohmann::json to_json(const DataDescription& d);

// A set of rows and how they are ordered. Const and thread-safe once constructed: the loader thread
// and the caller may read it at once.
class DataSource {
 public:
  virtual ~DataSource() = default;
  const DataOptions& options() const { return opts_; }
  const DataDescription& description() const { return desc_; }
  // Rows in one epoch; 0 = unbounded (the synthetic source never wraps).
  virtual uint64_t rows_per_epoch() const = 0;
  // Whether each epoch visits the rows in shuffled_order(rows, seed, epoch) or in index order.
  virtual bool shuffled() const = 0;
  // Writes row `row` (a row index, not a position in the order) of epoch `epoch`: T+1 ids, T mask bytes.
  virtual void fill_row(uint64_t epoch, uint64_t row, int32_t* tokens, uint8_t* mask) const = 0;
  // The held-out rows (options().validation_fraction > 0), never among the training rows: kUnbounded
  // for synthetic data, 0 when nothing is held out. fill_validation_row writes one as fill_row does.
  static constexpr uint64_t kUnbounded = ~uint64_t{0};
  virtual uint64_t validation_rows() const { return 0; }
  virtual void fill_validation_row(uint64_t row, int32_t* tokens, uint8_t* mask) const;

 protected:
  DataSource(DataOptions opts, DataDescription desc) : opts_(std::move(opts)), desc_(std::move(desc)) {}
  DataOptions opts_;
  DataDescription desc_;
};

// Walks a source in order from a state; single-threaded (the loader owns one). The source must
// outlive it. DataError when `start` lies beyond the source's rows (a checkpoint of other data).
class BatchIterator {
 public:
  BatchIterator(const DataSource& source, DataState start);
  Batch next();
  DataState state() const { return state_; }

 private:
  uint64_t row_at(uint64_t epoch, uint64_t cursor);
  const DataSource& src_;
  DataState state_;
  std::vector<uint64_t> order_;  // the shuffled order of order_epoch_
  uint64_t order_epoch_ = 0;
  bool have_order_ = false;
};

// Validates, then opens the corpus (walk, cache or tokenise; the time is in description().prep_seconds)
// or the synthetic source. DataError on bad input.
std::unique_ptr<DataSource> open_data(const DataOptions& opts);

// Zipf over ids [0, V): P(id k) proportional to 1/(k+1)^s, drawn by inverse CDF. Exposed for tests.
class ZipfTable {
 public:
  ZipfTable(int64_t vocab, double exponent);
  int32_t draw(double unit) const;  // unit in [0, 1)

 private:
  std::vector<double> cdf_;  // unnormalised running sums
};

}  // namespace ablate::data
