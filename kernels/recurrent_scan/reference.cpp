// kernels/recurrent_scan/reference.cpp: the reference backend of seam `recurrent_scan`, the RG-LRU
// (docs/model.md "R"), in LibTorch ops: the gates a_t = exp(-8 sigmoid(gate_a_t) softplus(-lambda)) and
// b_t = sqrt(1 - a_t^2) sigmoid(gate_x_t) u_t, then the linear recurrence h_t = a_t h_{t-1} + b_t
// (h_{-1} = h0 or 0, elementwise over W channels). Owns recurrent_scan_chunked (what the model runs,
// CPU and GPU, through autograd), recurrent_scan_stepwise (the recurrence one timestep at a time, the
// definition the chunked form and the fused CUDA backend are checked against), and the linear
// recurrence alone in both forms. Contract: RecurrentScanFn in kernels/seams.h.
// Test: kernels_tests --gtest_filter='RecurrentScan*' (tests/kernels/scans_test.cpp);
// time: kernels_bench --benchmark_filter=rglru (kernels/recurrent_scan/bench.cpp).
//
// Chunked form: inside a chunk of length L, h_t = exp(c_t) h_in + sum_{s<=t} exp(c_t - c_s) b_s with
// c_t the chunk-local cumulative sum of log a (so c is non-increasing and c_t - c_s <= 0 for s <= t).
// The (L x L) decay matrix is exp of those differences, masked to -inf above the diagonal before exp:
// we never exponentiate a large positive number (the tempting exp(c_t) * sum exp(-c_s) b_s would
// overflow fp32 after 13 steps of a = 1e-3). The state h_in (h0 for the first chunk) is carried across
// chunks in a sequential loop over the T/L chunks. Cost: the decay matrix is per channel, so the
// intra-chunk part holds L times the input in memory (B*T*W*L elements, transient: the backward below
// does not keep it); the chunk length trades that against T/L carry steps. Gradients: a custom
// autograd Function whose backward is the adjoint recurrence, run through the same chunked scan (see
// ChunkedScan); the gates in front of it are plain LibTorch ops that autograd differentiates.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/recurrent_scan/reference.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

void check_linear_args(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& h0) {
  TORCH_CHECK(a.dim() == 3, "recurrent_scan: a must be [B,T,W], got ", a.sizes());
  TORCH_CHECK(b.sizes() == a.sizes(), "recurrent_scan: b must match a ", a.sizes(), ", got ", b.sizes());
  TORCH_CHECK(!h0.defined() || h0.sizes() == at::IntArrayRef({a.size(0), a.size(2)}),
              "recurrent_scan: h0 must be [B,W] = [", a.size(0), ",", a.size(2), "], got ", h0.sizes());
}

// The gates of docs/model.md "R" in LibTorch ops (recorded by autograd), in dtype dt with autocast off:
// returns (a, b). sqrt(1 - a^2) is sqrt(-expm1(2 log a)): exact near a = 1, where 1 - a*a cancels.
std::pair<torch::Tensor, torch::Tensor> rglru_gates(const RecurrentScanInputs& in, at::ScalarType dt) {
  NoAutocastScope fp32_arithmetic;
  const auto log_a =
      -kRecurrentDecayScale * torch::sigmoid(in.gate_a.to(dt)) * torch::softplus(-in.lambda.to(dt));
  const auto b = torch::sqrt(-torch::expm1(2 * log_a)) * (torch::sigmoid(in.gate_x.to(dt)) * in.u.to(dt));
  return {torch::exp(log_a), b};
}

}  // namespace

void check_recurrent_scan_args(const RecurrentScanInputs& in) {
  TORCH_CHECK(in.gate_a.defined() && in.gate_x.defined() && in.u.defined() && in.lambda.defined(),
              "recurrent_scan: gate_a, gate_x, u and lambda are required");
  TORCH_CHECK(in.gate_a.dim() == 3, "recurrent_scan: gate_a must be [B,T,W], got ", in.gate_a.sizes());
  TORCH_CHECK(in.gate_x.sizes() == in.gate_a.sizes(), "recurrent_scan: gate_x must match gate_a ",
              in.gate_a.sizes(), ", got ", in.gate_x.sizes());
  TORCH_CHECK(in.u.sizes() == in.gate_a.sizes(), "recurrent_scan: u must match gate_a ", in.gate_a.sizes(),
              ", got ", in.u.sizes());
  const int64_t B = in.gate_a.size(0), W = in.gate_a.size(2);
  TORCH_CHECK(in.lambda.dim() == 1 && in.lambda.size(0) == W, "recurrent_scan: lambda must be [W] = [", W,
              "], got ", in.lambda.sizes());
  TORCH_CHECK(!in.h0.defined() || in.h0.sizes() == at::IntArrayRef({B, W}), "recurrent_scan: h0 must be [B,W] = [",
              B, ",", W, "], got ", in.h0.sizes());
  for (const auto* t : {&in.gate_a, &in.gate_x, &in.u, &in.lambda, &in.h0})
    TORCH_CHECK(!t->defined() || t->is_floating_point(), "recurrent_scan: inputs must be floating point, got ",
                t->scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> linear_recurrence_stepwise(const torch::Tensor& a, const torch::Tensor& b,
                                                                   const torch::Tensor& h0) {
  check_linear_args(a, b, h0);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&a, &b, &h0});
  const auto as = a.to(dt), bs = b.to(dt);
  const int64_t B = a.size(0), T = a.size(1), W = a.size(2);
  auto h = h0.defined() ? h0.to(dt) : torch::zeros({B, W}, bs.options());
  if (T == 0) return {torch::zeros_like(bs), h};
  std::vector<torch::Tensor> hs;
  hs.reserve(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    h = as.select(1, t) * h + bs.select(1, t);
    hs.push_back(h);
  }
  return {torch::stack(hs, 1), h};
}

