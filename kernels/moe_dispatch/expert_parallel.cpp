// kernels/moe_dispatch/expert_parallel.cpp: exchange_expert_rows and exchange_capacity_rows
// (expert_exchange.h), the all-to-all dispatches of expert parallelism. Dropless: the loads go out first
// (an all-to-all of E counts, read on the host once: they are the splits), then the rows and their
// routing weights to the ranks of their experts, which group what arrives by local expert (a stable
// counting sort: source rank order kept inside each expert's group), run their experts, and send the
// output rows back the way they came. Under a capacity every (rank, expert) pair sends `capacity` rows,
// so the splits and the arriving groups are known without a count and the same in every step.
// Tests: tests/harness/distributed_test.cpp (Gloo ranks, expert_parallel 2 against 1).
#include "kernels/moe_dispatch/expert_exchange.h"

#include <cstdint>
#include <numeric>

#include "kernels/moe_dispatch/expert_groups.h"

namespace ablate::kernels {
namespace {

int64_t total(const std::vector<int64_t>& splits) { return std::accumulate(splits.begin(), splits.end(), int64_t{0}); }

// Rows to the ranks of the group by `in_splits`, `out_splits` rows from each back; the backward sends
// the gradient rows the other way with the splits swapped.
class AllToAllRows : public torch::autograd::Function<AllToAllRows> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in,
                               const ExpertExchange* exchange, const std::vector<int64_t>& out_splits,
                               const std::vector<int64_t>& in_splits) {
    // The exchange outlives every backward of the run (the harness holds it), so its address is saved.
    ctx->saved_data["exchange"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(exchange));
    ctx->saved_data["out_splits"] = out_splits;
    ctx->saved_data["in_splits"] = in_splits;
    return exchange_rows(*exchange, in.contiguous(), out_splits, in_splits);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* exchange = reinterpret_cast<const ExpertExchange*>(static_cast<intptr_t>(ctx->saved_data["exchange"].toInt()));
    const auto out_splits = ctx->saved_data["out_splits"].toIntVector();
    const auto in_splits = ctx->saved_data["in_splits"].toIntVector();
    // Every rank takes part in the backward exchange, with or without a gradient to send.
    auto g = grads[0];
    if (!g.defined()) throw std::logic_error("expert parallel: an all-to-all's output got no gradient");
    return {exchange_rows(*exchange, g.contiguous(), in_splits, out_splits), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }

 private:
  static torch::Tensor exchange_rows(const ExpertExchange& exchange, const torch::Tensor& in,
                                     const std::vector<int64_t>& out_splits, const std::vector<int64_t>& in_splits) {
    auto shape = in.sizes().vec();
    shape[0] = total(out_splits);
    auto out = torch::empty(shape, in.options());
    exchange.all_to_all(out, in, out_splits, in_splits);
    return out;
  }
};

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
                                   const LocalExperts& local_experts) {
  const int64_t ranks = exchange.ranks(), experts = load.size(0), local = experts_a_place(exchange, experts);
  TORCH_CHECK(rows.dim() == 2 && weight.dim() == 1 && weight.size(0) == rows.size(0),
              "expert parallel: rows must be [S, d] and weight [S]");

  // What each rank sends to each of this rank's experts: [ranks, local], source-rank major.
  const auto send_counts = load.to(torch::kLong).contiguous();
  const auto recv_counts = torch::empty_like(send_counts);
  auto recv_rows = recv_counts.view({ranks, local});  // one row of `local` counts from each rank
  exchange.all_to_all(recv_rows, send_counts.view({ranks, local}), std::vector<int64_t>(ranks, 1),
                      std::vector<int64_t>(ranks, 1));
  const auto host = torch::cat({send_counts, recv_counts}).cpu();  // the one host read of the dispatch
  const auto* counts = host.data_ptr<int64_t>();
  std::vector<int64_t> send_splits(ranks, 0), recv_splits(ranks, 0);
  for (int64_t q = 0; q < ranks; ++q)
    for (int64_t j = 0; j < local; ++j) {
      send_splits[q] += counts[q * local + j];
      recv_splits[q] += counts[experts + q * local + j];
    }
  TORCH_CHECK(total(send_splits) == rows.size(0), "expert parallel: the loads count ", total(send_splits),
              " slots but ", rows.size(0), " rows were given");

  const auto arrived = AllToAllRows::apply(rows, &exchange, recv_splits, send_splits);
  const auto arrived_weight = AllToAllRows::apply(weight.view({-1, 1}), &exchange, recv_splits, send_splits);

  // Each arrived row's local expert, then the rows grouped by it (k = 1: one slot a row).
  const int64_t received = total(recv_splits);
  const auto local_ids = torch::arange(local, send_counts.options()).repeat({ranks});
  const auto row_expert = torch::repeat_interleave(local_ids, recv_counts, /*dim=*/0, /*output_size=*/received);
  const auto groups = group_by_expert(row_expert.view({-1, 1}), local);
  const auto grouped = gather_slot_rows(arrived, groups.by_expert, groups.position, 1);
  const auto grouped_weight = gather_slot_rows(arrived_weight, groups.by_expert, groups.position, 1).view({-1});

  const auto out = local_experts(grouped, grouped_weight, groups.group_end);
  // Back into arrival order (a permutation: exact in any dtype), then home.
  const auto in_arrival_order = combine_slot_rows(out, groups.by_expert, groups.position, 1, out.scalar_type());
  return AllToAllRows::apply(in_arrival_order, &exchange, send_splits, recv_splits);
}

