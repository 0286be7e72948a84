// kernels/recurrent_scan/reference.cpp: the reference backend of seam `recurrent_scan`, the RG-LRU
// linear recurrence h_t = a_t h_{t-1} + b_t (h_{-1} = 0, elementwise over W channels; docs/model.md "R"),
// in LibTorch ops. Owns recurrent_scan_chunked (what the model runs, CPU and GPU, through autograd)
// and recurrent_scan_stepwise (the recurrence one timestep at a time, the definition the chunked form
// is checked against). Contract: RecurrentScanFn in kernels/seams.h.
// Test: kernels_tests --gtest_filter='RecurrentScan*' (tests/kernels/scans_test.cpp);
// time: kernels_bench --benchmark_filter=recurrent_scan (kernels/recurrent_scan/bench.cpp).
//
// Chunked form: inside a chunk of length L, h_t = exp(c_t) h_in + sum_{s<=t} exp(c_t - c_s) b_s with
// c_t the chunk-local cumulative sum of log a (so c is non-increasing and c_t - c_s <= 0 for s <= t).
// The (L x L) decay matrix is exp of those differences, masked to -inf above the diagonal before exp:
// we never exponentiate a large positive number (the tempting exp(c_t) * sum exp(-c_s) b_s would
// overflow fp32 after 13 steps of a = 1e-3). The state h_in is carried across chunks in a sequential
// loop over the T/L chunks. Cost: the decay matrix is per channel, so the intra-chunk part holds
// L times the input in memory (B*T*W*L elements, transient: the backward below does not keep it);
// the chunk length trades that against T/L carry steps. Gradients: a custom autograd Function whose
// backward is the adjoint recurrence, run through the same chunked scan (see ChunkedScan).
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/recurrent_scan/reference.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

// fp32 arithmetic unless an input is fp64 (tests); bf16/fp16 inputs are promoted, never computed in.
void check_args(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 3, "recurrent_scan: a must be [B,T,W], got ", a.sizes());
  TORCH_CHECK(b.sizes() == a.sizes(), "recurrent_scan: b must match a ", a.sizes(), ", got ", b.sizes());
}

}  // namespace

torch::Tensor recurrent_scan_stepwise(const torch::Tensor& a, const torch::Tensor& b) {
  check_args(a, b);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&a, &b});
  const auto as = a.to(dt), bs = b.to(dt);
  const int64_t T = a.size(1);
  if (T == 0) return torch::zeros_like(bs);
  std::vector<torch::Tensor> hs;
  hs.reserve(static_cast<size_t>(T));
  hs.push_back(bs.select(1, 0));  // h_0 = a_0 * 0 + b_0
  for (int64_t t = 1; t < T; ++t) hs.push_back(as.select(1, t) * hs.back() + bs.select(1, t));
  return torch::stack(hs, 1);
}

