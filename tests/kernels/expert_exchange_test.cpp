// tests/kernels/expert_exchange_test.cpp: the pipelined exchanges of expert parallelism, dropless and at
// a capacity (kernels/moe_dispatch/expert_exchange.h) through a loopback exchange of one
// place, which logs what it is asked to start and wait for: every chunking of the experts gives the
// one-chunk exchange's output and gradients, and the log shows the pipeline (every chunk started out
// before the first chunk's experts run, each chunk's output started home before the next chunk's
// experts run; backward, every gradient started home before the first wait, and each chunk's gradient
// started back before the next chunk's is waited for). The rows through several ranks (Gloo) are
// tests/harness/distributed_test.cpp's.
// Run: build/tests/kernels_tests --gtest_filter='*ExpertExchange*'
#include "kernels/moe_dispatch/expert_exchange.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/moe_dispatch/expert_groups.h"
#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels {
namespace {

using testing::random_normal;
using testing::random_uniform;
using testing::relative_error;
using testing::seeded_generator;

// One place: the rows arrive as they were sent. Refuses a key started twice or waited for unstarted, as
// the harness's exchange does.
class Loopback : public ExpertExchange {
 public:
  struct Event {
    std::string what;  // "start", "wait", "experts"
    int64_t id;        // the key, or the chunk
  };
  int64_t ranks() const override { return 1; }
  int64_t rank() const override { return 0; }
  void start_all_to_all(int64_t key, torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                        const std::vector<int64_t>& in_splits) const override {
    EXPECT_EQ(out_splits, in_splits);
    EXPECT_TRUE(in_flight.emplace(key, out).second) << "key " << key << " started twice";
    out.copy_(in);
    log.push_back({"start", key});
  }
  torch::Tensor wait_all_to_all(int64_t key) const override {
    log.push_back({"wait", key});
    const auto it = in_flight.find(key);
    if (it == in_flight.end()) {
      ADD_FAILURE() << "key " << key << " waited for unstarted";
      return {};
    }
    auto out = it->second;
    in_flight.erase(it);
    return out;
  }
  mutable std::vector<Event> log;
  mutable std::map<int64_t, torch::Tensor> in_flight;
};

size_t first_index(const std::vector<Loopback::Event>& log, const std::string& what, int64_t id, size_t from = 0) {
  for (size_t i = from; i < log.size(); ++i)
    if (log[i].what == what && log[i].id == id) return i;
  ADD_FAILURE() << "no " << what << " " << id << " in the log";
  return log.size();
}

struct Result {
  torch::Tensor y, d_rows, d_weight, d_w;
  std::vector<Loopback::Event> forward, backward;
};

// 4 experts at one place, dropless or at capacity 10 of 48 slots (some experts drop, some fill less), the
// experts each a d x d matrix times the routing weight.
Result run(const std::vector<int64_t>& chunks, bool dropless) {
  constexpr int64_t kTokens = 24, kTop = 2, kExperts = 4, kWidth = 8, kCapacity = 10;
  auto gen = seeded_generator(11);
  // Expert 0 takes most slots (it drops), expert 3 few.
  const auto u = random_uniform({kTokens, kTop}, gen, 0, 1).to(torch::kFloat);
  const auto topk_idx = torch::where(u < 0.4, torch::zeros_like(u), (u * kExperts).floor().clamp(0, kExperts - 1)).to(torch::kLong);
  const auto groups = group_by_expert(topk_idx, kExperts);
  const auto rank = rank_in_expert(groups);
  auto rows = random_normal({kTokens * kTop, kWidth}, gen, 1.0, torch::kFloat).requires_grad_(true);
  auto weight = random_uniform({kTokens * kTop}, gen, 0.1, 1).to(torch::kFloat).requires_grad_(true);
  auto w = random_normal({kExperts, kWidth, kWidth}, gen, 0.3, torch::kFloat).requires_grad_(true);

  Loopback exchange;
  std::vector<int64_t> group_rows;  // the rows each call of the experts grouped
  const auto experts = [&](const torch::Tensor& r, const torch::Tensor& wt, const torch::Tensor& group_end, int64_t chunk) {
    exchange.log.push_back({"experts", chunk});
    const int64_t first = std::accumulate(chunks.begin(), chunks.begin() + chunk, int64_t{0}), n = chunks[chunk];
    EXPECT_EQ(group_end.size(0), n);
    const auto ends = group_end.to(torch::kLong);
    const auto sizes = ends - torch::cat({torch::zeros({1}, ends.options()), ends.narrow(0, 0, n - 1)});
    const auto row_expert = torch::repeat_interleave(torch::arange(first, first + n), sizes);
    const int64_t grouped = row_expert.size(0);
    group_rows.push_back(grouped);
    const auto out = torch::bmm(r.narrow(0, 0, grouped).unsqueeze(1), w.index_select(0, row_expert)).squeeze(1) *
                     wt.narrow(0, 0, grouped).unsqueeze(1);
    // Rows past the last group end are padding, left uncomputed by a grouped GEMM: NaN here, so that a
    // read of one shows in the outputs and gradients.
    return torch::cat({out, torch::full({r.size(0) - grouped, r.size(1)}, NAN, out.options())});
  };
  Result out;
  out.y = dropless ? exchange_expert_rows(exchange, rows, weight, groups.load, chunks, experts)
                   : exchange_capacity_rows(exchange, rows, weight, groups, rank, kCapacity, chunks, experts);
  out.forward = exchange.log;
  exchange.log.clear();
  (out.y * random_normal(out.y.sizes(), gen, 1.0, torch::kFloat)).sum().backward();
  out.backward = exchange.log;
  EXPECT_TRUE(exchange.in_flight.empty()) << exchange.in_flight.size() << " exchanges never waited for";
  out.d_rows = rows.grad(), out.d_weight = weight.grad(), out.d_w = w.grad();
  for (const auto& t : {out.y, out.d_rows, out.d_weight, out.d_w})
    EXPECT_TRUE(torch::isfinite(t).all().item<bool>()) << "a padding row was read";
  // The experts group the kept slots alone, at a capacity as dropless (every slot kept).
  const int64_t kept = (rank < kCapacity).sum().item<int64_t>();
  EXPECT_EQ(std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0}), dropless ? kTokens * kTop : kept);
  if (dropless) return out;
  // Dropped slots come back as zero rows.
  const auto dropped = (rank >= kCapacity).nonzero().view({-1});
  EXPECT_GT(dropped.numel(), 0) << "the routing is meant to drop slots";
  EXPECT_EQ(out.y.index_select(0, dropped).abs().max().item().toFloat(), 0.0f);
  return out;
}

