// kernels/moe_dispatch/grouped_mm.cpp: backend `grouped_mm` of seam `moe_dispatch`: dropless MoE without a
// host sync. The (token, slot) assignments are sorted by expert on the device (one counting-sort
// kernel on CUDA, group_by_expert), which also gives the per-expert offsets, and LibTorch's grouped GEMM (at::_grouped_mm, CUTLASS on sm90) runs each
// expert's rows against its weights in one launch per matmul (gate and up projections side by side in
// one), however uneven the load. Token rows go into expert order by a gather, and come back by a
// sum of each token's k slot rows (gather_slot_rows, combine_slot_rows: expert_groups.h), each the
// other's backward; the SwiGLU and the routing weight are one pass over the hidden rows before the down
// projection (weighted_swiglu). On CUDA those passes are fused kernels (expert_kernels.cu); no
// scatter-add, forward or backward. Nothing is padded to a capacity and nothing is read on the
// host, so a CUDA graph can capture the dropless path.
// Under expert parallelism (an ExpertExchange of N ranks: this rank holds E/N experts) the rows sorted
// by global expert travel to their experts' ranks and back (exchange_expert_rows, expert_exchange.h);
// the GEMMs and the weighted SwiGLU between them run on what arrived, the same passes as above.
// A capacity factor keeps the standard path's semantics: slots past capacity (in token order) get
// weight 0 and are counted (they are computed, not skipped: no shapes depend on the data).
// Contract: MoeDispatchFn in kernels/seams.h. Arithmetic in the autocast dtype when autocast is on
// (the weights are cast, as autocast would for bmm: all three in one pass, their gradients back in one,
// ExpertWeights), else in x's dtype; _grouped_mm wants row strides
// that are multiples of 16 bytes, so d and f are zero-padded to multiples of 8 when they are not
// (exact: padded rows and columns contribute zeros and are sliced off).
// Tests: kernels_tests (parity_test.cpp moe rows, CPU fp32/bf16 and CUDA). Benchmark: kernels_bench --benchmark_filter=moe_dispatch.
#include <ATen/autocast_mode.h>

#include "kernels/moe_dispatch/expert_exchange.h"
#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The expert weights in the GEMM dtype, as the grouped GEMMs take them: w1 and w3 ([E, f, d]) side by side
// as one [E, 2 fp, dp] operand, gate rows first (one GEMM for both projections forward, one for each
// gradient backward, and no add of two input gradients), and w2 ([E, d, f]) as [E, dp, fp]; padding
// zero. Forward writes both in one copy_blocks launch; backward hands each weight its block of the two
// gradients, cast back to its dtype, in another (expert_groups.h). An autograd function rather than
// copy_ into slices (whose backward, CopySlices, cloned the whole gradient and zeroed each slice) or
// .to() (a strided launch a weight, each way).
class ExpertWeights : public torch::autograd::Function<ExpertWeights> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& w1,
                                                const torch::Tensor& w3, const torch::Tensor& w2, int64_t fp,
                                                int64_t dp, at::ScalarType dtype) {
    const int64_t experts = w1.size(0), f = w1.size(1), d = w1.size(2);
    const auto opts = w1.options().dtype(dtype);
    const bool padded = f != fp || d != dp;
    auto gate_up = padded ? torch::zeros({experts, 2 * fp, dp}, opts) : torch::empty({experts, 2 * fp, dp}, opts);
    auto down = padded ? torch::zeros({experts, dp, fp}, opts) : torch::empty({experts, dp, fp}, opts);
    copy_blocks({{gate_up.narrow(1, 0, f).narrow(2, 0, d), w1},
                 {gate_up.narrow(1, fp, f).narrow(2, 0, d), w3},
                 {down.narrow(1, 0, d).narrow(2, 0, f), w2}});
    ctx->saved_data["fp"] = fp;
    ctx->saved_data["w1_dtype"] = static_cast<int64_t>(w1.scalar_type());
    ctx->saved_data["w3_dtype"] = static_cast<int64_t>(w3.scalar_type());
    ctx->saved_data["w2_dtype"] = static_cast<int64_t>(w2.scalar_type());
    ctx->saved_data["shape"] = std::vector<int64_t>{experts, f, d};
    return {gate_up, down};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const int64_t experts = shape[0], f = shape[1], d = shape[2], fp = ctx->saved_data["fp"].toInt();
    const auto& g_gate_up = grads[0];
    const auto& g_down = grads[1];
    const auto opts = (g_gate_up.defined() ? g_gate_up : g_down).options();
    torch::Tensor dw1, dw3, dw2;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> blocks;
    const auto dtype_of = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    if (g_gate_up.defined()) {
      dw1 = torch::empty({experts, f, d}, opts.dtype(dtype_of("w1_dtype")));
      dw3 = torch::empty({experts, f, d}, opts.dtype(dtype_of("w3_dtype")));
      blocks.push_back({dw1, g_gate_up.narrow(1, 0, f).narrow(2, 0, d)});
      blocks.push_back({dw3, g_gate_up.narrow(1, fp, f).narrow(2, 0, d)});
    }
    if (g_down.defined()) {
      dw2 = torch::empty({experts, d, f}, opts.dtype(dtype_of("w2_dtype")));
      blocks.push_back({dw2, g_down.narrow(1, 0, d).narrow(2, 0, f)});
    }
    copy_blocks(blocks);
    return {dw1, dw3, dw2, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// y = x W^T for each expert's rows (x [S, in] in expert order, W [E, out, in], offsets [E] int32 group
// ends): at::_grouped_mm forward; backward dx = dy W and dW = dy^T x per group, the latter computed in W's
// own layout [E, out, in] (LibTorch's autograd forms the gradient of W^T, [E, in, out], which reaches W
// transposed: a strided copy to cast back), so ExpertWeights' backward copies rows, not columns.
class GroupedLinear : public torch::autograd::Function<GroupedLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& offsets) {
    ctx->save_for_backward({x, w, offsets});
    return at::_grouped_mm(x, w.transpose(1, 2), offsets);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &offsets = saved[2];
    const auto dy = grads[0].contiguous();
    return {at::_grouped_mm(dy, w, offsets), at::_grouped_mm(dy.t(), x, offsets), torch::Tensor()};
  }
};

