// model/mamba_block.cpp: block M, the Mamba-3 SISO mixer (docs/model.md "M"): one input projection to
// [z, x, B, C, dd_dt, dd_A, trap, theta]; in fp32 the per-head step Delta, decay A, trapezoid weight
// lambda, normalised B^/C^, and the scan coefficients log alpha = Delta A, beta = (1-lambda) Delta alpha,
// gamma = lambda Delta; the data-dependent angles Phi and the rotated, biased keys and queries
// k = Rot(Phi)(B^ + b_B), q = Rot(Phi)(C^ + c_C) come from the `ssm_rotary` seam; the recurrence and the
// gate y * silu(z) run in the `ssm_scan` seam; out = W_out (y * silu(z)).
// Tests: model_tests --gtest_filter='*Mamba*' (tests/model/blocks_test.cpp: vs a per-timestep loop in
// fp64, gradients by central differences, and the dt_bias initialisation range).
#include <cmath>

#include "kernels/join_last_dim.h"
#include "kernels/numerics.h"
#include "model/blocks.h"

namespace ablate::model {
namespace {

constexpr double kBcNormEps = 1e-5;  // RMSNorm_B / RMSNorm_C (docs/model.md)
constexpr double kMaxDecay = -1e-4;  // A_t = min(-softplus(dd_A), -1e-4)

}  // namespace

MambaBlock::MambaBlock(const ModelConfig& config, std::shared_ptr<const kernels::Dispatcher> dispatcher,
                       SeededInit& init)
    : Block('M', config, std::move(dispatcher)) {
  const auto& m = config.mamba;
  const int64_t d = config.d_model;
  d_inner = m.expand * d;
  head_dim = m.head_dim;
  heads = d_inner / head_dim;
  state = m.state;
  angles = m.state / 4;
  w_in = register_parameter("w_in", init.normal({2 * d_inner + 2 * state + 3 * heads + angles, d}));
  // dt log-uniform in [dt_min, dt_max], floored at dt_floor; dt_bias = softplus^-1(dt) = dt + log(1 - e^-dt).
  const auto dt = torch::exp(init.uniform({heads}, std::log(m.dt_min), std::log(m.dt_max))).clamp_min(m.dt_floor);
  dt_bias = register_parameter("dt_bias", dt + torch::log(-torch::expm1(-dt)));
  b_norm = register_parameter("b_norm", SeededInit::constant({state}, 1.0));
  c_norm = register_parameter("c_norm", SeededInit::constant({state}, 1.0));
  b_bias = register_parameter("b_bias", SeededInit::constant({heads, state}, 1.0));
  c_bias = register_parameter("c_bias", SeededInit::constant({heads, state}, 1.0));
  skip = register_parameter("D", SeededInit::constant({heads}, 1.0));
  w_out = register_parameter("w_out", init.normal({d, d_inner}));
}

BlockOutput MambaBlock::forward(const torch::Tensor& u) {
  const int64_t batch = u.size(0), T = u.size(1);
  // split_last_dim: its backward joins the parts' gradients in one pass (kernels/join_last_dim.h).
  const auto parts =
      kernels::split_last_dim(dispatcher_->dense_gemm(u, w_in), {d_inner, d_inner, state, state, heads, heads, heads, angles});
  const auto &z = parts[0], &x = parts[1], &b_raw = parts[2], &c_raw = parts[3], &dd_dt = parts[4], &dd_a = parts[5],
             &trap = parts[6], &theta = parts[7];

  torch::Tensor gated;  // y * silu(z), [B, T, d_inner]
  {
    kernels::NoAutocastScope fp32_arithmetic;
    const auto dt = kernels::compute_dtype(dt_bias);
    const auto delta = torch::softplus(dd_dt.to(dt) + dt_bias);               // [B,T,H]
    const auto decay = (-torch::softplus(dd_a.to(dt))).clamp_max(kMaxDecay);  // A_t, [B,T,H]
    const auto lambda = torch::sigmoid(trap.to(dt));                          // [B,T,H]
    // B^, C^: RMSNorm over N (shared by all heads, ngroups 1); the seam adds the per-head biases and
    // turns both by Phi_t = Phi_{t-1} + Delta_t pi tanh(theta_t) (Phi_0 = 0 the state before the first
    // token, an inclusive cumulative sum as in Mamba-3's angle_dt kernel) -> q, k [B,T,H,N].
    kernels::SsmRotaryInputs rotary;
    rotary.b = rms_norm(b_raw.to(dt), b_norm, kBcNormEps);
    rotary.c = rms_norm(c_raw.to(dt), c_norm, kBcNormEps);
    rotary.b_bias = b_bias;
    rotary.c_bias = c_bias;
    rotary.delta = delta;
    rotary.theta = theta.to(dt);
    // q, k in the activation dtype (bf16 under autocast): the scan rounds them to bf16 operands anyway,
    // and half the bytes cross memory between the two seams, forward and backward.
    rotary.qk_dtype = x.scalar_type();
    const auto turned = dispatcher_->ssm_rotary(rotary);
    const auto &q = turned.q, &k = turned.k;
    const auto log_alpha = delta * decay;
    const auto beta = (1 - lambda) * delta * torch::exp(log_alpha);
    const auto gamma = lambda * delta;
    // x and z go in their own dtype (bf16 under autocast): the seam reads them once and computes in
    // fp32, and applies the gate y * silu(z) itself.
    kernels::SsmScanInputs scan;
    scan.x = x.view({batch, T, heads, head_dim});
    scan.z = z.view({batch, T, heads, head_dim});
    scan.q = q;
    scan.k = k;
    scan.log_alpha = log_alpha;
    scan.beta = beta;
    scan.gamma = gamma;
    scan.D = skip.to(dt);
    scan.chunk = config_.mamba.chunk;
    gated = dispatcher_->ssm_scan(scan).y.reshape({batch, T, d_inner});
  }
  return {dispatcher_->dense_gemm(gated, w_out), {}, {}};
}

}  // namespace ablate::model
