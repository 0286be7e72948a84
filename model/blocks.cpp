// model/blocks.cpp: what the blocks share: the seeded initialiser, the Block base (pre-norm weight,
// RMSNorm through the residual_norm seam), the letter -> block factory, and the D block (dense
// SwiGLU, small enough to live here). The other blocks have one file each.
// Tests: model_tests (tests/model/blocks_test.cpp).
#include "model/blocks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/rng.h"

namespace ablate::model {

SeededInit::SeededInit(uint64_t seed, double init_std) : seed_(seed), init_std_(init_std) {}

torch::Tensor SeededInit::draw(at::IntArrayRef sizes, const std::function<void(torch::Tensor, at::Generator&)>& fill,
                               int64_t first_row, int64_t rows) {
  auto whole = sizes.vec();
  const int64_t n = c10::multiply_integers(whole);
  if (rows < 0) rows = whole.empty() ? 1 : whole[0];
  auto kept = whole;
  if (!kept.empty()) kept[0] = rows;
  auto out = torch::empty(kept, torch::kFloat);
  auto flat = out.view({-1});
  // Elements [begin, end) of the whole draw are kept; only the chunks that overlap them are drawn.
  const int64_t row_elements = whole.empty() || whole[0] == 0 ? 1 : n / whole[0];
  const int64_t begin = first_row * row_elements, end = begin + flat.numel();
  const int64_t chunks = (end + kChunkElements - 1) / kChunkElements;
  const uint64_t draw_seed = base::derive_seed(seed_, base::kModelInitDomain, draws_++);
  // Chunks claimed in any order by LibTorch's intra-op thread count of workers (std::thread: ATen's
  // parallel_for is OpenMP pragmas in its header, serial in a file built without -fopenmp); each
  // chunk's numbers depend only on its seed.
  std::atomic<int64_t> next{begin / kChunkElements};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto work = [&] {
    try {
      for (int64_t c = next++; c < chunks; c = next++) {
        auto generator = at::make_generator<at::CPUGeneratorImpl>(
            base::derive_seed(draw_seed, base::kModelInitDomain, static_cast<uint64_t>(c)));
        const int64_t first = c * kChunkElements, length = std::min(kChunkElements, n - first);
        if (first >= begin && first + length <= end) {
          fill(flat.narrow(0, first - begin, length), generator);
          continue;
        }
        // A chunk the kept rows cut: drawn whole (its numbers depend on its length), the overlap kept.
        auto chunk = torch::empty({length}, torch::kFloat);
        fill(chunk, generator);
        const int64_t lo = std::max(first, begin), hi = std::min(first + length, end);
        flat.narrow(0, lo - begin, hi - lo).copy_(chunk.narrow(0, lo - first, hi - lo));
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  const int64_t workers = std::min<int64_t>(chunks - begin / kChunkElements, std::max(1, at::get_num_threads()));
  std::vector<std::thread> helpers;
  for (int64_t w = 1; w < workers; ++w) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
  if (failure) std::rethrow_exception(failure);
  return out;
}

torch::Tensor SeededInit::normal(at::IntArrayRef sizes) {
  return draw(sizes, [this](torch::Tensor chunk, at::Generator& g) { chunk.normal_(0.0, init_std_, g); });
}

torch::Tensor SeededInit::normal_rows(at::IntArrayRef sizes, int64_t first_row, int64_t rows) {
  if (sizes.empty() || first_row < 0 || rows < 0 || first_row + rows > sizes[0])
    throw std::invalid_argument("SeededInit::normal_rows: rows outside the tensor's first dimension");
  return draw(
      sizes, [this](torch::Tensor chunk, at::Generator& g) { chunk.normal_(0.0, init_std_, g); }, first_row, rows);
}

torch::Tensor SeededInit::uniform(at::IntArrayRef sizes, double low, double high) {
  return draw(sizes, [low, high](torch::Tensor chunk, at::Generator& g) { chunk.uniform_(low, high, g); });
}

torch::Tensor SeededInit::constant(at::IntArrayRef sizes, double value) {
  return torch::full(sizes, value, torch::kFloat);
}

Block::Block(char letter, const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher)
    : config_(config), dispatcher_(std::move(dispatcher)), letter_(letter) {
  if (!dispatcher_) throw std::invalid_argument("block: the dispatcher is null");
  norm = register_parameter("norm", SeededInit::constant({config.d_model}, 1.0));
}

torch::Tensor Block::rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) const {
  return dispatcher_->residual_norm(torch::Tensor(), x, weight, eps).first;
}

DenseBlock::DenseBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher,
                       SeededInit& init)
    : Block('D', config, std::move(dispatcher)) {
  const int64_t d = config.d_model, f = config.dense.ffn;
  w1 = register_parameter("w1", init.normal({f, d}));
  w3 = register_parameter("w3", init.normal({f, d}));
  w2 = register_parameter("w2", init.normal({d, f}));
}

BlockOutput DenseBlock::forward(const torch::Tensor& x) {
  return {dispatcher_->dense_gemm(dispatcher_->swiglu(dispatcher_->dense_gemm(x, w1), dispatcher_->dense_gemm(x, w3)), w2), {}, {}};
}

std::shared_ptr<Block> make_block(char letter, const ModelConfig& config,
                                  std::shared_ptr<const kernels::Dispatcher> dispatcher, SeededInit& init,
                                  const ExpertPlacement& placement) {
  switch (letter) {
    case 'A':
      return std::make_shared<AttentionBlock>(config, std::move(dispatcher), init);
    case 'M':
      return std::make_shared<MambaBlock>(config, std::move(dispatcher), init);
    case 'E':
      return std::make_shared<MoeBlock>(config, std::move(dispatcher), init, placement);
    case 'R':
      return std::make_shared<RecurrentBlock>(config, std::move(dispatcher), init);
    case 'D':
      return std::make_shared<DenseBlock>(config, std::move(dispatcher), init);
    default: {
      const auto why = pattern_error(std::string(1, letter));
      throw std::invalid_argument(why.empty() ? std::string("no block for letter '") + letter + "'" : why);
    }
  }
}

}  // namespace ablate::model
