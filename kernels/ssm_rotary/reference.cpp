// kernels/ssm_rotary/reference.cpp: the reference backend of seam `ssm_rotary`: Mamba-3's angles
// Phi = cumsum_t(delta * pi * tanh(theta)) and the per-head biased B and C turned by them (docs/model.md
// "M"), in LibTorch ops through autograd. Every intermediate is a [B,T,H,N] tensor in memory (the sum
// with the per-head bias, cos, sin, the two products per component, their stack); the fused backend
// (kernels/ssm_rotary/fused_cuda.cu) writes q and k in one pass instead. Contract: SsmRotaryFn in
// kernels/seams.h.
// Tests: kernels_tests --gtest_filter='*Parity*ssm_rotary*' (tests/kernels/parity_test.cpp), the model's
// M block against its per-timestep fp64 loop (tests/model/blocks_test.cpp).
// Benchmark: build/bench/kernels_bench --benchmark_filter=ssm_rotary.
#include "kernels/ssm_rotary/reference.h"

#include <numbers>
#include <sstream>

#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels::reference {
namespace {

// Turns the first 2S dims of v [B,T,H,N] in adjacent pairs by angles (cos/sin [B,T,H,S]); the
// remaining N - 2S dims pass through.
torch::Tensor rotate_leading_pairs(const torch::Tensor& v, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t rotated = 2 * cos.size(-1), n = v.size(-1);
  const auto turned = rotate_adjacent_pairs(v.narrow(-1, 0, rotated), cos, sin);
  return rotated == n ? turned : torch::cat({turned, v.narrow(-1, rotated, n - rotated)}, -1);
}

std::string sizes_of(const torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

SsmRotaryDims check_ssm_rotary_args(const SsmRotaryInputs& in) {
  TORCH_CHECK(in.b.defined() && in.b.dim() == 3, "ssm_rotary: b must be [B,T,N], got ", sizes_of(in.b));
  TORCH_CHECK(in.delta.defined() && in.delta.dim() == 3, "ssm_rotary: delta must be [B,T,H], got ", sizes_of(in.delta));
  TORCH_CHECK(in.theta.defined() && in.theta.dim() == 3, "ssm_rotary: theta must be [B,T,S], got ", sizes_of(in.theta));
  const SsmRotaryDims d{in.b.size(0), in.b.size(1), in.delta.size(2), in.b.size(2), in.theta.size(2)};
  TORCH_CHECK(in.c.defined() && in.c.sizes() == in.b.sizes(), "ssm_rotary: c must be [B,T,N] like b ", in.b.sizes(),
              ", got ", sizes_of(in.c));
  TORCH_CHECK(in.delta.size(0) == d.B && in.delta.size(1) == d.T, "ssm_rotary: delta must be [B,T,H] with B,T = ", d.B,
              ",", d.T, " of b, got ", in.delta.sizes());
  TORCH_CHECK(in.theta.size(0) == d.B && in.theta.size(1) == d.T && 2 * d.S <= d.N,
              "ssm_rotary: theta must be [B,T,S] with B,T = ", d.B, ",", d.T, " of b and 2S <= N = ", d.N, ", got ",
              in.theta.sizes());
  for (const auto* bias : {&in.b_bias, &in.c_bias})
    TORCH_CHECK(bias->defined() && bias->sizes() == at::IntArrayRef({d.H, d.N}), "ssm_rotary: b_bias and c_bias must be [H,N] = [",
                d.H, ",", d.N, "], got ", sizes_of(*bias));
  TORCH_CHECK(!in.phi0.defined() || in.phi0.sizes() == at::IntArrayRef({d.B, d.H, d.S}),
              "ssm_rotary: phi0 must be [B,H,S] = [", d.B, ",", d.H, ",", d.S, "], got ", sizes_of(in.phi0));
  TORCH_CHECK(!in.qk_dtype || *in.qk_dtype == torch::kFloat || *in.qk_dtype == torch::kBFloat16 ||
                  *in.qk_dtype == torch::kDouble,
              "ssm_rotary: qk_dtype must be fp32, bf16 or fp64 (or unset: the compute dtype), got ", *in.qk_dtype);
  return d;
}

torch::Tensor ssm_rotary_angle_steps(const SsmRotaryInputs& in, at::ScalarType dt) {
  // The step per head and angle, [B,T,H,S]: the same expression the M block used before this seam
  // existed, so the reference lane is unchanged.
  return in.delta.to(dt).unsqueeze(-1) * std::numbers::pi * torch::tanh(in.theta.to(dt)).unsqueeze(2);
}

torch::Tensor with_initial_angle(const SsmRotaryInputs& in, const torch::Tensor& phi) {
  return in.phi0.defined() ? phi + in.phi0.to(phi.scalar_type()).unsqueeze(1) : phi;
}

torch::Tensor ssm_rotary_angles(const SsmRotaryInputs& in, at::ScalarType dt) {
  // An inclusive sum over T (Mamba-3's angle_dt).
  return with_initial_angle(in, ssm_rotary_angle_steps(in, dt).cumsum(1));
}

torch::Tensor ssm_rotary_last_angle(const SsmRotaryInputs& in, const torch::Tensor& phi, const SsmRotaryDims& d) {
  if (d.T > 0) return phi.select(1, d.T - 1);
  return in.phi0.defined() ? in.phi0.to(phi.scalar_type()) : torch::zeros({d.B, d.H, d.S}, phi.options());
}

SsmRotaryOutputs ssm_rotary(const SsmRotaryInputs& in) {
  const auto d = check_ssm_rotary_args(in);
  NoAutocastScope no_autocast;  // defined in fp32/fp64, whatever autocast the caller runs under
  const auto dt = compute_dtype("ssm_rotary", {&in.b, &in.c, &in.b_bias, &in.c_bias, &in.delta, &in.theta, &in.phi0});
  const auto phi = ssm_rotary_angles(in, dt);
  const auto cos = phi.cos(), sin = phi.sin();
  // B^ + b_bias and C^ + c_bias per head -> [B,T,H,N], then turned.
  const auto k = rotate_leading_pairs(in.b.to(dt).unsqueeze(2) + in.b_bias.to(dt), cos, sin);
  const auto q = rotate_leading_pairs(in.c.to(dt).unsqueeze(2) + in.c_bias.to(dt), cos, sin);
  const auto out_dtype = in.qk_dtype.value_or(dt);  // rounded once, after the fp32 arithmetic
  return {.q = q.to(out_dtype), .k = k.to(out_dtype), .phi_last = ssm_rotary_last_angle(in, phi, d)};
}

}  // namespace ablate::kernels::reference

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(ssm_rotary_reference) {
  registry.ssm_rotary("reference", &reference::ssm_rotary);
}

}  // namespace ablate::kernels
