// kernels/dispatch.h: the typed signature of every seam and the dispatcher that the model calls
// seams through. Blocks never call a backend directly: a later fast backend is one more registry row.
// Every seam call opens a launch scope (kernels/scope.h) for the profiler and NVTX.
// Shapes and dtypes below are the contract every backend of a seam honours (and the parity tests check).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/catalog.h"

namespace ablate::kernels {

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
// moe_dispatch: x [T, d], topk_idx [T, k] int64, topk_w [T, k] (renormalised), expert weights
// w1, w3 [E, f, d], w2 [E, d, f] -> y [T, d] = sum_j w_j * W2_e(silu(W1_e x) * W3_e x).
// capacity_factor 0 = dropless; otherwise tokens over capacity ceil(cf * T * k / E) get 0 for that
// slot and `dropped` (when given) receives the count of dropped slots as a 0-dim int64 tensor (no sync).
using MoeDispatchFn = std::function<torch::Tensor(
    const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
    const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2, double capacity_factor,
    torch::Tensor* dropped)>;
// ssm_scan (Mamba-3 SISO core, MODEL.md "M"): h_t = alpha_t h_{t-1} + beta_t x_{t-1} k_{t-1}^T
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
  torch::Tensor y;       // [B,T,H,P] fp32
  torch::Tensor h_last;  // [B,H,P,N] fp32: h_{T-1} (h0, or zeros, when T == 0)
};
using SsmScanFn = std::function<SsmScanOutputs(const SsmScanInputs&)>;
// recurrent_scan (RG-LRU core): a, b [B,T,W] fp32 -> h [B,T,W], h_t = a_t * h_{t-1} + b_t, h_{-1} = 0.
using RecurrentScanFn = std::function<torch::Tensor(const torch::Tensor& a, const torch::Tensor& b)>;
// loss: hidden [N, d], head_weight [V, d], targets [N] int64, mask [N] (0/1) -> 0-dim tensor, fp32
// (fp64 when the inputs are fp64): sum over masked positions of cross-entropy / max(1, number of
// masked positions).
using LossFn = std::function<torch::Tensor(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                                           const torch::Tensor& targets, const torch::Tensor& mask)>;
// optimizer: one AdamW update (decoupled weight decay) of one parameter group. params, grads, exp_avgs,
// exp_avg_sqs: equal-length lists of same-shape tensors of the params' dtype (fp32 master weights; fp64
// in tests); steps: one 0-dim fp32 tensor per parameter, incremented by 1 before the update; lr: 0-dim
// fp32 tensor. Updates params, moments and steps in place on their device and reads nothing on the host,
// so a CUDA graph can capture it (step counts and learning rate are tensors for that reason).
struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
using OptimizerFn = std::function<void(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                                       at::TensorList exp_avg_sqs, at::TensorList steps, const torch::Tensor& lr,
                                       const AdamWHyper& hyper)>;

// The registry: one implementation per (seam, backend name) that the catalog lists.
struct Implementations {
  std::map<std::string, AttentionFn> attention;
  std::map<std::string, RopeFn> rope;
  std::map<std::string, ResidualNormFn> residual_norm;
  std::map<std::string, SwigluFn> swiglu;
  std::map<std::string, MoeDispatchFn> moe_dispatch;
  std::map<std::string, SsmScanFn> ssm_scan;
  std::map<std::string, RecurrentScanFn> recurrent_scan;
  std::map<std::string, LossFn> loss;
  std::map<std::string, OptimizerFn> optimizer;
};
const Implementations& implementations();
// Whether the registry has an implementation for (seam, backend name): the catalog and the registry
// must list the same rows (checked by the Dispatcher and by tests/kernels/catalog_test.cpp).
bool has_implementation(const std::string& seam, const std::string& name);

// Test-only: every Dispatcher calls `implementation` for `seam` while still reporting (and scoping
// as) its chosen backend, so the profiler's observed-backend check must flag the seam. "" clears.
// Used by tests/harness/profiling_gpu_test.cpp; never by the harness.
void force_implementation_for_testing(const std::string& seam, const std::string& implementation);

// The DeviceInfo that availability checks see for a live device and run dtype (bf16 -> "bf16",
// fp16 -> "fp16", anything else "fp32"); compute capability read from the CUDA device when there is one.
DeviceInfo describe_device(const torch::Device& device, torch::ScalarType dtype);

// One model instance's resolved seams. Built from the requested backends (seam -> name; missing
// seams request "reference"); every resolution is kept for the receipt.
class Dispatcher {
 public:
  // Throws std::invalid_argument for an unknown seam/backend name or, under `strict`, for an
  // unavailable requested backend.
  Dispatcher(const std::map<std::string, std::string>& requested, const DeviceInfo& dev, bool strict);
  Dispatcher();  // every seam on its reference backend

  const std::vector<Resolution>& resolutions() const { return resolutions_; }
  const std::string& chosen(const std::string& seam) const;

  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) const;
  std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                               const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                               const torch::Tensor& cos, const torch::Tensor& sin) const;
  std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                        const torch::Tensor& weight, double eps) const;
  torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b) const;
  torch::Tensor moe_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor, torch::Tensor* dropped) const;
  SsmScanOutputs ssm_scan(const SsmScanInputs& inputs) const;
  torch::Tensor recurrent_scan(const torch::Tensor& a, const torch::Tensor& b) const;
  torch::Tensor loss(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                     const torch::Tensor& mask) const;
  void optimizer(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps, const torch::Tensor& lr, const AdamWHyper& hyper) const;

 private:
  // The implementation a seam call runs: the chosen backend unless a test forced another.
  std::string implementation_of(const std::string& seam) const;
  std::vector<Resolution> resolutions_;
  std::map<std::string, std::string> chosen_;
};

}  // namespace ablate::kernels
