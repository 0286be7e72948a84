// kernels/ssm_scan/reference.cpp: the reference backend of seam `ssm_scan`, the Mamba-3 SISO scan of
// MODEL.md "M", in LibTorch ops. Owns ssm_scan_chunked (what the model runs, CPU and GPU, through
// autograd) and ssm_scan_stepwise (the recurrence written out one timestep at a time, the definition
// the chunked form is checked against). Contract: SsmScanFn in kernels/seams.h.
// Test: kernels_tests --gtest_filter='SsmScan*' (tests/kernels/scans_test.cpp);
// time: kernels_bench --benchmark_filter=ssm_scan (kernels/ssm_scan/bench.cpp).
//
// The math the chunked form uses. Write u_s = x_s k_s^T (P x N) and L_ts = prod_{r=s+1..t} alpha_r.
// Unrolling h_t = alpha_t h_{t-1} + beta_t u_{t-1} + gamma_t u_t gives
//   h_t = sum_{s<=t} L_ts gamma_s u_s + sum_{s<t} L_{t,s+1} beta_{s+1} u_s.
// MODEL.md writes the second coefficient as L_ts delta_{s+1}, delta_{s+1} = beta_{s+1} / alpha_{s+1},
// and then subtracts the s = t term again (its "- (q_t.k_t) delta_{t+1} x_t"). We use
// L_{t,s+1} beta_{s+1}, the same number without dividing by alpha: in fp32 alpha_{s+1} underflows to
// 0 once Delta*A < -104 (and exp(-log alpha) overflows already at -89), so beta / alpha would be 0/0 or
// inf; the s = t correction then never appears because the second sum stops at s < t.
// So y_t = sum_{s<=t} W_ts (q_t.k_s) x_s + D x_t with W_ts = L_ts gamma_s + [s<t] L_{t,s+1} beta_{s+1}.
// Within a chunk of length L this is one masked (L x L) matrix; every L_ts is exp of a difference of
// chunk-local cumulative sums of log alpha, masked to -inf above the diagonal BEFORE exp (the
// differences there are sums of -log alpha >= 0 and would overflow). Across chunks we carry the true
// state h at each chunk's last position; the beta term that links a chunk's last position e to the
// next chunk's first position e+1 (coefficient L_{t,e+1} beta_{e+1}) is handled as one extra key
// column "position -1" in the next chunk, so the intra-chunk matrix becomes L x (L+1). The chunk-to-
// chunk state recurrence is solved in closed form by a (chunks x chunks) decay matrix (see below).
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ssm_scan/reference.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

// fp32 arithmetic unless an input is fp64 (tests): bf16/fp16 inputs are promoted, never computed in.
at::ScalarType compute_dtype(std::initializer_list<const torch::Tensor*> ts) {
  at::ScalarType dt = at::kFloat;
  for (const auto* t : ts) dt = at::promote_types(dt, t->scalar_type());
  TORCH_CHECK(dt == at::kFloat || dt == at::kDouble, "ssm_scan: unsupported input dtype ", dt);
  return dt;
}

// Lower bound for log alpha in the chunked form: the log of the smallest normal number of the compute
// dtype. Any decay through such a step is below 1e-38 (fp32), i.e. 0 at working precision, so the value
// and the gradient (d/d log_alpha carries a factor alpha) are unchanged; what it prevents is one huge
// -log alpha (or -inf) inflating the chunk's cumulative sums, whose differences would then lose every
// significant digit (or become -inf - -inf = NaN).
double log_alpha_floor(at::ScalarType dt) {
  return dt == at::kDouble ? std::log(std::numeric_limits<double>::min())
                           : std::log(static_cast<double>(std::numeric_limits<float>::min()));
}