// Zero-pads the last two dims of `t` to (rows, cols).
torch::Tensor pad_to(const torch::Tensor& t, int64_t rows, int64_t cols) {
  const int64_t r = t.size(-2), c = t.size(-1);
  if (r == rows && c == cols) return t;
  return torch::constant_pad_nd(t, {0, cols - c, 0, rows - r});
}

torch::Tensor moe_dispatch_grouped(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                   const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                   double capacity_factor, torch::Tensor* dropped, const ExpertExchange* exchange) {
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
  torch::Tensor kept;
  if (capacity_factor > 0) {
    kept = rank_in_expert(groups) < expert_capacity(capacity_factor, slots, experts);
    sorted_weight = sorted_weight * kept.to(sorted_weight.scalar_type());
  }

  // The expert matmuls, grouped GEMMs over the sorted rows; autocast off inside (the dtypes are set
  // here), d and f padded to multiples of 8.
  NoAutocastScope no_autocast;
  const int64_t dp = round_up(d, 8), fp = round_up(f, 8);
  // Each slot's token row in expert order (slot = token * k + j): one gather of x's rows, whose
  // backward sums each token's k rows of the gradient, not a scatter-add (expert_groups.h).
  const auto rows = gather_slot_rows(pad_to(x.to(dtype), tokens, dp), groups.by_expert, groups.position, k);
  const auto weights = ExpertWeights::apply(w1, w3, w2, fp, dp, dtype);  // {[E, 2 fp, dp], [E, dp, fp]}
  const auto run_experts = [&](const torch::Tensor& expert_rows, const torch::Tensor& weight,
                               const torch::Tensor& group_end) {
    const auto gate_up = GroupedLinear::apply(expert_rows, weights[0], group_end);
    // The routing weight scales each slot's hidden row before the down projection, (w h) W2 = w (h W2):
    // on [S, f] instead of an fp32 copy of the [S, d] output weighted, gathered and summed in fp32. In
    // fp32 (the router's weights are fp32, so their gradient sums in fp32), rounded once to the GEMM dtype.
    const auto hidden = weighted_swiglu(gate_up, weight);
    return GroupedLinear::apply(hidden, weights[1], group_end);
  };
  auto expert_out = across_ranks ? exchange_expert_rows(*exchange, rows, sorted_weight, groups.load, run_experts)
                                 : run_experts(rows, sorted_weight, offsets);
  // Sliced only when padded: a narrow's backward zero-fills and copies even when it keeps everything.
  if (dp != d) expert_out = expert_out.narrow(1, 0, d);

  // Back into token order: each token's k slot rows summed in fp32, written in x's dtype.
  const auto y = combine_slot_rows(expert_out, groups.by_expert, groups.position, k, x.scalar_type());

  if (dropped != nullptr)
    *dropped = kept.defined() ? torch::logical_not(kept).sum().to(torch::kLong) : torch::zeros({}, index_opts);
  return y;
}

}  // namespace

ABLATE_REGISTER_BACKENDS(moe_dispatch_grouped_mm) {
  registry.moe_dispatch("grouped_mm", &moe_dispatch_grouped);
}

}  // namespace ablate::kernels
