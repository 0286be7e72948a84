// kernels/moe_dispatch/expert_parallel.cpp: exchange_expert_rows and exchange_capacity_rows
// (expert_exchange.h), the all-to-all dispatches of expert parallelism. Dropless: the loads go out first
// (an all-to-all of E counts, read on the host once: they are the splits), then the rows and their
// routing weights to the ranks of their experts, which group what arrives by local expert (a stable
// counting sort: source rank order kept inside each expert's group), run their experts, and send the
// output rows back the way they came. Under a capacity every (rank, expert) pair sends `capacity` rows,
// so the splits are the same in every step (no host read), and a fixed all-to-all of the kept counts
// lets each rank run its experts on the kept rows alone, packed on the device. Both run
// in chunks of a rank's experts through one pipeline (`pipelined`), each exchange a start and a wait
// node (StartRows, WaitRows).
// Tests: tests/harness/distributed_test.cpp (Gloo ranks, expert_parallel 2 against 1).
#include "kernels/moe_dispatch/expert_exchange.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/moe_dispatch/expert_groups.h"

namespace ablate::kernels {
namespace {

int64_t total(const std::vector<int64_t>& splits) { return std::accumulate(splits.begin(), splits.end(), int64_t{0}); }

// One exchange as two autograd nodes, so that what reads its rows waits and nothing before:
// StartRows starts `in`'s rows out under `key` (its output is not readable yet) and WaitRows makes them
// readable. Backward the other way round: WaitRows' backward starts the gradient's rows back (the splits
// swapped) under the same key and passes its gradient on untouched, and StartRows' backward waits for
// the rows back, which are its input's gradient. Every rank builds the same graph, so every rank starts
// the backward's exchanges in the same order too.
struct Route {
  const ExpertExchange* exchange;
  int64_t key;
  std::vector<int64_t> out_splits, in_splits;
};

void save_route(torch::autograd::AutogradContext* ctx, const Route& route) {
  // The exchange outlives every backward of the run (the harness holds it), so its address is saved.
  ctx->saved_data["exchange"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(route.exchange));
  ctx->saved_data["key"] = route.key;
  ctx->saved_data["out_splits"] = route.out_splits;
  ctx->saved_data["in_splits"] = route.in_splits;
}

Route saved_route(torch::autograd::AutogradContext* ctx) {
  return {reinterpret_cast<const ExpertExchange*>(static_cast<intptr_t>(ctx->saved_data["exchange"].toInt())),
          ctx->saved_data["key"].toInt(), ctx->saved_data["out_splits"].toIntVector(),
          ctx->saved_data["in_splits"].toIntVector()};
}

// `in`'s rows by in_splits into a new tensor of out_splits' rows, started.
torch::Tensor start_rows(const Route& route, const torch::Tensor& in) {
  auto shape = in.sizes().vec();
  shape[0] = total(route.out_splits);
  auto out = torch::empty(shape, in.options());
  route.exchange->start_all_to_all(route.key, out, in.contiguous(), route.out_splits, route.in_splits);
  return out;
}

class StartRows : public torch::autograd::Function<StartRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in, const Route& route) {
    save_route(ctx, route);
    return start_rows(route, in);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    const auto route = saved_route(ctx);
    return {route.exchange->wait_all_to_all(route.key), torch::Tensor()};  // WaitRows' backward started it
  }
};

class WaitRows : public torch::autograd::Function<WaitRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& started,
                               const Route& route) {
    save_route(ctx, route);
    ctx->saved_data["shape"] = started.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(started.scalar_type());
    ctx->saved_data["device"] = started.device();
    route.exchange->wait_all_to_all(route.key);
    return started;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto back = saved_route(ctx);
    std::swap(back.out_splits, back.in_splits);
    // Every rank takes part in the backward exchange, with or without a gradient to send.
    const auto g = grads[0].defined()
                       ? grads[0]
                       : torch::zeros(ctx->saved_data["shape"].toIntVector(),
                                      torch::TensorOptions()
                                          .dtype(static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt()))
                                          .device(ctx->saved_data["device"].toDevice()));
    start_rows(back, g);
    return {g, torch::Tensor()};  // StartRows' backward reads the rows back
  }
};

