// kernels/moe_dispatch/grouped_dispatch.cpp: grouped_dispatch (grouped_dispatch.h), dropless MoE without
// a host sync, its expert GEMMs a parameter. The (token, slot) assignments are sorted by expert on the
// device (one counting-sort kernel on CUDA, group_by_expert), which also gives the per-expert offsets,
// and the GEMM step runs each expert's rows against its weights in one grouped GEMM per matmul (gate
// and up projections side by side in one), however uneven the load. Token rows go into expert order by
// a gather, and come back by a sum of each token's k slot rows (gather_slot_rows, combine_slot_rows:
// expert_groups.h), each the other's backward; the SwiGLU and the routing weight are one pass over the
// hidden rows before the down projection (weighted_swiglu). On CUDA those passes are fused kernels
// (expert_kernels.cu); no scatter-add, forward or backward. Nothing is padded to a capacity and nothing
// is read on the host, so a CUDA graph can capture the dropless path.
// Under expert parallelism (an ExpertExchange of N ranks: this rank holds E/N experts) the rows sorted
// by global expert travel to their experts' ranks and back (expert_exchange.h); the GEMMs and the
// weighted SwiGLU between them run on what arrived, the same passes as above. A capacity factor keeps
// the standard path's semantics: slots past capacity (in token order) get weight 0 and are counted
// (they are computed, not skipped: no shapes depend on the data); under expert parallelism they are not
// sent, and every expert gets a fixed capacity of rows from each rank (exchange_capacity_rows: no host
// read, fixed all-to-alls), where the dropless exchange reads the loads on the host for its splits;
// either exchange may run a rank's experts in pipelined chunks (ExpertExchange::chunks), the GEMM step
// making one weight operand a chunk (ExpertShape::chunks).
// Contract: MoeDispatchFn in kernels/seams.h. Arithmetic in the autocast dtype when autocast is on, else
// in x's dtype; d and f are zero-padded to multiples of 8 when they are not (exact: padded rows and
// columns contribute zeros and are sliced off).
#include "kernels/moe_dispatch/grouped_dispatch.h"

#include <ATen/autocast_mode.h>

#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/numerics.h"

namespace ablate::kernels {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Zero-pads the last two dims of `t` to (rows, cols).
torch::Tensor pad_to(const torch::Tensor& t, int64_t rows, int64_t cols) {
  const int64_t r = t.size(-2), c = t.size(-1);
  if (r == rows && c == cols) return t;
  return torch::constant_pad_nd(t, {0, cols - c, 0, rows - r});
}

}  // namespace

torch::Tensor grouped_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                               const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                               double capacity_factor, torch::Tensor* dropped, const ExpertExchange* exchange,
                               const ExpertGemmStep& gemms) {
  check_moe_dispatch_args(x, topk_idx, topk_w, w1, w3, w2, capacity_factor);
  const bool across_ranks = exchange != nullptr && exchange->ranks() > 1;
  const int64_t tokens = x.size(0), d = x.size(1), k = topk_idx.size(1), f = w1.size(1);
  const int64_t experts = w1.size(0) * (across_ranks ? exchange->ranks() : 1);  // the group's, by global id
  const int64_t slots = tokens * k;
  const auto index_opts = torch::TensorOptions().dtype(torch::kLong).device(x.device());
  const auto device_type = x.device().type();
  const auto dtype = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                    : x.scalar_type();

  // Slots by expert, group offsets on the device (expert_groups.h).
  const auto groups = group_by_expert(topk_idx, experts);
  const auto& offsets = groups.group_end;
  auto sorted_weight = topk_w.reshape({slots}).index_select(0, groups.by_expert);
  torch::Tensor kept, rank;  // under a capacity: each sorted slot's position in its expert's group
  const int64_t capacity = capacity_factor > 0 ? expert_capacity(capacity_factor, slots, experts) : 0;
  if (capacity_factor > 0) {
    rank = rank_in_expert(groups);
    kept = rank < capacity;
    sorted_weight = sorted_weight * kept.to(sorted_weight.scalar_type());
  }

  // The expert matmuls, grouped GEMMs over the sorted rows; autocast off inside (the dtypes are set
  // here), d and f padded to multiples of 8.
  NoAutocastScope no_autocast;
  // Expert parallel, the exchange runs the local experts in pipelined chunks (expert_exchange.h).
  const int64_t local_experts = w1.size(0);
  const auto chunks = across_ranks ? expert_chunk_sizes(local_experts, exchange->chunks())
                                   : std::vector<int64_t>{local_experts};
  const ExpertShape shape{.d = d, .f = f, .dp = round_up(d, 8), .fp = round_up(f, 8), .dtype = dtype, .chunks = chunks};
  // Each slot's token row in expert order (slot = token * k + j): one gather of x's rows, whose
  // backward sums each token's k rows of the gradient, not a scatter-add (expert_groups.h).
  const auto rows =
      gather_slot_rows(pad_to(x.to(dtype), tokens, shape.dp), groups.by_expert, groups.position, k);
  const auto projections = gemms(w1, w3, w2, shape);
  const auto run_experts = [&](const torch::Tensor& expert_rows, const torch::Tensor& weight,
                               const torch::Tensor& group_end, int64_t chunk) {
    const auto gate_up = projections.gate_up[chunk](expert_rows, group_end);
    // The routing weight scales each slot's hidden row before the down projection, (w h) W2 = w (h W2):
    // on [S, f] instead of an fp32 copy of the [S, d] output weighted, gathered and summed in fp32. In
    // fp32 (the router's weights are fp32, so their gradient sums in fp32), rounded once to the GEMM dtype.
    const auto hidden = weighted_swiglu(gate_up, weight);
    return projections.down[chunk](hidden, group_end);
  };
  auto expert_out = !across_ranks ? run_experts(rows, sorted_weight, offsets, 0)
                    : capacity_factor > 0 ? exchange_capacity_rows(*exchange, rows, sorted_weight, groups, rank,
                                                                   capacity, chunks, run_experts)
                                          : exchange_expert_rows(*exchange, rows, sorted_weight, groups.load, chunks,
                                                                 run_experts);
  // Sliced only when padded: a narrow's backward zero-fills and copies even when it keeps everything.
  if (shape.dp != d) expert_out = expert_out.narrow(1, 0, d);

  // Back into token order: each token's k slot rows summed in fp32, written in x's dtype.
  const auto y = combine_slot_rows(expert_out, groups.by_expert, groups.position, k, x.scalar_type());

  if (dropped != nullptr)
    *dropped = kept.defined() ? torch::logical_not(kept).sum().to(torch::kLong) : torch::zeros({}, index_opts);
  return y;
}

}  // namespace ablate::kernels
