// kernels/moe_dispatch/grouped_mm_fp8.cu: backend `grouped_mm_fp8_rowwise` of seam `moe_dispatch`: the
// dropless grouped dispatch of grouped_mm (grouped_dispatch.h: slots sorted by expert on the device, no
// host sync, CUDA-graph capturable, expert parallel) with its six expert GEMMs (gate+up and down; each
// forward, input gradient and weight gradient) as FP8 grouped GEMMs: at::_scaled_grouped_mm, CUTLASS's
// sm90 ptr-array kernels (MainloopSm90ArrayTmaGmmaWarpSpecializedFP8, GMMA F32E4M3E4M3), e4m3 operands
// with fp32 row-wise scales, bf16 output. The recipe is dense_gemm's fp8_rowwise (torchao's "rowwise"):
// current scaling, one power-of-two scale per row of each operand along its GEMM's inner dimension, e4m3
// for activations, weights and gradients alike. Per GEMM (x [S, K] rows in expert order, W [E, N, K]):
//   forward  y = x W^T    2D x 3D, offsets along S: x per row (over K), W per (expert, row) (over K);
//   dgrad   dx = dy W     2D x 3D, offsets along S: dy per row (over N), W per (expert, column) (over N);
//   wgrad   dW = dy^T x   2D x 2D, offsets along K = the tokens of each expert: dy^T and x^T per
//                         (expert, column) over that expert's tokens. The FP8 kernel loads its operands
//                         by TMA along K, which wants every group to start on a 16-byte boundary: the
//                         transposed operands are written with each expert's tokens padded to a
//                         multiple of 16 (an empty expert to 16 zero tokens, so no group has K = 0),
//                         zeros between (fp8_quantize.h quantize_grouped); the forward and dgrad GEMMs
//                         read the rows unpadded (their offsets move along M, which has no such limit).
// Every operand is quantised in two passes (amax, then scale + cast both orientations) by
// kernels/dense_gemm/fp8_quantize.cu: W from its fp32 master (w1 over w3 as one [E, 2f, d] operand,
// never written in bf16), x and dy from their bf16 rows. Master weights stay fp32; the weight gradients
// come out of the GEMM in bf16 (the only output _scaled_grouped_mm has) and are cast into the masters'
// dtype. All six GEMMs accumulate with CUTLASS's fast accumulation (no periodic promotion of the FP8
// MMA's partial sums to fp32), as torchao's FP8 row-wise grouped GEMMs for MoE training do: without it the
// gradient GEMMs ran 2.7x slower than the forward's on an H200 (327 against 120 us at nam56r-small,
// 2026-11-28), which made the family lose; what it costs in accuracy the convergence gate judges. An inf or NaN in an operand makes its scale NaN: every output it reaches
// is NaN (the loss turns non-finite and the run stops), never clipped silently.
// Only on bf16 GEMMs on the GPU (bf16 autocast, or bf16 x), with d and f multiples of 16 (FP8 rows span
// whole 16-byte units); a call outside that is an error, never a silent bf16 GEMM (the catalog row's
// availability keeps such runs on grouped_mm).
// Tests: kernels_tests --gtest_filter='*Parity*moe_dispatch_grouped_mm_fp8*:Fp8Experts*'.
// Benchmark: build/bench/kernels_bench --benchmark_filter=moe_dispatch.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out.
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include "kernels/copy_blocks.h"
#include "kernels/dense_gemm/fp8_recipe.h"
#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/moe_dispatch/grouped_dispatch.h"