// Rows started out under a fresh key, and the same rows once arrived.
torch::Tensor started_rows(const ExpertExchange& exchange, const torch::Tensor& in,
                           const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits,
                           Route* route) {
  *route = {&exchange, exchange.new_key(), out_splits, in_splits};
  return StartRows::apply(in, *route);
}
torch::Tensor arrived_rows(const torch::Tensor& started, const Route& route) { return WaitRows::apply(started, route); }

// x's rows, a zero row appended, gathered by `index` (an index of x.size(0) reads the zero row); the
// backward is the same gather of the gradient by `inverse` (each x row's place in the output, or the
// output's size where no place reads it), valid because no x row is read twice. Both ways a gather:
// index_select's own backward is a scatter-add, whose atomics pile every padding place onto the one zero
// row. (A permutation without padding is gather_slot_rows with k = 1.)
class GatherRowsOrZero : public torch::autograd::Function<GatherRowsOrZero> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& index,
                               const torch::Tensor& inverse) {
    ctx->save_for_backward({inverse});
    return gather_rows_or_zero(x, index);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto inverse = ctx->get_saved_variables()[0];
    return {gather_rows_or_zero(grads[0], inverse), torch::Tensor(), torch::Tensor()};
  }
};

// Chunks of consecutive local experts that cover the place's `local` experts, none empty.
void check_chunks(const std::vector<int64_t>& chunk_experts, int64_t local) {
  TORCH_CHECK(!chunk_experts.empty() && total(chunk_experts) == local &&
                  std::all_of(chunk_experts.begin(), chunk_experts.end(), [](int64_t n) { return n >= 1; }),
              "expert parallel: chunks of ", c10::IntArrayRef(chunk_experts), " experts do not split ", local);
}

// The pipeline both exchanges run, over chunks of a rank's experts: every chunk's rows and routing
// weights started out at once (sends[c] to the places by splits[c].out rows each, splits[c].in rows
// arriving from each), then chunk by chunk: its rows waited for, its experts run on them (`run`: the
// arrived rows and weights, in source-place order, to output rows in the same order), and the output
// started home at once; last every chunk's output waited for. Returns each chunk's rows home, in the
// order they went out.
struct ChunkSplits {
  std::vector<int64_t> out, in;  // rows to / from each place
};
using RunChunk = std::function<torch::Tensor(int64_t chunk, const torch::Tensor& rows, const torch::Tensor& weight)>;

std::vector<torch::Tensor> pipelined(const ExpertExchange& exchange, const std::vector<torch::Tensor>& sends,
                                     const std::vector<torch::Tensor>& send_weights,
                                     const std::vector<ChunkSplits>& splits, const RunChunk& run) {
  const size_t chunks = splits.size();
  std::vector<torch::Tensor> started, started_weights, started_home, home;
  std::vector<Route> routes(chunks), weight_routes(chunks), home_routes(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    started.push_back(started_rows(exchange, sends[c], splits[c].in, splits[c].out, &routes[c]));
    started_weights.push_back(
        started_rows(exchange, send_weights[c], splits[c].in, splits[c].out, &weight_routes[c]));
  }
  for (size_t c = 0; c < chunks; ++c) {
    const auto out = run(static_cast<int64_t>(c), arrived_rows(started[c], routes[c]),
                         arrived_rows(started_weights[c], weight_routes[c]).view({-1}));
    started_home.push_back(started_rows(exchange, out, splits[c].out, splits[c].in, &home_routes[c]));
  }
  for (size_t c = 0; c < chunks; ++c) home.push_back(arrived_rows(started_home[c], home_routes[c]));
  return home;
}

// The experts a place holds (E/N); both exchanges split E the same way.
int64_t experts_a_place(const ExpertExchange& exchange, int64_t experts) {
  const int64_t ranks = exchange.ranks();
  TORCH_CHECK(ranks >= 1 && experts % ranks == 0, "expert parallel: ", experts, " experts do not split over ", ranks,
              " ranks");
  return experts / ranks;
}

}  // namespace

