// kernels/ssm_scan/reference.cpp: the reference backend of seam `ssm_scan`, the Mamba-3 SISO scan of
// docs/model.md "M", in LibTorch ops. Owns ssm_scan_chunked (what the model runs, CPU and GPU, through
// autograd) and ssm_scan_stepwise (the recurrence written out one timestep at a time, the definition
// the chunked form is checked against). Contract: SsmScanFn in kernels/seams.h.
// Test: kernels_tests --gtest_filter='SsmScan*' (tests/kernels/scans_test.cpp);
// time: kernels_bench --benchmark_filter=ssm_scan (kernels/ssm_scan/bench.cpp).
//
// The math the chunked form uses. Write u_s = x_s k_s^T (P x N) and L_ts = prod_{r=s+1..t} alpha_r.
// Unrolling h_t = alpha_t h_{t-1} + beta_t u_{t-1} + gamma_t u_t gives
//   h_t = sum_{s<=t} L_ts gamma_s u_s + sum_{s<t} L_{t,s+1} beta_{s+1} u_s.
// docs/model.md writes the second coefficient as L_ts delta_{s+1}, delta_{s+1} = beta_{s+1} / alpha_{s+1},
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
//
// Continuation (SsmScanInputs h0, x_prev, k_prev): x_prev / k_prev fill the "position -1" column of the
// first chunk (zeros without them: no beta term at t = 0); h0 is the state entering chunk 0, so it
// is one more source of the inter-chunk closed form, decayed into every chunk; h_last is that closed
// form taken one chunk further (the state after the last chunk: the zero-padded tail has alpha = 1
// and no inputs, so it is h_{T-1}). The gate z multiplies the output last: y * silu(z).
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/ssm_scan/reference.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

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

Dims check_ssm_args(const SsmScanInputs& in) {
  const auto &x = in.x, &q = in.q, &k = in.k;
  TORCH_CHECK(x.defined() && x.dim() == 4, "ssm_scan: x must be [B,T,H,P], got ", x.defined() ? x.sizes() : at::IntArrayRef{});
  const Dims d{x.size(0), x.size(1), x.size(2), x.size(3), q.defined() && q.dim() == 4 ? q.size(3) : -1};
  TORCH_CHECK(q.defined() && q.dim() == 4 && q.size(0) == d.B && q.size(1) == d.T && q.size(2) == d.H,
              "ssm_scan: q must be [B,T,H,N] matching x ", x.sizes(), ", got ", q.defined() ? q.sizes() : at::IntArrayRef{});
  TORCH_CHECK(k.defined() && k.sizes() == q.sizes(), "ssm_scan: k must match q ", q.sizes(), ", got ",
              k.defined() ? k.sizes() : at::IntArrayRef{});
  for (const auto* t : {&in.log_alpha, &in.beta, &in.gamma})
    TORCH_CHECK(t->defined() && t->dim() == 3 && t->size(0) == d.B && t->size(1) == d.T && t->size(2) == d.H,
                "ssm_scan: log_alpha, beta, gamma must be [B,T,H] = [", d.B, ",", d.T, ",", d.H, "], got ",
                t->defined() ? t->sizes() : at::IntArrayRef{});
  TORCH_CHECK(in.D.defined() && in.D.dim() == 1 && in.D.size(0) == d.H, "ssm_scan: D must be [H] = [", d.H, "], got ",
              in.D.defined() ? in.D.sizes() : at::IntArrayRef{});
  TORCH_CHECK(!in.z.defined() || in.z.sizes() == x.sizes(), "ssm_scan: z must be [B,T,H,P] like x ", x.sizes(),
              ", got ", in.z.defined() ? in.z.sizes() : at::IntArrayRef{});
  TORCH_CHECK(!in.h0.defined() || in.h0.sizes() == at::IntArrayRef({d.B, d.H, d.P, d.N}),
              "ssm_scan: h0 must be [B,H,P,N] = [", d.B, ",", d.H, ",", d.P, ",", d.N, "], got ",
              in.h0.defined() ? in.h0.sizes() : at::IntArrayRef{});
  TORCH_CHECK(in.x_prev.defined() == in.k_prev.defined(),
              "ssm_scan: x_prev and k_prev come together (position -1's input and key); got only ",
              in.x_prev.defined() ? "x_prev" : "k_prev");
  if (in.x_prev.defined()) {
    TORCH_CHECK(in.x_prev.sizes() == at::IntArrayRef({d.B, d.H, d.P}), "ssm_scan: x_prev must be [B,H,P] = [", d.B,
                ",", d.H, ",", d.P, "], got ", in.x_prev.sizes());
    TORCH_CHECK(in.k_prev.sizes() == at::IntArrayRef({d.B, d.H, d.N}), "ssm_scan: k_prev must be [B,H,N] = [", d.B,
                ",", d.H, ",", d.N, "], got ", in.k_prev.sizes());
  }
  return d;
}

