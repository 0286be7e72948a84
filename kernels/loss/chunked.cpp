// kernels/loss/chunked.cpp: backend `chunked` of seam `loss`: head matmul + cross-entropy over row
// chunks in a custom autograd function whose backward recomputes each chunk's logits from the saved
// log-sum-exp, so the full [N, V] logits never exist. LibTorch ops, CPU and CUDA, every dtype.
// Tests: kernels_tests (parity_test.cpp rows, and a multi-chunk test with a small chunk size).
#include "kernels/loss/chunked.h"

#include <ATen/autocast_mode.h>

#include <algorithm>

#include "kernels/loss/loss_inputs.h"
#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

// 16 Mi logits per chunk (64 MiB in fp32): large GEMMs, bounded memory.
constexpr int64_t kChunkElementBudget = int64_t{1} << 24;

class ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& head_weight, const torch::Tensor& targets,
                               const torch::Tensor& mask, int64_t chunk_rows) {
    const int64_t rows = hidden.size(0);
    const auto dt = at::promote_types(compute_dtype(hidden), head_weight.scalar_type());
    const auto mask_f = mask.to(dt);
    const auto weight_t = head_weight.t();
    // The dtype the head GEMM runs in: bf16 under autocast (hidden bf16, weight fp32), else the
    // promoted input dtype. Backward runs outside autocast, so it casts to this dtype explicitly.
    const auto mm_dtype = at::autocast::is_autocast_enabled(hidden.device().type())
                              ? at::autocast::get_autocast_dtype(hidden.device().type())
                              : at::promote_types(hidden.scalar_type(), head_weight.scalar_type());
    std::vector<torch::Tensor> lse_chunks;
    auto total = torch::zeros({}, hidden.options().dtype(dt));
    for (int64_t start = 0; start < rows; start += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - start);
      const auto logits = torch::matmul(hidden.narrow(0, start, n), weight_t).to(dt);
      const auto lse = torch::logsumexp(logits, 1);
      const auto ce = lse - target_logit(logits, targets.narrow(0, start, n));
      total = total + (ce * mask_f.narrow(0, start, n)).sum();
      lse_chunks.push_back(lse);
    }
    const auto count = mask_f.sum().clamp_min(1);
    const auto lse = rows > 0 ? torch::cat(lse_chunks) : torch::zeros({0}, hidden.options().dtype(dt));
    ctx->save_for_backward({hidden, head_weight, targets, mask_f, lse, count});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["mm_dtype"] = static_cast<int64_t>(mm_dtype);
    return total / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &head_weight = saved[1], &targets = saved[2], &mask_f = saved[3], &lse = saved[4],
               &count = saved[5];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t rows = hidden.size(0);
    const auto dt = mask_f.scalar_type();
    const auto mm = static_cast<at::ScalarType>(ctx->saved_data["mm_dtype"].toInt());
    // d loss / d logit[r, v] = (softmax[r, v] - [v == target_r]) * mask_r / count, times the upstream grad.
    const auto row_scale = mask_f * (grad_outputs[0].to(dt) / count);
    const auto weight_mm = head_weight.to(mm);
    auto grad_weight = torch::zeros(head_weight.sizes(), head_weight.options().dtype(dt));
    std::vector<torch::Tensor> grad_hidden_chunks;
    for (int64_t start = 0; start < rows; start += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - start);
      const auto h = hidden.narrow(0, start, n).to(mm);
      const auto logits = torch::matmul(h, weight_mm.t()).to(dt);
      auto dlogits = torch::exp(logits - lse.narrow(0, start, n).unsqueeze(1));
      dlogits.scatter_add_(1, targets.narrow(0, start, n).unsqueeze(1), torch::full({n, 1}, -1.0, dlogits.options()));
      dlogits.mul_(row_scale.narrow(0, start, n).unsqueeze(1));
      grad_hidden_chunks.push_back(torch::matmul(dlogits.to(mm), weight_mm));
      grad_weight.add_(torch::matmul(dlogits.t().to(mm), h).to(dt));
    }
    const auto grad_hidden =
        rows > 0 ? torch::cat(grad_hidden_chunks).to(hidden.scalar_type()) : torch::zeros_like(hidden);
    return {grad_hidden, grad_weight.to(head_weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor loss_chunked(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                           const torch::Tensor& mask, int64_t chunk_rows) {
  check_loss_inputs(hidden, head_weight, targets, mask);
  if (chunk_rows <= 0)
    chunk_rows = std::max<int64_t>(1, kChunkElementBudget / std::max<int64_t>(1, head_weight.size(0)));
  return ChunkedLinearCrossEntropy::apply(hidden, head_weight, targets.to(torch::kLong), mask, chunk_rows);
}

ABLATE_REGISTER_BACKENDS(loss_chunked) {
  registry.loss("chunked", [](const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t, const torch::Tensor& m) {
                  return loss_chunked(h, w, t, m);
                });
}

}  // namespace ablate::kernels