torch::Tensor exchange_expert_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                   const torch::Tensor& weight, const torch::Tensor& load,
                                   const std::vector<int64_t>& chunk_experts, const LocalExperts& local_experts) {
  const int64_t ranks = exchange.ranks(), experts = load.size(0), local = experts_a_place(exchange, experts);
  TORCH_CHECK(rows.dim() == 2 && weight.dim() == 1 && weight.size(0) == rows.size(0),
              "expert parallel: rows must be [S, d] and weight [S]");
  check_chunks(chunk_experts, local);

  // What each rank sends to each of this rank's experts: [ranks, local], source-rank major.
  const auto send_counts = load.to(torch::kLong).contiguous();
  const auto recv_counts = torch::empty_like(send_counts);
  auto recv_rows = recv_counts.view({ranks, local});  // one row of `local` counts from each rank
  exchange.all_to_all(recv_rows, send_counts.view({ranks, local}), std::vector<int64_t>(ranks, 1),
                      std::vector<int64_t>(ranks, 1));
  const auto host = torch::cat({send_counts, recv_counts}).cpu();  // the one host read of the dispatch
  const auto* counts = host.data_ptr<int64_t>();
  const int64_t chunks = static_cast<int64_t>(chunk_experts.size());
  std::vector<int64_t> first(1, 0);
  for (const int64_t n : chunk_experts) first.push_back(first.back() + n);
  std::vector<ChunkSplits> splits(chunks, {std::vector<int64_t>(ranks, 0), std::vector<int64_t>(ranks, 0)});
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t q = 0; q < ranks; ++q)
      for (int64_t j = first[c]; j < first[c + 1]; ++j) {
        splits[c].out[q] += counts[q * local + j];
        splits[c].in[q] += counts[experts + q * local + j];
      }
  int64_t sent = 0;
  for (const auto& c : splits) sent += total(c.out);
  TORCH_CHECK(sent == rows.size(0), "expert parallel: the loads count ", sent, " slots but ", rows.size(0),
              " rows were given");

  // Chunk-major order of the rows (sorted by global expert, so a place's rows of a chunk's experts are
  // one contiguous run): chunk by chunk, place by place. One chunk: the order as it is.
  torch::Tensor order, inverse;
  std::vector<int64_t> chunk_rows;
  for (const auto& c : splits) chunk_rows.push_back(total(c.out));
  if (chunks > 1) {
    std::vector<int64_t> expert_start(experts + 1, 0), index;
    for (int64_t e = 0; e < experts; ++e) expert_start[e + 1] = expert_start[e] + counts[e];
    index.reserve(static_cast<size_t>(sent));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t q = 0; q < ranks; ++q)
        for (int64_t r = expert_start[q * local + first[c]]; r < expert_start[q * local + first[c + 1]]; ++r)
          index.push_back(r);
    std::vector<int64_t> back(index.size());
    for (size_t i = 0; i < index.size(); ++i) back[static_cast<size_t>(index[i])] = static_cast<int64_t>(i);
    order = torch::tensor(index, torch::kLong).to(rows.device());
    inverse = torch::tensor(back, torch::kLong).to(rows.device());
  }
  const auto chunk_major = [&](const torch::Tensor& t) {
    return (chunks > 1 ? gather_slot_rows(t, order, inverse, 1) : t).split_with_sizes(chunk_rows);
  };

  const auto home = pipelined(
      exchange, chunk_major(rows), chunk_major(weight.view({-1, 1})), splits,
      [&](int64_t c, const torch::Tensor& arrived, const torch::Tensor& arrived_weight) {
        // Each arrived row's expert in the chunk, then the rows grouped by it (k = 1: one slot a row).
        const int64_t n = chunk_experts[c], received = total(splits[c].in);
        const auto local_ids = torch::arange(n, send_counts.options()).repeat({ranks});
        const auto chunk_counts = recv_rows.narrow(1, first[c], n).reshape({-1});
        const auto row_expert = torch::repeat_interleave(local_ids, chunk_counts, /*dim=*/0, /*output_size=*/received);
        const auto groups = group_by_expert(row_expert.view({-1, 1}), n);
        const auto grouped = gather_slot_rows(arrived, groups.by_expert, groups.position, 1);
        const auto grouped_weight = gather_slot_rows(arrived_weight.view({-1, 1}), groups.by_expert, groups.position, 1).view({-1});
        const auto out = local_experts(grouped, grouped_weight, groups.group_end, c);
        // Back into arrival order (a permutation: exact in any dtype).
        return combine_slot_rows(out, groups.by_expert, groups.position, 1, out.scalar_type());
      });
  const auto whole = chunks > 1 ? torch::cat(home) : home.front();
  return chunks > 1 ? gather_slot_rows(whole, inverse, order, 1) : whole;
}