// The arithmetic dtype of a call: fp32, or fp64 when any floating input is fp64.
at::ScalarType compute_dtype(const SsmScanInputs& in) {
  return kernels::compute_dtype("ssm_scan", {&in.x, &in.q, &in.k, &in.log_alpha, &in.beta, &in.gamma, &in.D, &in.z,
                                             &in.h0, &in.x_prev, &in.k_prev});
}

// D skip and gate, shared by both forms: (y + D x) * silu(z) (no gate without z), y [B,T,H,P] in dt;
// returned in x's dtype (the contract: rounded once, on output).
torch::Tensor skip_and_gate(const torch::Tensor& y, const SsmScanInputs& in, at::ScalarType dt) {
  const auto out = y + in.D.to(dt).view({1, 1, in.D.size(0), 1}) * in.x.to(dt);
  return (in.z.defined() ? out * torch::silu(in.z.to(dt)) : out).to(in.x.scalar_type());
}

}  // namespace

SsmScanOutputs ssm_scan_stepwise(const SsmScanInputs& in) {
  const auto [B, T, H, P, N] = check_ssm_args(in);
  // Autocast would run the matmul below in bf16; the reference is defined in fp32/fp64.
  NoAutocastScope no_autocast;
  const auto dt = compute_dtype(in);
  const auto xs = in.x.to(dt), qs = in.q.to(dt), ks = in.k.to(dt);
  const auto la = in.log_alpha.to(dt), bt = in.beta.to(dt), gm = in.gamma.to(dt);

  // Per (batch, head) scalar at time t, shaped to scale a [B,H,P,N] state.
  auto at_t = [](const torch::Tensor& v, int64_t t) { return v.select(1, t).unsqueeze(-1).unsqueeze(-1); };
  auto h = in.h0.defined() ? in.h0.to(dt) : torch::zeros({B, H, P, N}, xs.options());  // h_{-1}
  // x_{-1} k_{-1}^T: only with x_prev / k_prev (otherwise no beta term at the first position).
  torch::Tensor u_prev;
  if (in.x_prev.defined()) u_prev = in.x_prev.to(dt).unsqueeze(-1) * in.k_prev.to(dt).unsqueeze(-2);
  std::vector<torch::Tensor> ys;
  ys.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const auto u = xs.select(1, t).unsqueeze(-1) * ks.select(1, t).unsqueeze(-2);  // x_t k_t^T, [B,H,P,N]
    h = at_t(la, t).exp() * h + at_t(gm, t) * u;
    if (u_prev.defined()) h = h + at_t(bt, t) * u_prev;
    u_prev = u;
    ys.push_back(torch::matmul(h, qs.select(1, t).unsqueeze(-1)).squeeze(-1));
  }
  const auto y = T == 0 ? torch::zeros({B, 0, H, P}, xs.options()) : torch::stack(ys, 1);  // [B,T,H,P]
  return {skip_and_gate(y, in, dt), h};
}