class ExpertExchangeBoth : public ::testing::TestWithParam<bool> {};  // dropless, or at a capacity

TEST_P(ExpertExchangeBoth, EveryChunkingGivesTheOneChunkExchangeRowForRow) {
  const auto whole = run({4}, GetParam());
  for (const auto& chunks : std::vector<std::vector<int64_t>>{{2, 2}, {2, 1, 1}, {1, 1, 1, 1}}) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    const auto piped = run(chunks, GetParam());
    // Each expert's rows run together in either case: the same products, bit for bit.
    EXPECT_TRUE(torch::equal(piped.y, whole.y));
    EXPECT_TRUE(torch::equal(piped.d_rows, whole.d_rows));
    EXPECT_TRUE(torch::equal(piped.d_weight, whole.d_weight));
    // The test's experts gather their matrices per chunk, so autograd sums a matrix's gradient in
    // another order: fp32 rounding.
    EXPECT_LT(relative_error(piped.d_w, whole.d_w), 1e-6);
  }
}

TEST_P(ExpertExchangeBoth, ChunksTravelWhileOtherChunksRun) {
  const std::vector<int64_t> chunks{2, 1, 1};
  const int64_t n = static_cast<int64_t>(chunks.size());
  const auto r = run(chunks, GetParam());
  // Either exchange first sends its counts (the loads dropless, the kept counts at a capacity; started
  // and waited for at once): the chunks' keys follow. Forward: rows and weights of every chunk started
  // (keys 2c, 2c + 1), then chunk by chunk: its waits, its experts, its output started home (keys
  // 2n + c), and the homes waited for last.
  const int64_t base = 1;
  auto f = r.forward, b = r.backward;
  ASSERT_GE(f.size(), 2u);
  EXPECT_EQ(f[0].what, "start");
  EXPECT_EQ(f[1].what, "wait");
  EXPECT_EQ(f[1].id, f[0].id);
  f.erase(f.begin(), f.begin() + 2);
  for (auto* log : {&f, &b})
    for (auto& e : *log)
      if (e.what != "experts") e.id -= base;
  const size_t first_experts = first_index(f, "experts", 0);
  for (int64_t c = 0; c < n; ++c) {
    EXPECT_LT(first_index(f, "start", 2 * c), first_experts) << "chunk " << c << " out before the first experts";
    EXPECT_LT(first_index(f, "start", 2 * c + 1), first_experts);
    const size_t experts = first_index(f, "experts", c);
    EXPECT_LT(first_index(f, "wait", 2 * c), experts);
    if (c + 1 < n) {
      EXPECT_LT(first_index(f, "start", 2 * n + c), first_index(f, "experts", c + 1))
          << "chunk " << c << "'s output home before chunk " << c + 1 << "'s experts";
      EXPECT_GT(first_index(f, "wait", 2 * c + 2), experts) << "chunk " << c + 1 << " waited for after chunk " << c
                                                           << "'s experts ran, not before";
    }
  }
  // Backward: every output gradient started home before the first wait; then each chunk's gradients
  // started back before the next chunk (made earlier, run later) is waited for.
  ASSERT_FALSE(b.empty());
  size_t first_wait = b.size();
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i].what == "wait") first_wait = std::min(first_wait, i);
  for (int64_t c = 0; c < n; ++c) EXPECT_LT(first_index(b, "start", 2 * n + c), first_wait) << "chunk " << c;
  for (int64_t c = n - 1; c > 0; --c)
    EXPECT_LT(first_index(b, "start", 2 * c), first_index(b, "wait", 2 * n + c - 1))
        << "chunk " << c << "'s row gradients go back before chunk " << c - 1 << "'s gradient is waited for";
  EXPECT_EQ(std::count_if(b.begin(), b.end(), [](const auto& e) { return e.what == "start"; }), 3 * n);
}

INSTANTIATE_TEST_SUITE_P(ExpertExchange, ExpertExchangeBoth, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Dropless" : "Capacity"; });

TEST(ExpertExchange, ChunkSizesSplitTheExpertsAndRefuseEmptyChunks) {
  EXPECT_EQ(expert_chunk_sizes(4, 1), (std::vector<int64_t>{4}));
  EXPECT_EQ(expert_chunk_sizes(4, 3), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(expert_chunk_sizes(8, 3), (std::vector<int64_t>{3, 3, 2}));
  EXPECT_EQ(expert_chunk_sizes(4, 4), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_THROW(expert_chunk_sizes(4, 5), c10::Error);
  EXPECT_THROW(expert_chunk_sizes(4, 0), c10::Error);
}

}  // namespace
}  // namespace ablate::kernels