std::vector<int64_t> expert_chunk_sizes(int64_t local_experts, int64_t chunks) {
  TORCH_CHECK(local_experts >= 1 && chunks >= 1 && chunks <= local_experts, "expert parallel: ", chunks,
              " chunks of ", local_experts, " experts a rank (a chunk holds at least one)");
  std::vector<int64_t> sizes(chunks, local_experts / chunks);
  for (int64_t c = 0; c < local_experts % chunks; ++c) ++sizes[c];
  return sizes;
}

namespace {

// The send buffer of a pipelined capacity exchange, chunk after chunk: chunk c holds, for each place q
// in order, `capacity` rows for each of its local experts [first_c, first_c + n_c), i.e. global experts
// q E/N + first_c + i. Chunk-major, so each chunk is one contiguous block with splits of n_c capacity
// rows a place; one chunk is plain expert order.
class ChunkLayout {
 public:
  ChunkLayout(int64_t ranks, int64_t local, int64_t capacity, std::vector<int64_t> sizes)
      : ranks_(ranks), local_(local), capacity_(capacity), sizes_(std::move(sizes)) {}
  int64_t chunks() const { return static_cast<int64_t>(sizes_.size()); }
  int64_t experts(int64_t c) const { return sizes_[c]; }
  int64_t rows(int64_t c) const { return ranks_ * sizes_[c] * capacity_; }
  std::vector<int64_t> rows() const {
    std::vector<int64_t> r;
    for (int64_t c = 0; c < chunks(); ++c) r.push_back(rows(c));
    return r;
  }
  std::vector<int64_t> splits(int64_t c) const { return std::vector<int64_t>(ranks_, sizes_[c] * capacity_); }
  // The buffer row of (global expert, position) pairs, device tensors: the local expert j = expert %
  // (E/N) lies in the chunk whose first expert is the last first <= j.
  torch::Tensor row_of(const torch::Tensor& expert, const torch::Tensor& position) const {
    const auto place = expert.div(local_, "floor"), j = expert.remainder(local_);
    auto first = torch::zeros_like(j), size = torch::full_like(j, sizes_.front());
    for (int64_t c = 1, start = sizes_.front(); c < chunks(); start += sizes_[c++]) {
      const auto later = j >= start;
      first = torch::where(later, start, first);
      size = torch::where(later, sizes_[c], size);
    }
    return capacity_ * (ranks_ * first + place * size + (j - first)) + position;
  }

 private:
  int64_t ranks_, local_, capacity_;
  std::vector<int64_t> sizes_;
};

// The packing of what arrives at a capacity: R = places x n x capacity rows in arrival order (place q,
// expert j, position p), of which the first kept[q][j] of each block are slots. Packed, expert j's rows
// from every place in place order, expert after expert, the padding after all of them.
struct PackedRows {
  torch::Tensor source;     // [R] the arrival row of each packed row; R (the zero row) past the last group
  torch::Tensor place;      // [R] each arrival row's packed row; R where it is padding
  torch::Tensor group_end;  // [n] int32: the grouped GEMM's offsets over the packed rows
};
PackedRows packed_rows(const torch::Tensor& kept, int64_t capacity) {
  const int64_t places = kept.size(0), n = kept.size(1), rows = places * n * capacity;
  const auto index = kept.options();
  const auto b = torch::arange(rows, index);
  const auto block = b.div(capacity, "floor"), position = b.remainder(capacity);  // block = q n + j
  const auto q = block.div(n, "floor"), j = block.remainder(n);
  const auto expert_major = kept.t().contiguous().view({-1});  // [n places]: (j, q)
  const auto block_start = expert_major.cumsum(0) - expert_major;
  const auto is_slot = position < kept.reshape({-1}).index_select(0, block);
  const auto packed = block_start.index_select(0, j * places + q) + position;
  // Padding rows scatter to places of their own past R (so every index is written once: deterministic),
  // which the narrow drops; the packed rows they leave unwritten read the zero row.
  const auto source = torch::full({2 * rows}, rows, index)
                          .index_copy_(0, torch::where(is_slot, packed, rows + b), b)
                          .narrow(0, 0, rows);
  return {source, torch::where(is_slot, packed, torch::full({}, rows, index)),
          kept.sum(0).cumsum(0).to(torch::kInt)};
}

}  // namespace