SsmScanOutputs ssm_scan_chunked(const SsmScanInputs& in) {
  const auto [B, T, H, P, N] = check_ssm_args(in);
  const int64_t chunk = in.chunk;
  TORCH_CHECK(chunk >= 1, "ssm_scan: chunk must be >= 1, got ", chunk);
  // The contract is fp32 arithmetic; under autocast the matmuls would silently drop to bf16.
  NoAutocastScope no_autocast;
  const auto dt = compute_dtype(in);
  const auto opts = in.x.options().dtype(dt);
  if (T == 0)
    return {torch::zeros({B, 0, H, P}, in.x.options()), in.h0.defined() ? in.h0.to(dt) : torch::zeros({B, H, P, N}, opts)};

  // A chunk longer than the sequence only adds padding; the result does not depend on L otherwise.
  const int64_t L = std::min(chunk, T);
  const int64_t nC = (T + L - 1) / L;
  const int64_t pad = nC * L - T;  // the tail: zero inputs after the last position, sliced off below
                                   // (causality: padding never reaches a real position; alpha = 1
                                   // there, so the state after the last chunk is h_{T-1})

  // [B,T,H,F] -> [B,H,nC,L,F] and [B,T,H] -> [B,H,nC,L].
  auto chunks4 = [&](const torch::Tensor& v) {
    return pad_time(v.to(dt), pad).reshape({B, nC, L, H, v.size(3)}).permute({0, 3, 1, 2, 4});
  };
  auto chunks3 = [&](const torch::Tensor& v) {
    return pad_time(v.to(dt), pad).reshape({B, nC, L, H}).permute({0, 3, 1, 2});
  };
  const auto xc = chunks4(in.x), qc = chunks4(in.q), kc = chunks4(in.k);
  const auto la = chunks3(in.log_alpha.to(dt).clamp_min(log_alpha_floor(dt)));
  const auto bt = chunks3(in.beta), gm = chunks3(in.gamma);

  // Keys and values with the previous chunk's last position prepended as column 0 ("position -1");
  // before the first chunk that is x_prev / k_prev, or zeros (the "no beta term at t = 0").
  auto with_prev = [&](const torch::Tensor& v, const torch::Tensor& first) {  // [B,H,nC,L,F] -> [B,H,nC,L+1,F]
    const auto last = v.select(3, L - 1).narrow(2, 0, nC - 1);                // [B,H,nC-1,F]
    const auto head = first.defined() ? first.to(dt).unsqueeze(2) : torch::zeros_like(v.select(3, 0).narrow(2, 0, 1));
    return torch::cat({torch::cat({head, last}, 2).unsqueeze(3), v}, 3);
  };
  const auto xa = with_prev(xc, in.x_prev), ka = with_prev(kc, in.k_prev);

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

  // What each chunk adds to the state at its last position, from its own inputs (incl. column 0):
  // Z_c = sum_j W_{L-1,j} x_j k_j^T.
  const auto w_end = W.select(3, L - 1).unsqueeze(-1);      // [B,H,nC,L+1,1]
  const auto xw = (xa * w_end).transpose(-1, -2);           // [B,H,nC,P,L+1]
  const auto Z = torch::matmul(xw, ka);                     // [B,H,nC,P,N]
  // Inter-chunk recurrence on the true state at chunk boundaries: S_{c+1} = exp(Lam_c) S_c + Z_c with
  // S_0 = h0 (or 0) and Lam_c the sum of log alpha over chunk c; S_nC is h_last. Solved in closed form,
  // as SSD does: with sources src_0 = h0, src_{j+1} = Z_j,
  // S_c = sum_{m<=c} exp(Lam_m + ... + Lam_{c-1}) src_m, one ((nC+1) x (nC+1)) decay matrix per (batch,
  // head) and one matmul. Why not a loop over chunks: at nam56r-small on an H100 the loop form of
  // this step alone took 4.5 ms forward+backward (13 ms with a per-chunk select, whose backward
  // writes a full-size zero tensor each time), the whole scan with the matrix form takes 15 ms. The
  // matrix costs 2 nC P N flops per chunk and head, ~14% of the scan at nam56r-small (nC = 32); it
  // would match the rest at nC ~ 220 (T ~ 14k at L = 64), where a loop would be the better choice.
  // v_0 = 0 (unused), v_r = Lam_{r-1}, so exact_causal_decay(v)[c, m] = exp(Lam_m + ... + Lam_{c-1}).
  const auto lam = cum.select(3, L - 1);                 // [B,H,nC]
  const auto v = torch::constant_pad_nd(lam, {1, 0});    // [B,H,nC+1]
  const auto M = exact_causal_decay(v);                  // [B,H,nC+1,nC+1]
  const auto h0 = in.h0.defined() ? in.h0.to(dt).unsqueeze(2) : torch::zeros({B, H, 1, P, N}, opts);
  const auto sources = torch::cat({h0, Z}, 2).flatten(-2);              // [B,H,nC+1,P*N]
  const auto S = torch::matmul(M, sources).view({B, H, nC + 1, P, N});  // S_0 .. S_nC
  // Inter-chunk term: y_t += exp(cum[t]) S_c q_t.
  y = y + torch::matmul(qc, S.narrow(2, 0, nC).transpose(-1, -2)) * cum.exp().unsqueeze(-1);

  y = y.permute({0, 2, 3, 1, 4}).reshape({B, nC * L, H, P}).narrow(1, 0, T);
  return {skip_and_gate(y, in, dt).contiguous(), S.select(2, nC).contiguous()};
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(ssm_scan_reference) {
  registry.ssm_scan("reference", &reference::ssm_scan_chunked);
}

}  // namespace ablate::kernels