// Zero-pads dim 1 (time) at the end by `pad` steps.
torch::Tensor pad_time(const torch::Tensor& v, int64_t pad) {
  if (pad == 0) return v;
  std::vector<int64_t> spec(2 * static_cast<size_t>(v.dim() - 1), 0);
  spec.back() = pad;
  return torch::constant_pad_nd(v, spec);
}

// exp(cum[..., t] - cum[..., s]) for s <= t and 0 for s > t: [..., L] -> [..., L, L].
torch::Tensor causal_decay(const torch::Tensor& cum) {
  const int64_t L = cum.size(-1);
  auto seg = cum.unsqueeze(-1) - cum.unsqueeze(-2);
  auto upper = torch::ones({L, L}, cum.options().dtype(torch::kBool)).triu(1);
  return seg.masked_fill(upper, -std::numeric_limits<double>::infinity()).exp();
}

// exp(v[j+1] + ... + v[i]) for j <= i and 0 for j > i: [..., n] -> [..., n, n]. Every entry is summed
// from its own terms (a cumulative sum down the columns of a strictly-lower-triangular copy of v), not
// taken as a difference of prefix sums: across chunks the prefix sums grow with T (fifty resets of
// log alpha = -20 put them at -1000), and their differences would lose fp32 digits where the decay
// between two late chunks is still ~1. Costs O(n^2) per (batch, head) for n = number of chunks.
torch::Tensor exact_causal_decay(const torch::Tensor& v) {
  const int64_t n = v.size(-1);
  const auto ones = torch::ones({n, n}, v.options().dtype(torch::kBool));
  const auto terms = v.unsqueeze(-1) * ones.tril(-1).to(v.scalar_type());  // [i, j] = v_i for i > j
  return terms.cumsum(-2).masked_fill(ones.triu(1), -std::numeric_limits<double>::infinity()).exp();
}

struct Dims {
  int64_t B, T, H, P, N;
};

Dims check_ssm_args(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                    const torch::Tensor& log_alpha, const torch::Tensor& beta, const torch::Tensor& gamma,
                    const torch::Tensor& D) {
  TORCH_CHECK(x.dim() == 4, "ssm_scan: x must be [B,T,H,P], got ", x.sizes());
  const Dims d{x.size(0), x.size(1), x.size(2), x.size(3), q.dim() == 4 ? q.size(3) : -1};
  TORCH_CHECK(q.dim() == 4 && q.size(0) == d.B && q.size(1) == d.T && q.size(2) == d.H,
              "ssm_scan: q must be [B,T,H,N] matching x ", x.sizes(), ", got ", q.sizes());
  TORCH_CHECK(k.sizes() == q.sizes(), "ssm_scan: k must match q ", q.sizes(), ", got ", k.sizes());
  for (const auto* t : {&log_alpha, &beta, &gamma})
    TORCH_CHECK(t->dim() == 3 && t->size(0) == d.B && t->size(1) == d.T && t->size(2) == d.H,
                "ssm_scan: log_alpha, beta, gamma must be [B,T,H] = [", d.B, ",", d.T, ",", d.H, "], got ", t->sizes());
  TORCH_CHECK(D.dim() == 1 && D.size(0) == d.H, "ssm_scan: D must be [H] = [", d.H, "], got ", D.sizes());
  return d;
}

}  // namespace