torch::Tensor exchange_capacity_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                     const torch::Tensor& weight, const ExpertGroups& groups,
                                     const torch::Tensor& rank, int64_t capacity,
                                     const std::vector<int64_t>& chunk_experts, const LocalExperts& local_experts) {
  const int64_t ranks = exchange.ranks(), experts = groups.load.size(0), slots = rows.size(0),
                local = experts_a_place(exchange, experts);
  TORCH_CHECK(rows.dim() == 2 && weight.dim() == 1 && weight.size(0) == slots && groups.by_expert.size(0) == slots &&
                  rank.size(0) == slots,
              "expert parallel: rows must be [S, d], weight and rank [S], S the grouped slots");
  TORCH_CHECK(capacity >= 1, "expert parallel: a capacity of ", capacity, " rows");
  check_chunks(chunk_experts, local);
  const ChunkLayout layout(ranks, local, capacity, chunk_experts);
  const int64_t buffer = experts * capacity;
  const auto index = groups.load.options().dtype(torch::kLong);

  // Send-buffer row layout.row_of(e, p) holds expert e's slot at position p of its group, or a zero row
  // (index `slots`) where the expert has fewer slots: gathers (deterministic), no scatter.
  const auto b = torch::arange(buffer, index);
  const auto expert = b.div(capacity, "floor"), position = b.remainder(capacity);
  const auto source_by_expert = torch::where(position < groups.load.index_select(0, expert),
                                             groups.group_start.index_select(0, expert) + position,
                                             torch::full({}, slots, index));
  const auto source = layout.chunks() == 1 ? source_by_expert
                                           : torch::empty_like(source_by_expert)
                                                 .index_copy_(0, layout.row_of(expert, position), source_by_expert);
  // Each kept slot's row in the chunks (the inverse of `source`); a dropped slot the zero row's index.
  const auto slot_row = torch::where(rank < capacity, layout.row_of(groups.sorted_expert.to(torch::kLong), rank),
                                     torch::full({}, buffer, index));
  const auto send = GatherRowsOrZero::apply(rows, source, slot_row).split_with_sizes(layout.rows());
  const auto send_weight =
      GatherRowsOrZero::apply(weight.view({-1, 1}), source, slot_row).split_with_sizes(layout.rows());

  // How many of each expert's `capacity` rows are kept slots, to every place (a fixed all-to-all of E/N
  // counts a place, on the device: no host read): the experts then run on the kept rows alone.
  const auto kept = groups.load.clamp_max(capacity).to(torch::kLong).contiguous();
  auto arriving_kept = torch::empty_like(kept);
  {
    auto into = arriving_kept.view({ranks, local});
    exchange.all_to_all(into, kept.view({ranks, local}), std::vector<int64_t>(ranks, 1), std::vector<int64_t>(ranks, 1));
  }
  const auto kept_from = arriving_kept.view({ranks, local});  // [source place, local expert]

  // Place q gets, for each of its chunk-c experts, `capacity` rows from every place: [source place,
  // expert, capacity], each block's kept rows first. They are packed expert-major (source place order
  // inside each expert's group, as the dropless path groups them) with the padding left out, so the
  // grouped GEMMs run ~the kept slots, not capacity_factor x the slots; the output goes home place-major.
  std::vector<ChunkSplits> splits;
  for (int64_t c = 0; c < layout.chunks(); ++c) splits.push_back({layout.splits(c), layout.splits(c)});
  std::vector<int64_t> first(1, 0);
  for (const int64_t n : chunk_experts) first.push_back(first.back() + n);
  auto home = pipelined(exchange, send, send_weight, splits,
                        [&](int64_t c, const torch::Tensor& arrived, const torch::Tensor& arrived_weight) {
                          const auto pack = packed_rows(kept_from.narrow(1, first[c], layout.experts(c)), capacity);
                          const auto out = local_experts(
                              GatherRowsOrZero::apply(arrived, pack.source, pack.place),
                              GatherRowsOrZero::apply(arrived_weight.view({-1, 1}), pack.source, pack.place).view({-1}),
                              pack.group_end, c);
                          // Rows past the last group end are not computed (never read here either).
                          return GatherRowsOrZero::apply(out, pack.place, pack.source);
                        });
  // Each kept slot its row of the chunks; a dropped slot the zero row.
  return GatherRowsOrZero::apply(layout.chunks() == 1 ? home.front() : torch::cat(home), slot_row, source);
}

}  // namespace ablate::kernels
