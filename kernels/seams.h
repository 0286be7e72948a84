// kernels/seams.h: the typed contract of every seam: the function type each backend of the seam
// implements, with shapes and dtypes (the parity driver, tests/kernels/parity_test.cpp, checks every
// registered backend against them). The seam list itself is kernels/seam_list.h.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <utility>

namespace ablate::kernels {

class ExpertExchange;  // kernels/moe_dispatch/expert_exchange.h

// dense_gemm: the blocks' dense projections, y = x W^T (+ b). x [..., K], weight [N, K], bias [N] or
// undefined -> y [..., N]. Under CUDA autocast with fp32 weights (the training posture: fp32 master
// weights, bf16 arithmetic) y is in the autocast dtype and the weight and bias gradients are fp32 (the
// GEMM writes them); elsewhere torch::linear's dtypes. A backend that computes in a lower precision
// (FP8: kernels/dense_gemm/fp8_scaled_mm.cu) changes the numerics (its catalog row says so).
using DenseGemmFn =
    std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)>;
// attention: causal softmax attention. q, k [B, H, T, Dqk], v [B, H, T, Dv] -> o [B, H, T, Dv].
using AttentionFn = std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, double scale)>;
// rope (MLA layout): q_nope [B,T,H,dn], q_rope [B,T,H,dr], k_nope [B,T,H,dn], k_rope [B,T,1,dr]
// (one head shared by all H), cos/sin [T, dr/2] fp32. Rotates adjacent pairs (2i, 2i+1) and returns
// the concatenated q = [q_nope ; RoPE(q_rope)], k = [k_nope ; RoPE(k_rope)], both [B,T,H,dn+dr].
using RopeFn = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor& q_nope, const torch::Tensor& q_rope, const torch::Tensor& k_nope,
    const torch::Tensor& k_rope, const torch::Tensor& cos, const torch::Tensor& sin)>;
// residual_norm: s = x + residual (s = residual when x is undefined), y = RMSNorm(s) * weight in fp32
// arithmetic; returns (y, s), y in x's dtype, s in residual's dtype. weight [d].
using ResidualNormFn = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight, double eps)>;
// swiglu: silu(a) * b, same shape.
using SwigluFn = std::function<torch::Tensor(const torch::Tensor& a, const torch::Tensor& b)>;
// moe_router (the E block's router, docs/model.md "E"): probs = softmax(x W^T) over E experts in fp32 (x
// taken exactly into fp32, autocast or not), top_idx the top_k experts by probs (largest first), top_w
// their probs renormalised over the k picks. x [T,d] (a floating dtype), weight [E,d], 1 <= top_k <= E.
// probs [T,E] and top_w [T,k] in the compute dtype (fp32; fp64 when the weight is fp64: tests),
// top_idx [T,k] int64. probs and top_w are differentiable (the load-balancing loss reads probs).
struct MoeRouterOutputs {
  torch::Tensor probs, top_w, top_idx;
};
using MoeRouterFn = std::function<MoeRouterOutputs(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k)>;
// moe_dispatch: x [T, d], topk_idx [T, k] int64, topk_w [T, k] (renormalised), expert weights
// w1, w3 [E, f, d], w2 [E, d, f] -> y [T, d] = sum_j w_j * W2_e(silu(W1_e x) * W3_e x).
// capacity_factor 0 = dropless; otherwise tokens over capacity ceil(cf * T * k / E) get 0 for that
// slot and `dropped` (when given) receives the count of dropped slots as a 0-dim int64 tensor (no sync).
// `experts` (null, or one rank: every expert here): expert parallelism, the w's holding this rank's E/N
// experts of the group's E (kernels/moe_dispatch/expert_exchange.h); a backend that cannot run it throws.
using MoeDispatchFn = std::function<torch::Tensor(
    const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
    const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2, double capacity_factor,
    torch::Tensor* dropped, const ExpertExchange* experts)>;
