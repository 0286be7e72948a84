// kernels/moe_dispatch/grouped_mm.cpp: backend `grouped_mm` of seam `moe_dispatch`: dropless MoE without a
// host sync. The (token, slot) assignments are sorted by expert on the device, the per-expert offsets
// come from a device cumsum, and LibTorch's grouped GEMM (at::_grouped_mm, CUTLASS on sm90) runs each
// expert's rows against its weights in one launch per matmul, however uneven the load. Rows move
// between token order and expert order by gathers in both directions (gather_slot_rows, permute_rows:
// expert_groups.h); the routing weight scales the hidden rows before the down projection;
// no scatter-add, forward or backward. Nothing is padded to a capacity and nothing is read on the
// host, so a CUDA graph can capture the dropless path.
// A capacity factor keeps the standard path's semantics: slots past capacity (in token order) get
// weight 0 and are counted (they are computed, not skipped: no shapes depend on the data).
// Contract: MoeDispatchFn in kernels/seams.h. Arithmetic in the autocast dtype when autocast is on
// (the weights are cast, as autocast would for bmm), else in x's dtype; _grouped_mm wants row strides
// that are multiples of 16 bytes, so d and f are zero-padded to multiples of 8 when they are not
// (exact: padded rows and columns contribute zeros and are sliced off).
// Tests: kernels_tests (parity_test.cpp moe rows, CPU fp32/bf16 and CUDA). Benchmark: kernels_bench --benchmark_filter=moe_dispatch.
#include <ATen/autocast_mode.h>

#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// Zero-pads the last two dims of `t` to (rows, cols).
torch::Tensor pad_to(const torch::Tensor& t, int64_t rows, int64_t cols) {
  const int64_t r = t.size(-2), c = t.size(-1);
  if (r == rows && c == cols) return t;
  return torch::constant_pad_nd(t, {0, cols - c, 0, rows - r});
}

torch::Tensor moe_dispatch_grouped(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                   const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                   double capacity_factor, torch::Tensor* dropped) {
  check_moe_dispatch_args(x, topk_idx, topk_w, w1, w3, w2, capacity_factor);
  const int64_t tokens = x.size(0), d = x.size(1), k = topk_idx.size(1), experts = w1.size(0), f = w1.size(1);
  const int64_t slots = tokens * k;
  const auto index_opts = torch::TensorOptions().dtype(torch::kLong).device(x.device());
  const auto device_type = x.device().type();
  const auto dtype = at::autocast::is_autocast_enabled(device_type) ? at::autocast::get_autocast_dtype(device_type)
                                                                    : x.scalar_type();

  // Slots by expert, group offsets on the device (expert_groups.h).
  const auto groups = group_by_expert(topk_idx, experts);
  const auto offsets = (groups.group_start + groups.load).to(torch::kInt);
  auto sorted_weight = topk_w.reshape({slots}).index_select(0, groups.by_expert);
  torch::Tensor kept;
  if (capacity_factor > 0) {
    kept = rank_in_expert(groups) < expert_capacity(capacity_factor, slots, experts);
    sorted_weight = sorted_weight * kept.to(sorted_weight.scalar_type());
  }

  // The three expert matmuls, each one grouped GEMM over the sorted rows; autocast off inside (the
  // dtypes are set here), d and f padded to multiples of 8.
  NoAutocastScope no_autocast;
  const int64_t dp = round_up(d, 8), fp = round_up(f, 8);
  // Each slot's token row in expert order (slot = token * k + j): one gather of x's rows, whose
  // backward is a gather and a sum over each token's k slots, not a scatter-add (expert_groups.h).
  const auto rows = gather_slot_rows(pad_to(x.to(dtype), tokens, dp), groups.by_expert, groups.position, k);
  const auto w1p = pad_to(w1.to(dtype), fp, dp), w3p = pad_to(w3.to(dtype), fp, dp), w2p = pad_to(w2.to(dtype), dp, fp);
  // The routing weight scales each slot's hidden row before the down projection, (w h) W2 = w (h W2):
  // on [S, f] instead of an fp32 copy of the [S, d] output weighted, gathered and summed in fp32 (on the
  // H100 those were ~0.4 ms of each E layer's 3.4 ms). The product is taken in the wider of the
  // weight's and the row's dtypes (fp32 for the router's fp32 weights), so the router's gradient sums
  // in fp32 as before; only the scaled row is rounded to the GEMM dtype, as the output was.
  const auto gated = torch::silu(at::_grouped_mm(rows, w1p.transpose(1, 2), offsets)) *
                     at::_grouped_mm(rows, w3p.transpose(1, 2), offsets);
  const auto weight_dtype = at::promote_types(sorted_weight.scalar_type(), gated.scalar_type());
  const auto hidden = (gated * sorted_weight.to(weight_dtype).unsqueeze(-1)).to(dtype);
  const auto expert_out = at::_grouped_mm(hidden, w2p.transpose(1, 2), offsets).narrow(1, 0, d);

  // Back into token order: the slots permuted back to slot order (a gather both ways), then each
  // token's k slots summed (LibTorch accumulates a bf16 sum in fp32).
  const auto y = permute_rows(expert_out, groups.position, groups.by_expert).view({tokens, k, d}).sum(1);

  if (dropped != nullptr)
    *dropped = kept.defined() ? torch::logical_not(kept).sum().to(torch::kLong) : torch::zeros({}, index_opts);
  return y.to(x.scalar_type());
}

// LibTorch's grouped GEMM (at::_grouped_mm): on CUDA the CUTLASS sm90 kernels, bf16/fp16 only; on the
// CPU its own fp32/bf16 implementation. No fp64 kernel anywhere.
std::string grouped_mm_unavailable(const DeviceInfo& dev) {
  if (dev.dtype == "fp64") return "at::_grouped_mm has no fp64 kernel";
  if (!dev.cuda) return "";
  if (auto r = availability::needs_compute_capability(dev, 9, 0); !r.empty()) return r;
  return availability::needs_half_precision(dev);
}

}  // namespace

ABLATE_REGISTER_BACKENDS(moe_dispatch_grouped_mm) {
  registry.moe_dispatch({.name = "grouped_mm",
                         .role = Role::vendor,
                         .fallback = "reference",
                         // CUTLASS's grouped GEMM (cutlass::gemm::GroupProblemShape), in the raw name
                         // CUPTI keeps when the demangler gives up on it, and in the demangled one.
                         .kernel_patterns = {"GroupProblemShape"},
                         .description = "dropless without a host sync: slots sorted by expert on the device, "
                                        "the three expert matmuls as LibTorch grouped GEMMs (at::_grouped_mm) "
                                        "over device offsets; CUDA-graph capturable",
                         .unavailable_reason = &grouped_mm_unavailable},
                        &moe_dispatch_grouped);
}

}  // namespace ablate::kernels
