// kernels/moe_dispatch/grouped_mm.cpp: backend `grouped_mm` of seam `moe_dispatch`: the dropless grouped
// dispatch (grouped_dispatch.h: slots sorted by expert on the device, no host sync, CUDA-graph
// capturable, expert parallel) with bf16 expert GEMMs: LibTorch's grouped GEMM (at::_grouped_mm, CUTLASS
// on sm90) runs each expert's rows against its weights in one launch per matmul (gate and up projections
// side by side in one). Arithmetic in the autocast dtype when autocast is on (the weights are cast, as
// autocast would for bmm: all three in one pass, their gradients back in one, ExpertWeights; w2 read as
// it is when it is already bf16: bf16_gemms), else in x's dtype; _grouped_mm wants row strides that are
// multiples of 16 bytes, so d and f are zero-padded to multiples of 8 when they are not
// (grouped_dispatch.cpp).
// Tests: kernels_tests (parity_test.cpp moe rows, CPU fp32/bf16 and CUDA). Benchmark: kernels_bench --benchmark_filter=moe_dispatch.
#include "kernels/copy_blocks.h"
#include "kernels/moe_dispatch/expert_groups.h"
#include "kernels/moe_dispatch/grouped_dispatch.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

// The expert weights in the GEMM dtype, as the grouped GEMMs take them: w1 and w3 ([E, f, d]) side by side
// as one [E, 2 fp, dp] operand, gate rows first (one GEMM for both projections forward, one for each
// gradient backward, and no add of two input gradients), and w2 ([E, d, f]) as [E, dp, fp]; padding
// zero. One such pair a chunk of experts (ExpertShape::chunks: consecutive experts, {E} unpipelined),
// each its own tensor, so a chunk's gradient reaches only its experts' rows. Forward writes them all in
// one copy_blocks launch; backward hands each weight its blocks of the gradients, cast back to its
// dtype, in another (kernels/copy_blocks.h). An autograd function rather than copy_ into slices (whose
// backward, CopySlices, cloned the whole gradient and zeroed each slice) or .to() (a strided launch a
// weight, each way). Outputs: every chunk's [gate_up, down], in chunk order; with `with_down` false
// only the gate_up operands (w2 is already its own operand: see bf16_gemms) and no gradient for w2.
// Weights already in the GEMM dtype, in one chunk, get views of the stacked gradients as theirs.
class ExpertWeights : public torch::autograd::Function<ExpertWeights> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& w1,
                                                const torch::Tensor& w3, const torch::Tensor& w2, int64_t fp,
                                                int64_t dp, at::ScalarType dtype, const std::vector<int64_t>& chunks,
                                                bool with_down) {
    const int64_t f = w1.size(1), d = w1.size(2);
    const auto opts = w1.options().dtype(dtype);
    const bool padded = f != fp || d != dp;
    const auto make = [&](std::vector<int64_t> shape) { return padded ? torch::zeros(shape, opts) : torch::empty(shape, opts); };
    torch::autograd::variable_list operands;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> blocks;
    int64_t first = 0;
    for (const int64_t n : chunks) {
      auto gate_up = make({n, 2 * fp, dp});
      blocks.push_back({gate_up.narrow(1, 0, f).narrow(2, 0, d), w1.narrow(0, first, n)});
      blocks.push_back({gate_up.narrow(1, fp, f).narrow(2, 0, d), w3.narrow(0, first, n)});
      operands.push_back(gate_up);
      if (with_down) {
        auto down = make({n, dp, fp});
        blocks.push_back({down.narrow(1, 0, d).narrow(2, 0, f), w2.narrow(0, first, n)});
        operands.push_back(down);
      }
      first += n;
    }
    copy_blocks(blocks);
    ctx->saved_data["fp"] = fp;
    ctx->saved_data["w1_dtype"] = static_cast<int64_t>(w1.scalar_type());
    ctx->saved_data["w3_dtype"] = static_cast<int64_t>(w3.scalar_type());
    ctx->saved_data["w2_dtype"] = static_cast<int64_t>(w2.scalar_type());
    ctx->saved_data["shape"] = std::vector<int64_t>{w1.size(0), f, d};
    ctx->saved_data["chunks"] = chunks;
    ctx->saved_data["with_down"] = with_down;
    return operands;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const auto chunks = ctx->saved_data["chunks"].toIntVector();
    const int64_t experts = shape[0], f = shape[1], d = shape[2], fp = ctx->saved_data["fp"].toInt();
    const bool with_down = ctx->saved_data["with_down"].toBool();
    const size_t per_chunk = with_down ? 2 : 1;
    const auto dtype_of = [&](const char* key) { return static_cast<at::ScalarType>(ctx->saved_data[key].toInt()); };
    const auto any = [&](size_t which) {  // 0: gate_up, 1: down
      if (which >= per_chunk) return torch::Tensor();
      for (size_t c = 0; c < chunks.size(); ++c)
        if (grads[per_chunk * c + which].defined()) return grads[per_chunk * c + which];
      return torch::Tensor();
    };
    // One chunk whose gradients are already in the weights' dtype (bf16 GEMM weights): each weight's
    // gradient is its block of the stacked gradient, a view, no copy (a data-parallel sync's hook copies
    // it into its bucket anyway, where copy_blocks would have copied it first).
    if (chunks.size() == 1 && grads[0].defined() && grads[0].scalar_type() == dtype_of("w1_dtype") &&
        grads[0].scalar_type() == dtype_of("w3_dtype") &&
        (!with_down || !grads[1].defined() || grads[1].scalar_type() == dtype_of("w2_dtype"))) {
      const auto& g = grads[0];
      const auto g_down = with_down && grads[1].defined() ? grads[1].narrow(1, 0, d).narrow(2, 0, f) : torch::Tensor();
      return {g.narrow(1, 0, f).narrow(2, 0, d), g.narrow(1, fp, f).narrow(2, 0, d), g_down, torch::Tensor(),
              torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    torch::Tensor dw1, dw3, dw2;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> blocks;
    if (const auto g = any(0); g.defined()) {
      dw1 = torch::empty({experts, f, d}, g.options().dtype(dtype_of("w1_dtype")));
      dw3 = torch::empty({experts, f, d}, g.options().dtype(dtype_of("w3_dtype")));
    }
    if (const auto g = any(1); g.defined()) dw2 = torch::empty({experts, d, f}, g.options().dtype(dtype_of("w2_dtype")));
    int64_t first = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int64_t n = chunks[c];
      // A chunk without a gradient (its output unused) adds nothing to its experts' rows.
      if (const auto& g = grads[per_chunk * c]; g.defined()) {
        blocks.push_back({dw1.narrow(0, first, n), g.narrow(1, 0, f).narrow(2, 0, d)});
        blocks.push_back({dw3.narrow(0, first, n), g.narrow(1, fp, f).narrow(2, 0, d)});
      } else if (dw1.defined()) {
        dw1.narrow(0, first, n).zero_();
        dw3.narrow(0, first, n).zero_();
      }
      if (!with_down) {
      } else if (const auto& g = grads[2 * c + 1]; g.defined()) {
        blocks.push_back({dw2.narrow(0, first, n), g.narrow(1, 0, d).narrow(2, 0, f)});
      } else if (dw2.defined()) {
        dw2.narrow(0, first, n).zero_();
      }
      first += n;
    }
    copy_blocks(blocks);
    return {dw1, dw3, dw2, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
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

// The bf16 GEMM step: the weights cast and stacked once a call (ExpertWeights), each projection of a
// chunk one at::_grouped_mm over its groups (GroupedLinear). w2 ([E, d, f]: [E, out, in]) is already the
// down projection's operand where it is in the GEMM dtype, unpadded and whole (bf16 GEMM weights:
// distributed.param_dtype, one chunk): read as it is, the GEMM's weight gradient its own (bf16), no
// copy either way and none held for backward. (w1 and w3 still meet in one stacked operand, so the gate
// and up projections stay one GEMM forward and the input gradient one GEMM backward.)
ExpertProjections bf16_gemms(const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             const ExpertShape& shape) {
  const auto chunks = shape.chunks.empty() ? std::vector<int64_t>{w1.size(0)} : shape.chunks;
  const bool down_as_is = chunks.size() == 1 && w2.scalar_type() == shape.dtype && shape.d == shape.dp &&
                          shape.f == shape.fp && w2.is_contiguous();
  const auto weights = ExpertWeights::apply(w1, w3, w2, shape.fp, shape.dp, shape.dtype, chunks, !down_as_is);
  ExpertProjections p;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const size_t per_chunk = down_as_is ? 1 : 2;
    p.gate_up.push_back([gate_up = weights[per_chunk * c]](const torch::Tensor& rows, const torch::Tensor& group_end) {
      return GroupedLinear::apply(rows, gate_up, group_end);
    });
    p.down.push_back([down = down_as_is ? w2 : weights[2 * c + 1]](const torch::Tensor& hidden,
                                                                   const torch::Tensor& group_end) {
      return GroupedLinear::apply(hidden, down, group_end);
    });
  }
  return p;
}

torch::Tensor moe_dispatch_grouped(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                                   const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                                   double capacity_factor, torch::Tensor* dropped, const ExpertExchange* exchange) {
  return grouped_dispatch(x, topk_idx, topk_w, w1, w3, w2, capacity_factor, dropped, exchange, &bf16_gemms);
}

}  // namespace

ABLATE_REGISTER_BACKENDS(moe_dispatch_grouped_mm) {
  registry.moe_dispatch("grouped_mm", &moe_dispatch_grouped);
}

}  // namespace ablate::kernels