// ssm_rotary (Mamba-3's data-dependent rotary keys and queries, docs/model.md "M"): the angles
//   Phi_t = Phi_{t-1} + delta_t * pi * tanh(theta_t)   per head, [B,T,H,S]; Phi_{-1} = phi0 (or 0),
// and per head h the biased B and C turned by them:
//   k[b,t,h] = Rot(Phi[b,t,h]) (b[b,t] + b_bias[h]),   q[b,t,h] = Rot(Phi[b,t,h]) (c[b,t] + c_bias[h]),
// Rot turning dims (2s, 2s+1), s < S, by Phi[..., s]: (u, v) -> (u cos - v sin, u sin + v cos); dims
// 2S..N-1 pass through. Returns q, k [B,T,H,N] and phi_last = Phi_{T-1} [B,H,S] (phi0, or zeros, when
// T == 0), computed in the compute dtype: fp32 (fp64 when the inputs are fp64: tests); q and k are
// returned in qk_dtype when it is set (rounded once, on output: the M block asks for its activation
// dtype, bf16 under autocast, which ssm_scan's tensor-core path rounds them to anyway), else in the
// compute dtype. Every floating input is differentiable.
struct SsmRotaryInputs {
  torch::Tensor b, c;            // [B,T,N]: RMSNorm_B(B), RMSNorm_C(C) before the per-head bias
  torch::Tensor b_bias, c_bias;  // [H,N]
  torch::Tensor delta;           // [B,T,H]: the step Delta (softplus applied)
  torch::Tensor theta;           // [B,T,S] angle logits, 2S <= N
  torch::Tensor phi0;            // optional [B,H,S]: the angles before position 0 (a continued sequence)
  std::optional<torch::Dtype> qk_dtype;  // q and k's dtype (fp32 or bf16); unset: the compute dtype
};
struct SsmRotaryOutputs {
  torch::Tensor q, k;     // [B,T,H,N]
  torch::Tensor phi_last; // [B,H,S]
};
using SsmRotaryFn = std::function<SsmRotaryOutputs(const SsmRotaryInputs&)>;
// ssm_scan (Mamba-3 SISO core, docs/model.md "M"): h_t = alpha_t h_{t-1} + beta_t x_{t-1} k_{t-1}^T
// + gamma_t x_t k_t^T (alpha_t = exp(log_alpha_t)), y_t = h_t q_t + D x_t, out = y * silu(z) when z
// is given. Arithmetic and state in fp32 (fp64 when the inputs are fp64: tests). Every tensor of floats
// is differentiable (h0, x_prev, k_prev and z included).
struct SsmScanInputs {
  torch::Tensor x;                       // [B,T,H,P], fp32 or bf16
  torch::Tensor q, k;                    // [B,T,H,N] (already rotated), fp32 or bf16
  torch::Tensor log_alpha, beta, gamma;  // [B,T,H] fp32
  torch::Tensor D;                       // [H]
  torch::Tensor z;                       // optional [B,T,H,P] gate: output y * silu(z)
  torch::Tensor h0;                      // optional [B,H,P,N] fp32: the state before position 0
  torch::Tensor x_prev, k_prev;          // optional [B,H,P], [B,H,N]: position -1's input and key, so
                                         // that a sequence continued from h0 gets its beta_0 term;
                                         // without them there is no beta term at t = 0 (as before)
  int64_t chunk = 64;
};
struct SsmScanOutputs {
  torch::Tensor y;       // [B,T,H,P] in x's dtype (computed in fp32, rounded once on output)
  torch::Tensor h_last;  // [B,H,P,N] fp32: h_{T-1} (h0, or zeros, when T == 0)
};
using SsmScanFn = std::function<SsmScanOutputs(const SsmScanInputs&)>;
// causal_conv (the R block's temporal convolution, docs/model.md "R"): depthwise and causal over time,
// out[b,t,c] = bias[c] + sum_{j<K} x[b, t-K+1+j, c] weight[c,j], x before the first step 0. x [B,T,C]
// (strided: the R block hands a slice of its input projection), weight [C,K], bias [C] (the
// parameters' dtype). out [B,T,C] in the promoted dtype of x and weight (fp32 for bf16 x under
// autocast), with bias taken in x's dtype.
using CausalConvFn =
    std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)>;
// recurrent_scan (RG-LRU, docs/model.md "R"), gates fused: log a_t = -8 sigmoid(gate_a_t) softplus(-lambda),
// a_t = exp(log a_t), b_t = sqrt(1 - a_t^2) sigmoid(gate_x_t) u_t (computed as sqrt(-expm1(2 log a_t))),
// h_t = a_t h_{t-1} + b_t, h_{-1} = h0 or 0. Arithmetic in fp32. Every floating input is differentiable.
inline constexpr double kRecurrentDecayScale = 8.0;  // the 8 in log a_t = -8 sigmoid(gate_a_t) softplus(-lambda)
struct RecurrentScanInputs {
  torch::Tensor gate_a, gate_x;  // [B,T,W] gate logits (pre-sigmoid), fp32 or bf16
  torch::Tensor u;               // [B,T,W], fp32 or bf16
  torch::Tensor lambda;          // [W] the Lambda parameter (fp32)
  torch::Tensor h0;              // optional [B,W] fp32
};
struct RecurrentScanOutputs {
  torch::Tensor h;       // [B,T,W] fp32
  torch::Tensor h_last;  // [B,W] fp32: h_{T-1} (h0, or zeros, when T == 0)
};
using RecurrentScanFn = std::function<RecurrentScanOutputs(const RecurrentScanInputs&)>;
// loss: hidden [N, d], head_weight [V, d], targets [N] int64, mask [N] (0/1) -> 0-dim tensor, fp32
// (fp64 when the inputs are fp64): sum over masked positions of cross-entropy / max(1, number of
// masked positions).
using LossFn = std::function<torch::Tensor(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                           const torch::Tensor& targets, const torch::Tensor& mask)>;
// optimizer: one AdamW update (decoupled weight decay) of one parameter group. params, grads, exp_avgs,
// exp_avg_sqs: equal-length lists of same-shape tensors of the params' dtype (fp32 master weights; fp64
// in tests); steps: one 0-dim fp32 tensor per parameter, incremented by 1 before the update; lr: 0-dim
// fp32 tensor; grad_scale: undefined, or a 0-dim fp32 tensor every gradient is divided by before the
// update (the clipping's 1 / coefficient: no pass of its own over the gradients);
// with it the grads' values after the call are unspecified (fused_adamw stores them divided, the other
// backends leave them; the step drops them); rounded: empty, or one bf16 tensor per parameter of its
// shape, which the call leaves holding the updated parameter rounded to nearest (what .to(bf16) gives:
// the copy a sharded stage gathers of a GEMM weight kept in bf16, written as the update writes the fp32
// value rather than in a pass of its own). Updates params, moments, steps (and rounded) in place on their
// device and reads nothing on the host, so a CUDA graph can capture it (step counts, learning rate and
// grad_scale are tensors for that reason).
struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
using OptimizerFn = std::function<void(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                       at::TensorList exp_avg_sqs, at::TensorList steps, const torch::Tensor& lr,
                                       const torch::Tensor& grad_scale, const AdamWHyper& hyper,
                                       at::TensorList rounded)>;

}  // namespace ablate::kernels