torch::Tensor ssm_scan_stepwise(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& log_alpha, const torch::Tensor& beta, const torch::Tensor& gamma,
                                const torch::Tensor& D) {
  const auto [B, T, H, P, N] = check_ssm_args(x, q, k, log_alpha, beta, gamma, D);
  // Autocast would run the matmul below in bf16; the reference is defined in fp32/fp64.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto dt = compute_dtype({&x, &q, &k, &log_alpha, &beta, &gamma, &D});
  const auto xs = x.to(dt), qs = q.to(dt), ks = k.to(dt);
  const auto la = log_alpha.to(dt), bt = beta.to(dt), gm = gamma.to(dt);
  const auto Dh = D.to(dt).view({1, H, 1});
  if (T == 0) return torch::zeros({B, 0, H, P}, xs.options());

  // Per (batch, head) scalar at time t, shaped to scale a [B,H,P,N] state.
  auto at_t = [](const torch::Tensor& v, int64_t t) { return v.select(1, t).unsqueeze(-1).unsqueeze(-1); };
  auto h = torch::zeros({B, H, P, N}, xs.options());  // h_{-1} = 0
  torch::Tensor u_prev;
  std::vector<torch::Tensor> ys;
  ys.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto xt = xs.select(1, t);                                  // [B,H,P]
    const auto u = xt.unsqueeze(-1) * ks.select(1, t).unsqueeze(-2);  // x_t k_t^T, [B,H,P,N]
    h = at_t(la, t).exp() * h + at_t(gm, t) * u;
    if (t > 0) h = h + at_t(bt, t) * u_prev;  // no beta term at the first position
    u_prev = u;
    ys.push_back(torch::matmul(h, qs.select(1, t).unsqueeze(-1)).squeeze(-1) + Dh * xt);
  }
  return torch::stack(ys, 1);  // [B,T,H,P]
}