namespace ablate::kernels::fp8_experts {
namespace {

using fp8::Quantized;
using fp8::QuantizeOptions;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

QuantizeOptions rowwise(bool rows, bool cols) { return fp8::kRowwise.options(fp8::kRowwise.inputs, rows, cols); }

// a [M, K] rows x b^T per group, b_cols [E, N, K] given so that its transpose is the column-major operand
// the kernel takes; scales: a's [M] (2D x 3D) or [E M] (2D x 2D), b's [E, N] or [E N].
Tensor scaled_grouped_mm(const Tensor& a, const Tensor& b, const Tensor& a_inverse, const Tensor& b_inverse,
                         const Tensor& offsets) {
  return at::_scaled_grouped_mm(a, b, a_inverse, b_inverse, offsets, /*bias=*/std::nullopt,
                                /*scale_result=*/std::nullopt, at::kBFloat16,
                                /*use_fast_accum=*/true);
}

// y = x W^T over expert groups in FP8, W = [top; bottom] row-stacked per expert (w1 over w3 for the gate
// and up projections; bottom [E, 0, K] for the down projection): x [S, K] bf16, top [E, Na, K] and
// bottom [E, Nb, K] fp32 (or bf16) masters, group_end [E] int32 -> y [S, Na + Nb] bf16. Saves what the
// backward's GEMMs read: W quantised along N per (expert, column), x^T along each group's tokens.
class Fp8GroupedLinear : public torch::autograd::Function<Fp8GroupedLinear> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& top, const Tensor& bottom,
                        const Tensor& group_end, bool need_dx, bool need_dw) {
    const int64_t S = x.size(0), E = top.size(0), N = top.size(1) + bottom.size(1);
    const auto wq = fp8::quantize_stacked(top, bottom.size(1) > 0 ? bottom : Tensor(),
                                          rowwise(/*rows=*/true, /*cols=*/need_dx));
    Tensor padded_end;
    int64_t rows_out = 0;
    if (need_dw) padded_end = fp8::padded_group_ends(group_end), rows_out = fp8::padded_rows(S, E);
    const auto xq = fp8::quantize_grouped(x, group_end, padded_end, rows_out, rowwise(/*rows=*/true, /*cols=*/need_dw));
    // No rows (an expert-parallel rank that received none): nothing for the kernel to do.
    auto y = S == 0 ? torch::empty({0, N}, x.options().dtype(at::kBFloat16))
                    : scaled_grouped_mm(xq.rows, wq.rows.transpose(1, 2), xq.rows_inverse, wq.rows_inverse, group_end);
    ctx->save_for_backward({wq.cols, wq.cols_inverse, xq.cols, xq.cols_inverse, padded_end, group_end});
    ctx->saved_data["rows_out"] = rows_out;
    ctx->saved_data["top_rows"] = top.size(1);
    ctx->saved_data["top_dtype"] = static_cast<int64_t>(top.scalar_type());
    ctx->saved_data["bottom_dtype"] = static_cast<int64_t>(bottom.scalar_type());
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &w_cols = saved[0], &w_cols_inverse = saved[1], &x_cols = saved[2], &x_cols_inverse = saved[3],
                 &padded_end = saved[4], &group_end = saved[5];
    const int64_t rows_out = ctx->saved_data["rows_out"].toInt();
    const auto dtype_of = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    const auto dy = grads[0].to(at::kBFloat16).contiguous();
    const int64_t S = dy.size(0);
    const bool need_dx = w_cols.defined() && ctx->needs_input_grad(0), need_dw = x_cols.defined();
    const auto dyq = fp8::quantize_grouped(dy, group_end, padded_end, rows_out, rowwise(need_dx, need_dw));
    Tensor dx, dtop, dbottom;
    if (need_dx) {
      dx = S == 0 ? torch::empty({0, w_cols.size(1)}, dy.options())
                  : scaled_grouped_mm(dyq.rows, w_cols.transpose(1, 2), dyq.rows_inverse, w_cols_inverse, group_end);
      dx = dx.to(dtype_of("x_dtype"));
    }
    if (need_dw) {
      // [E, N, K] in bf16: each expert's dy^T x over its (padded) tokens.
      const auto dw = scaled_grouped_mm(dyq.cols, x_cols.t(), dyq.cols_inverse.view({-1}), x_cols_inverse.view({-1}),
                                        padded_end);
      const int64_t top_rows = ctx->saved_data["top_rows"].toInt(), bottom_rows = dw.size(1) - top_rows;
      std::vector<std::pair<Tensor, Tensor>> blocks;
      dtop = torch::empty({dw.size(0), top_rows, dw.size(2)}, dw.options().dtype(dtype_of("top_dtype")));
      blocks.push_back({dtop, dw.narrow(1, 0, top_rows)});
      if (bottom_rows > 0) {
        dbottom = torch::empty({dw.size(0), bottom_rows, dw.size(2)}, dw.options().dtype(dtype_of("bottom_dtype")));
        blocks.push_back({dbottom, dw.narrow(1, top_rows, bottom_rows)});
      }
      copy_blocks(blocks);  // one launch for both casts (copy_blocks.h)
    }
    return {dx, dtop, dbottom, Tensor(), Tensor(), Tensor()};
  }
};