torch::Tensor exchange_capacity_rows(const ExpertExchange& exchange, const torch::Tensor& rows,
                                     const torch::Tensor& weight, const ExpertGroups& groups,
                                     const torch::Tensor& rank, int64_t capacity, const LocalExperts& local_experts) {
  const int64_t ranks = exchange.ranks(), experts = groups.load.size(0), slots = rows.size(0),
                local = experts_a_place(exchange, experts);
  TORCH_CHECK(rows.dim() == 2 && weight.dim() == 1 && weight.size(0) == slots && groups.by_expert.size(0) == slots &&
                  rank.size(0) == slots,
              "expert parallel: rows must be [S, d], weight and rank [S], S the grouped slots");
  TORCH_CHECK(capacity >= 1, "expert parallel: a capacity of ", capacity, " rows");
  const int64_t buffer = experts * capacity;
  const auto index = groups.load.options().dtype(torch::kLong);

  // Send-buffer row b holds expert b / capacity's slot at position b % capacity of its group, or a zero
  // row (index `slots`) where the expert has fewer slots: gathers (deterministic), no scatter.
  const auto b = torch::arange(buffer, index);
  const auto expert = b.div(capacity, "floor"), position = b.remainder(capacity);
  const auto source = torch::where(position < groups.load.index_select(0, expert),
                                   groups.group_start.index_select(0, expert) + position, torch::full({}, slots, index));
  const auto with_zero_row = [](const torch::Tensor& t) {
    return torch::cat({t, torch::zeros({1, t.size(1)}, t.options())});
  };
  const auto send = with_zero_row(rows).index_select(0, source);
  const auto send_weight = with_zero_row(weight.view({-1, 1})).index_select(0, source);

  // Every place gets `capacity` rows for each of its E/N experts from every place: [source place, local
  // expert, capacity], regrouped expert-major (source place order inside each expert's group, as the
  // dropless path groups them).
  const std::vector<int64_t> splits(ranks, local * capacity);
  const auto expert_major = [&](const torch::Tensor& t) {
    return t.view({ranks, local, capacity, t.size(1)}).transpose(0, 1).reshape({buffer, t.size(1)});
  };
  const auto arrived = expert_major(AllToAllRows::apply(send, &exchange, splits, splits));
  const auto arrived_weight = expert_major(AllToAllRows::apply(send_weight, &exchange, splits, splits)).view({-1});
  const auto group_end = (torch::arange(1, local + 1, index) * (ranks * capacity)).to(torch::kInt);
  const auto out = local_experts(arrived, arrived_weight, group_end);

  // Back to source-place order and home, then each kept slot its row; a dropped slot the zero row.
  const auto place_major =
      out.view({local, ranks, capacity, out.size(1)}).transpose(0, 1).reshape({buffer, out.size(1)});
  const auto home = AllToAllRows::apply(place_major, &exchange, splits, splits);
  const auto slot_row = torch::where(rank < capacity, groups.sorted_expert.to(torch::kLong) * capacity + rank,
                                     torch::full({}, buffer, index));
  return with_zero_row(home).index_select(0, slot_row);
}

}  // namespace ablate::kernels