torch::Tensor ssm_scan_chunked(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& log_alpha, const torch::Tensor& beta, const torch::Tensor& gamma,
                               const torch::Tensor& D, int64_t chunk) {
  const auto [B, T, H, P, N] = check_ssm_args(x, q, k, log_alpha, beta, gamma, D);
  TORCH_CHECK(chunk >= 1, "ssm_scan: chunk must be >= 1, got ", chunk);
  // The contract is fp32 arithmetic; under autocast the matmuls would silently drop to bf16.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto dt = compute_dtype({&x, &q, &k, &log_alpha, &beta, &gamma, &D});
  if (T == 0) return torch::zeros({B, 0, H, P}, x.options().dtype(dt));

  // A chunk longer than the sequence only adds padding; the result does not depend on L otherwise.
  const int64_t L = std::min(chunk, T);
  const int64_t nC = (T + L - 1) / L;
  const int64_t pad = nC * L - T;  // the tail: zero inputs after the last position, sliced off below
                                   // (causality: padding never reaches a real position)

  // [B,T,H,F] -> [B,H,nC,L,F] and [B,T,H] -> [B,H,nC,L].
  auto chunks4 = [&](const torch::Tensor& v) {
    return pad_time(v.to(dt), pad).reshape({B, nC, L, H, v.size(3)}).permute({0, 3, 1, 2, 4});
  };
  auto chunks3 = [&](const torch::Tensor& v) {
    return pad_time(v.to(dt), pad).reshape({B, nC, L, H}).permute({0, 3, 1, 2});
  };
  const auto xc = chunks4(x), qc = chunks4(q), kc = chunks4(k);
  const auto la = chunks3(log_alpha.to(dt).clamp_min(log_alpha_floor(dt)));
  const auto bt = chunks3(beta), gm = chunks3(gamma);

  // Keys and values with the previous chunk's last position prepended as column 0 ("position -1");
  // zeros before the first chunk, which is the "no beta term at t = 0" of the recurrence.
  auto with_prev = [&](const torch::Tensor& v) {                                // [B,H,nC,L,F] -> [B,H,nC,L+1,F]
    const auto last = v.select(3, L - 1).narrow(2, 0, nC - 1);                  // [B,H,nC-1,F]
    const auto prev = torch::constant_pad_nd(last, {0, 0, 1, 0}).unsqueeze(3);  // [B,H,nC,1,F]
    return torch::cat({prev, v}, 3);
  };
  const auto xa = with_prev(xc), ka = with_prev(kc);

  // cum[t] = sum of log alpha over chunk positions 0..t, so exp(cum[t] - cum[s]) = L_ts inside a chunk
  // and exp(cum[t]) is the decay from the state entering the chunk to position t.
  const auto cum = la.cumsum(-1);        // [B,H,nC,L]
  const auto decay = causal_decay(cum);  // [B,H,nC,L,L], L_ts
  // W over key columns j = 0..L (column j holds position j-1 of the chunk):
  //   gamma part L_{t,j-1} gamma_{j-1} for j >= 1, beta part L_{t,j} beta_j for j <= L-1.
  const auto W = torch::constant_pad_nd(decay * gm.unsqueeze(-2), {1, 0}) +
                 torch::constant_pad_nd(decay * bt.unsqueeze(-2), {0, 1});  // [B,H,nC,L,L+1]

  // Intra-chunk (quadratic) term: y_t = sum_j W_tj (q_t . k_j) x_j.
  auto y = torch::matmul(torch::matmul(qc, ka.transpose(-1, -2)) * W, xa);  // [B,H,nC,L,P]

  if (nC > 1) {
    // What each chunk adds to the state at its last position, from its own inputs (incl. column 0):
    // Z_c = sum_j W_{L-1,j} x_j k_j^T. Only chunks 0..nC-2 feed a later chunk.
    const auto w_end = W.select(3, L - 1).narrow(2, 0, nC - 1).unsqueeze(-1);  // [B,H,nC-1,L+1,1]
    const auto xw = (xa.narrow(2, 0, nC - 1) * w_end).transpose(-1, -2);       // [B,H,nC-1,P,L+1]
    const auto Z = torch::matmul(xw, ka.narrow(2, 0, nC - 1));                 // [B,H,nC-1,P,N]
    // Inter-chunk recurrence on the true state at chunk ends: S_{c+1} = exp(Lam_c) S_c + Z_c, S_0 = 0,
    // with Lam_c the sum of log alpha over chunk c. Solved in closed form, as SSD does:
    // S_c = sum_{j<c} exp(Lam_{j+1} + ... + Lam_{c-1}) Z_j, one (nC x nC-1) decay matrix per (batch,
    // head) and one matmul. Why not a loop over chunks: at nam56r-small on an H100 the loop form of
    // this step alone took 4.5 ms forward+backward (13 ms with a per-chunk select, whose backward
    // writes a full-size zero tensor each time), the whole scan with the matrix form takes 15 ms. The
    // matrix costs 2 nC P N flops per chunk and head, ~14% of the scan at nam56r-small (nC = 32); it
    // would match the rest at nC ~ 220 (T ~ 14k at L = 64), where a loop would be the better choice.
    // v_r = Lam_{r-1} (v_0 unused), so exact_causal_decay(v)[c, j+1] = exp(Lam_{j+1} + ... + Lam_{c-1}).
    const auto lam = cum.select(3, L - 1).narrow(2, 0, nC - 1);  // [B,H,nC-1]
    const auto v = torch::constant_pad_nd(lam, {1, 0});          // [B,H,nC]
    const auto M = exact_causal_decay(v).narrow(-1, 1, nC - 1);  // [B,H,nC,nC-1]
    // The state entering each chunk, [B,H,nC,P,N].
    const auto S = torch::matmul(M, Z.flatten(-2)).view({B, H, nC, P, N});
    // Inter-chunk term: y_t += exp(cum[t]) S_c q_t.
    y = y + torch::matmul(qc, S.transpose(-1, -2)) * cum.exp().unsqueeze(-1);
  }

  y = y.permute({0, 2, 3, 1, 4}).reshape({B, nC * L, H, P}).narrow(1, 0, T);
  return (y + D.to(dt).view({1, 1, H, 1}) * x.to(dt)).contiguous();
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(ssm_scan_reference) {
  registry.ssm_scan({.name = "reference",
                     .role = Role::reference,
                     .description = "Mamba-3 SISO chunked scan in LibTorch ops, fp32",
                     .unavailable_reason = &availability::always},
                    &reference::ssm_scan_chunked);
}

}  // namespace ablate::kernels
