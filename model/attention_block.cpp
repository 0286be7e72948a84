// model/attention_block.cpp: block A, Multi-head Latent Attention (docs/model.md "A"): low-rank q and kv
// projections with RMSNorms, decoupled RoPE (per-head q_r, one shared k_r) through the `rope` seam,
// causal attention with scale 1/sqrt(dn + dr) through the `attention` seam, output projection.
// Tests: model_tests --gtest_filter='*Attention*' (tests/model/blocks_test.cpp: vs an explicit
// per-head softmax loop in fp64, and gradients by central differences).
#include <cmath>

#include "kernels/join_last_dim.h"
#include "kernels/numerics.h"
#include "model/blocks.h"

namespace ablate::model {

std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t seq_len, int64_t dim, double base, torch::Dtype dtype,
                                                    const torch::Device& device) {
  // Angles in fp64 (position * frequency loses digits in fp32 at long T), then cast.
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(device);
  const auto frequency = torch::pow(base, -torch::arange(0, dim, 2, f64) / static_cast<double>(dim));
  const auto angle = torch::outer(torch::arange(seq_len, f64), frequency);
  return {angle.cos().to(dtype), angle.sin().to(dtype)};
}

AttentionBlock::AttentionBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher,
                               SeededInit& init)
    : Block('A', config, std::move(dispatcher)) {
  const auto& a = config.attention;
  const int64_t d = config.d_model, qk = a.nope_dim + a.rope_dim;
  if (a.q_lora > 0) {
    w_dq = register_parameter("w_dq", init.normal({a.q_lora, d}));
    q_norm = register_parameter("q_norm", SeededInit::constant({a.q_lora}, 1.0));
    w_uq = register_parameter("w_uq", init.normal({a.heads * qk, a.q_lora}));
  } else {
    w_q = register_parameter("w_q", init.normal({a.heads * qk, d}));
  }
  w_dkv = register_parameter("w_dkv", init.normal({a.kv_lora + a.rope_dim, d}));
  kv_norm = register_parameter("kv_norm", SeededInit::constant({a.kv_lora}, 1.0));
  w_ukv = register_parameter("w_ukv", init.normal({a.heads * (a.nope_dim + a.v_dim), a.kv_lora}));
  w_o = register_parameter("w_o", init.normal({d, a.heads * a.v_dim}));
}

std::vector<torch::Tensor> AttentionBlock::gemm_weights() const {
  if (w_q.defined()) return {w_q, w_dkv, w_ukv, w_o};
  return {w_dq, w_uq, w_dkv, w_ukv, w_o};
}

BlockOutput AttentionBlock::forward(const torch::Tensor& x) {
  const auto& a = config_.attention;
  const int64_t batch = x.size(0), T = x.size(1), qk = a.nope_dim + a.rope_dim;
  const double eps = config_.norm_eps;

  const auto q =
      (a.q_lora > 0 ? dispatcher_->dense_gemm(rms_norm(dispatcher_->dense_gemm(x, w_dq), q_norm, eps), w_uq) : dispatcher_->dense_gemm(x, w_q))
          .view({batch, T, a.heads, qk});
  // Projections are cut into their parts by split, not narrow: split's backward is one join of the
  // parts' gradients, where each narrow's zero-fills the whole input, copies its part in, and the two
  // are then added (6 fills, 6 copies and 3 adds an A layer in the H100 profile of 2026-11-25). The
  // join is kernels::join_last_dim (one 16-byte pass over strided parts; LibTorch's cat ran its
  // element-wise path on them: 0.74 ms a step on the H100 before 835f4a1, 2026-11-26,
  // experiments/results/2026-11-26-h100-cudnn/).
  const auto q_parts = kernels::split_last_dim(q, {a.nope_dim, a.rope_dim});
  const auto &q_nope = q_parts[0], &q_rope = q_parts[1];

  const auto kv_down = kernels::split_last_dim(dispatcher_->dense_gemm(x, w_dkv), {a.kv_lora, a.rope_dim});  // [c_kv ; k_r]
  const auto& c_kv = kv_down[0];
  const auto k_rope = kv_down[1].unsqueeze(2);  // one head, shared by all H
  const auto kv = kernels::split_last_dim(
      dispatcher_->dense_gemm(rms_norm(c_kv, kv_norm, eps), w_ukv).view({batch, T, a.heads, a.nope_dim + a.v_dim}),
      {a.nope_dim, a.v_dim});
  const auto &k_nope = kv[0], &v = kv[1];

  const auto [cos, sin] = rope_tables(T, a.rope_dim, a.rope_base, kernels::compute_dtype(w_dkv), x.device());
  const auto [q_full, k_full] = dispatcher_->rope(q_nope, q_rope, k_nope, k_rope, cos, sin);
  const auto o = dispatcher_->attention(q_full.transpose(1, 2), k_full.transpose(1, 2), v.transpose(1, 2),
                                        1.0 / std::sqrt(static_cast<double>(qk)));  // [B, H, T, dv]
  return {dispatcher_->dense_gemm(o.transpose(1, 2).reshape({batch, T, a.heads * a.v_dim}), w_o), {}, {}};
}

}  // namespace ablate::model