RecurrentScanOutputs recurrent_scan_stepwise(const RecurrentScanInputs& in) {
  check_recurrent_scan_args(in);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&in.gate_a, &in.gate_x, &in.u, &in.lambda, &in.h0});
  const auto [a, b] = rglru_gates(in, dt);
  auto [h, h_last] = linear_recurrence_stepwise(a, b, in.h0.defined() ? in.h0.to(dt) : torch::Tensor());
  return {.h = std::move(h), .h_last = std::move(h_last)};
}

namespace {

// The chunked scan itself; a, b [B,T,W] and the entry state h0 [B,W] already in the compute dtype. Runs
// only without autograd recording (inside ChunkedScan's forward and backward), which is what lets it
// work in place: the (B, T/L, L, L, W) decay tensor exists once, not four times.
torch::Tensor chunked_scan(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& h0, int64_t chunk) {
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

  // Carry: state entering chunk c+1 = exp(c_{L-1} of chunk c) * (state entering c) + local end of c,
  // starting from h0. Sequential over the nC chunks: elementwise [B,W] ops, exact (products of decays,
  // no prefix sums).
  const auto chunk_decay = cum.select(2, L - 1).exp();  // [B,nC,W]
  const auto local_end = h.select(2, L - 1);            // [B,nC,W]
  std::vector<torch::Tensor> carry{h0};
  carry.reserve(static_cast<size_t>(nC));
  for (int64_t c = 0; c + 1 < nC; ++c)
    carry.push_back(carry.back() * chunk_decay.select(1, c) + local_end.select(1, c));
  h.add_(cum.exp().mul_(torch::stack(carry, 1).unsqueeze(2)));
  return h.view({B, nC * L, W}).narrow(1, 0, T).contiguous();
}

// The gradients by the adjoint recurrence instead of autograd through the segment sums. With
// lambda_t = dLoss/dh_t (total), lambda_t = g_t + a_{t+1} lambda_{t+1}: the same scan run backward in
// time, so it reuses chunked_scan on time-reversed inputs; then dLoss/db_t = lambda_t,
// dLoss/da_t = h_{t-1} lambda_t (h_{-1} = h0) and dLoss/dh0 = a_0 lambda_0. Why not plain autograd: it
// reaches a through log a, so the gradient w.r.t. a comes out as (a sum of cancelling cumulative-sum
// terms) / a, whose absolute error grows like eps / a (fp32, a = 1e-10: off by orders of magnitude).
// Here nothing is divided and the backward keeps only a, h and h0 (not the B*T*W*L decay matrix).
class ChunkedScan : public torch::autograd::Function<ChunkedScan> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& h0, int64_t chunk) {
    auto h = chunked_scan(a, b, h0, chunk);
    ctx->save_for_backward({a, h, h0});
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
    const auto& h0 = saved[2];
    const int64_t T = a.size(1);
    const auto g = grad_out[0].defined() ? grad_out[0].to(h.scalar_type()) : torch::zeros_like(h);
    // a_{t+1} at t (1 after the last position: lambda_T = 0 anyway), h_{t-1} at t (h_{-1} = h0).
    const auto a_next = torch::constant_pad_nd(a.narrow(1, 1, T - 1), {0, 0, 0, 1}, 1.0);
    const auto h_prev = torch::cat({h0.unsqueeze(1), h.narrow(1, 0, T - 1)}, 1);
    const auto lambda =
        chunked_scan(a_next.flip(1), g.flip(1), torch::zeros_like(h0), ctx->saved_data["chunk"].toInt()).flip(1);
    return {h_prev * lambda, lambda, a.select(1, 0) * lambda.select(1, 0), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> linear_recurrence_chunked(const torch::Tensor& a, const torch::Tensor& b,
                                                                  const torch::Tensor& h0, int64_t chunk) {
  check_linear_args(a, b, h0);
  TORCH_CHECK(chunk >= 1, "recurrent_scan: chunk must be >= 1, got ", chunk);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&a, &b, &h0});
  const int64_t B = a.size(0), T = a.size(1), W = a.size(2);
  // The casts stay outside the Function so that autograd casts the gradients back to the inputs' dtypes.
  const auto h_init = h0.defined() ? h0.to(dt) : torch::zeros({B, W}, b.options().dtype(dt));
  if (T == 0) return {torch::zeros(a.sizes(), b.options().dtype(dt)), h_init.clone()};
  auto h = ChunkedScan::apply(a.to(dt), b.to(dt), h_init, chunk);
  auto h_last = h.select(1, T - 1);
  return {std::move(h), std::move(h_last)};
}

RecurrentScanOutputs recurrent_scan_chunked(const RecurrentScanInputs& in, int64_t chunk) {
  check_recurrent_scan_args(in);
  const auto dt = kernels::compute_dtype("recurrent_scan", {&in.gate_a, &in.gate_x, &in.u, &in.lambda, &in.h0});
  const auto [a, b] = rglru_gates(in, dt);
  auto [h, h_last] = linear_recurrence_chunked(a, b, in.h0.defined() ? in.h0.to(dt) : torch::Tensor(), chunk);
  return {.h = std::move(h), .h_last = std::move(h_last)};
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(recurrent_scan_reference) {
  registry.recurrent_scan("reference", [](const RecurrentScanInputs& in) { return reference::recurrent_scan_chunked(in); });
}

}  // namespace ablate::kernels