namespace {

// The chunked scan itself; a, b [B,T,W] already in the compute dtype. Runs only without autograd
// recording (inside ChunkedScan's forward and backward), which is what lets it work in place: the
// (B, T/L, L, L, W) decay tensor exists once, not four times.
torch::Tensor chunked_scan(const torch::Tensor& a, const torch::Tensor& b, int64_t chunk) {
  TORCH_INTERNAL_ASSERT(!torch::GradMode::is_enabled(), "recurrent_scan: chunked_scan must run without autograd");
  const int64_t B = a.size(0), T = a.size(1), W = a.size(2);
  const int64_t L = std::min(chunk, T);  // a chunk longer than T would only add padding
  const int64_t nC = (T + L - 1) / L;
  const int64_t pad = nC * L - T;  // tail: a = 1, b = 0 after the last position, sliced off below

  // a is in (0, 1] by contract. An a that underflowed to 0 upstream (exp of a very negative log) is
  // read as the smallest normal number: its decay is then < 1e-38, i.e. 0 at working precision, and
  // the cumulative sums stay finite (log 0 = -inf would give -inf - -inf = NaN in the differences).
  const double tiny = a.scalar_type() == at::kDouble ? std::numeric_limits<double>::min()
                                                     : static_cast<double>(std::numeric_limits<float>::min());
  auto log_a = a.clamp_min(tiny).log();
  auto bv = b;
  if (pad > 0) {
    log_a = torch::constant_pad_nd(log_a, {0, 0, 0, pad});
    bv = torch::constant_pad_nd(bv, {0, 0, 0, pad});
  }
  // W stays innermost (contiguous): every op below is a coalesced elementwise op or a reduction over
  // a strided dim. (Time-last with a batched matvec was 2x slower on an H100 at L = 16.)
  const auto cum = log_a.reshape({B, nC, L, W}).cumsum(2);  // c_t, chunk-local, [B,nC,L,W]
  const auto bc = bv.reshape({B, nC, L, W});
  const auto upper = torch::ones({L, L}, cum.options().dtype(torch::kBool)).triu(1).unsqueeze(-1);
  auto decay = cum.unsqueeze(3) - cum.unsqueeze(2);  // c_t - c_s at [B,nC,t,s,W]
  decay.masked_fill_(upper, -std::numeric_limits<double>::infinity()).exp_().mul_(bc.unsqueeze(2));
  auto h = decay.sum(3);  // zero-entry-state scan of each chunk, [B,nC,L,W]
  decay.reset();

  if (nC > 1) {
    // Carry: state entering chunk c+1 = exp(c_{L-1} of chunk c) * (state entering c) + local end of c.
    // Sequential over the nC chunks: elementwise [B,W] ops, exact (products of decays, no prefix sums).
    const auto chunk_decay = cum.select(2, L - 1).exp();  // [B,nC,W]
    const auto local_end = h.select(2, L - 1);            // [B,nC,W]
    std::vector<torch::Tensor> carry{torch::zeros({B, W}, h.options())};
    carry.reserve(static_cast<size_t>(nC));
    for (int64_t c = 0; c + 1 < nC; ++c)
      carry.push_back(carry.back() * chunk_decay.select(1, c) + local_end.select(1, c));
    h.add_(cum.exp().mul_(torch::stack(carry, 1).unsqueeze(2)));
  }
  return h.view({B, nC * L, W}).narrow(1, 0, T).contiguous();
}

// The gradients by the adjoint recurrence instead of autograd through the segment sums. With
// lambda_t = dLoss/dh_t (total), lambda_t = g_t + a_{t+1} lambda_{t+1}: the same scan run backward in
// time, so it reuses chunked_scan on time-reversed inputs; then dLoss/db_t = lambda_t and
// dLoss/da_t = h_{t-1} lambda_t. Why not plain autograd: it reaches a through log a, so the gradient
// w.r.t. a comes out as (a sum of cancelling cumulative-sum terms) / a, whose absolute error grows
// like eps / a (fp32, a = 1e-10: off by orders of magnitude). Here nothing is divided and the
// backward keeps only a and h (not the B*T*W*L decay matrix of the forward).
class ChunkedScan : public torch::autograd::Function<ChunkedScan> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               int64_t chunk) {
    auto h = chunked_scan(a, b, chunk);
    ctx->save_for_backward({a, h});
    ctx->saved_data["chunk"] = chunk;
    return h;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_out) {
    // The backward below is not itself recorded (chunked_scan works in place), so no double backward.
    TORCH_CHECK(!torch::GradMode::is_enabled(), "recurrent_scan_chunked: double backward is not implemented");
    const auto saved = ctx->get_saved_variables();
    const auto& a = saved[0];
    const auto& h = saved[1];
    const int64_t T = a.size(1);
    const auto g = grad_out[0].to(h.scalar_type());
    // a_{t+1} at t (1 after the last position: lambda_T = 0 anyway), h_{t-1} at t (h_{-1} = 0).
    const auto a_next = torch::constant_pad_nd(a.narrow(1, 1, T - 1), {0, 0, 0, 1}, 1.0);
    const auto h_prev = torch::constant_pad_nd(h.narrow(1, 0, T - 1), {0, 0, 1, 0});
    const auto lambda = chunked_scan(a_next.flip(1), g.flip(1), ctx->saved_data["chunk"].toInt()).flip(1);
    return {h_prev * lambda, lambda, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recurrent_scan_chunked(const torch::Tensor& a, const torch::Tensor& b, int64_t chunk) {
  check_args(a, b);
  TORCH_CHECK(chunk >= 1, "recurrent_scan: chunk must be >= 1, got ", chunk);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&a, &b});
  if (a.size(1) == 0) return torch::zeros(a.sizes(), b.options().dtype(dt));
  // The casts stay outside the Function so that autograd casts the gradients back to a's and b's dtypes.
  return ChunkedScan::apply(a.to(dt), b.to(dt), chunk);
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(recurrent_scan_reference) {
  registry.recurrent_scan({.name = "reference",
                           .role = Role::reference,
                           .description = "RG-LRU linear recurrence, chunked, in LibTorch ops, fp32",
                           .unavailable_reason = &availability::always},
                          [](const torch::Tensor& a, const torch::Tensor& b) { return reference::recurrent_scan_chunked(a, b); });
}

}  // namespace ablate::kernels