// A custom autograd function takes no undefined tensor among its inputs, so a projection without a
// bottom stack passes an empty one ([E, 0, K]).
Tensor fp8_linear(const Tensor& x, const Tensor& top, const Tensor& bottom, const Tensor& group_end) {
  const bool grad = at::GradMode::is_enabled();
  const bool need_dw = grad && (top.requires_grad() || (bottom.defined() && bottom.requires_grad()));
  const Tensor below = bottom.defined() ? bottom : top.new_empty({top.size(0), 0, top.size(2)});
  return Fp8GroupedLinear::apply(x, top, below, group_end, grad && x.requires_grad(), need_dw);
}

// The FP8 GEMM step (grouped_dispatch.h): the weights are quantised inside each projection, from their
// masters, once a call.
ExpertProjections fp8_gemms(const Tensor& w1, const Tensor& w3, const Tensor& w2, const ExpertShape& shape) {
  TORCH_CHECK(w1.is_cuda() && shape.dtype == at::kBFloat16,
              "moe_dispatch grouped_mm_fp8_rowwise: runs only where the expert GEMMs are bf16 on the GPU (bf16 "
              "autocast, or bf16 x; got ",
              shape.dtype, " on ", w1.device(), "); use moe_dispatch = \"grouped_mm\" elsewhere");
  TORCH_CHECK(shape.d % 16 == 0 && shape.f % 16 == 0, "moe_dispatch grouped_mm_fp8_rowwise: d (", shape.d,
              ") and the expert FFN width f (", shape.f,
              ") must be multiples of 16 for FP8 grouped GEMMs; use moe_dispatch = \"grouped_mm\" for this model");
  for (const auto* w : {&w1, &w3, &w2})
    TORCH_CHECK(w->scalar_type() == at::kFloat || w->scalar_type() == at::kBFloat16,
                "moe_dispatch grouped_mm_fp8_rowwise: expert weights must be fp32 masters (or bf16), got ",
                w->scalar_type());
  // A chunk of experts (ExpertShape::chunks) quantises its own rows of the masters; split, so each
  // chunk's weight gradient lands in its rows (one concatenation backward, no zero-filled whole-size
  // gradient a chunk).
  const auto chunks = shape.chunks.empty() ? std::vector<int64_t>{w1.size(0)} : shape.chunks;
  const auto split = [&](const Tensor& w) {  // one chunk: the master itself (a split's backward would copy it)
    return chunks.size() == 1 ? std::vector<Tensor>{w} : w.split_with_sizes(chunks);
  };
  const auto w1s = split(w1), w3s = split(w3), w2s = split(w2);
  ExpertProjections p;
  for (size_t c = 0; c < chunks.size(); ++c) {
    p.gate_up.push_back([w1 = w1s[c], w3 = w3s[c]](const Tensor& rows, const Tensor& group_end) {
      return fp8_linear(rows, w1, w3, group_end);
    });
    p.down.push_back(
        [w2 = w2s[c]](const Tensor& hidden, const Tensor& group_end) { return fp8_linear(hidden, w2, Tensor(), group_end); });
  }
  return p;
}

}  // namespace

Tensor moe_dispatch(const Tensor& x, const Tensor& topk_idx, const Tensor& topk_w, const Tensor& w1, const Tensor& w3,
                    const Tensor& w2, double capacity_factor, Tensor* dropped, const ExpertExchange* exchange) {
  return grouped_dispatch(x, topk_idx, topk_w, w1, w3, w2, capacity_factor, dropped, exchange, &fp8_gemms);
}

}  // namespace ablate::kernels::fp8_experts
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(moe_dispatch_grouped_mm_fp8) {
  registry.moe_dispatch("grouped_mm_fp8_rowwise", ABLATE_CUDA_ONLY(&fp8_experts::moe_dispatch));
}

}  // namespace ablate::kernels
