// tests/kernels/scans_test.cpp: parity tests of the reference scans (kernels/ssm_scan/reference.h, kernels/recurrent_scan/reference.h):
// the chunked Mamba-3 SISO scan and the chunked RG-LRU recurrence (the linear recurrence alone and the
// seam with its gates, from an initial state or not) against their per-timestep definitions, forward
// and backward, fp64 and fp32 (CPU, and CUDA when present), plus hand-computed values, a
// finite-difference check, extreme decays and argument checks; and the fused CUDA RG-LRU
// (RecurrentScanFused*, GPU only) beyond its parity rows.
// Run: kernels_tests --gtest_filter='SsmScan*:RecurrentScan*:Scans*'. Each comparison prints the error it
// observed as "[ measured ] ..." so that tolerances can be revisited against real numbers.
//
// Errors are norm-wise: max |got - want| / max |want| over the whole tensor.
// Inputs are drawn fresh from seeded generators in fp64 with the distributions the model produces
// (docs/model.md "M" and "R"), spread wide enough that alpha and a reach both ~1 and ~0.
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "kernels/recurrent_scan/reference.h"
#include "kernels/ssm_scan/reference.h"
#if defined(ABLATE_HAVE_CUDA)
#include "kernels/recurrent_scan/fused_cuda.h"
#endif

// CUDA graph capture needs the CUDA runtime headers, present wherever LibTorch was built with CUDA.
#if __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define ABLATE_SCANS_TEST_CUDA_GRAPHS 1
#endif

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace ref = ablate::kernels::reference;
namespace kernels = ablate::kernels;
using ablate::kernels::RecurrentScanInputs;
using torch::Tensor;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

double rel_err(const Tensor& got, const Tensor& want) {
  const auto g = got.detach().to(torch::kCPU, torch::kDouble);
  const auto w = want.detach().to(torch::kCPU, torch::kDouble);
  EXPECT_EQ(g.sizes(), w.sizes());
  const double scale = w.abs().max().item<double>();
  return (g - w).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

bool all_finite(const Tensor& t) { return torch::isfinite(t.detach()).all().item<bool>(); }

void note(const std::string& what, double err) { std::printf("[ measured ] %s: %.3e\n", what.c_str(), err); }

std::vector<Tensor> cast(const std::vector<Tensor>& v, torch::ScalarType dt, torch::Device dev = torch::kCPU) {
  std::vector<Tensor> out;
  for (const auto& t : v) out.push_back(t.defined() ? t.to(dev, dt) : Tensor());
  return out;
}

// Gradients of sum(f(inputs) * g) with respect to every input; undefined inputs (absent optional
// arguments) get an undefined gradient.
std::vector<Tensor> grads(const Fn& f, const std::vector<Tensor>& inputs, const Tensor& g) {
  std::vector<Tensor> leaves, wrt;
  for (const auto& t : inputs) {
    leaves.push_back(t.defined() ? t.detach().clone().requires_grad_(true) : Tensor());
    if (t.defined()) wrt.push_back(leaves.back());
  }
  const auto y = f(leaves);
  const auto d = torch::autograd::grad({(y * g.to(y.device(), y.scalar_type())).sum()}, wrt);
  std::vector<Tensor> out;
  size_t at = 0;
  for (const auto& t : leaves) out.push_back(t.defined() ? d[at++] : Tensor());
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Mamba-3 SISO scan.

// Which optional arguments of SsmScanInputs a case passes.
struct SsmOptions {
  bool z = false, h0 = false, prev = false;
};
const SsmOptions kAllOptions{true, true, true};

// {x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}, fp64 on the CPU (the last four undefined
// unless `opt` asks for them). Delta = softplus(3 z - 3) spans ~1e-4..~6 and A = min(-softplus(2 z),
// -1e-4) spans -1e-4..~-6, so alpha = exp(Delta A) runs from 1 - 1e-8 down to ~1e-15; lambda =
// sigmoid(z) in (0, 1); beta and gamma as docs/model.md builds them. h0 of the size a state reaches (~1).
std::vector<Tensor> ssm_inputs(int64_t B, int64_t T, int64_t H, int64_t P, int64_t N, uint64_t seed,
                               SsmOptions opt = {}) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  auto rn = [&](at::IntArrayRef s) { return torch::randn(s, gen, opts); };
  auto x = rn({B, T, H, P}), q = rn({B, T, H, N}), k = rn({B, T, H, N});
  const auto delta = torch::softplus(3 * rn({B, T, H}) - 3);
  const auto A = (-torch::softplus(2 * rn({B, T, H}))).clamp_max(-1e-4);
  const auto lambda = torch::sigmoid(rn({B, T, H}));
  const auto log_alpha = delta * A;
  const auto beta = (1 - lambda) * delta * log_alpha.exp();
  const auto gamma = lambda * delta;
  const auto D = rn({H});
  // Drawn even when unused, so that a case's other inputs do not depend on its options.
  const auto z = rn({B, T, H, P}), h0 = rn({B, H, P, N}), x_prev = rn({B, H, P}), k_prev = rn({B, H, N});
  return {x, q, k, log_alpha, beta, gamma, D, opt.z ? z : Tensor(), opt.h0 ? h0 : Tensor(),
          opt.prev ? x_prev : Tensor(), opt.prev ? k_prev : Tensor()};
}

kernels::SsmScanInputs as_scan_inputs(const std::vector<Tensor>& v, int64_t chunk) {
  kernels::SsmScanInputs in;
  in.x = v[0], in.q = v[1], in.k = v[2], in.log_alpha = v[3], in.beta = v[4], in.gamma = v[5], in.D = v[6];
  in.z = v[7], in.h0 = v[8], in.x_prev = v[9], in.k_prev = v[10];
  in.chunk = chunk;
  return in;
}

// Both outputs as one flat vector [y ; h_last], so that every check (and every gradient) covers both.
Tensor flat(const kernels::SsmScanOutputs& o) { return torch::cat({o.y.flatten(), o.h_last.flatten()}); }

Fn ssm_chunked(int64_t L) {
  return [L](const std::vector<Tensor>& v) { return flat(ref::ssm_scan_chunked(as_scan_inputs(v, L))); };
}
Tensor ssm_stepwise(const std::vector<Tensor>& v) { return flat(ref::ssm_scan_stepwise(as_scan_inputs(v, 1))); }

// A random cotangent for flat() of a case's outputs.
Tensor ssm_cotangent(int64_t B, int64_t T, int64_t H, int64_t P, int64_t N, uint64_t seed) {
  return torch::randn({B * T * H * P + B * H * P * N}, at::detail::createCPUGenerator(seed), torch::kDouble);
}

struct SsmShape {
  int64_t B, T, H, P, N, L;
  SsmOptions opt = {};
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " P" + std::to_string(P) +
           " N" + std::to_string(N) + " L" + std::to_string(L) + (opt.z ? " z" : "") + (opt.h0 ? " h0" : "") +
           (opt.prev ? " prev" : "");
  }
};

// T not a multiple of L, T < L, T = 1, L = 1, T = L, several full chunks plus a tail at the default L;
// each optional argument alone and all together.
const std::vector<SsmShape> kSsmShapes = {
    {2, 37, 3, 5, 8, 8},
    {2, 5, 3, 5, 8, 16},
    {2, 1, 3, 5, 8, 4},
    {2, 13, 3, 5, 8, 1},
    {1, 16, 2, 4, 6, 16},
    {2, 200, 3, 5, 8, 64},
    {1, 130, 2, 3, 4, 7},
    {2, 37, 3, 5, 8, 8, {true, false, false}},
    {2, 37, 3, 5, 8, 8, {false, true, false}},
    {2, 37, 3, 5, 8, 8, {false, false, true}},
    {2, 70, 3, 5, 8, 16, kAllOptions},
    {2, 1, 3, 5, 8, 4, kAllOptions},
};

// fp64 rounding is ~1e-16 per operation; 1e-10 leaves room for ~T*L-term sums and still catches any
// algebraic slip (a wrong index or a missing term shows up at 1e-3 or worse).
constexpr double kFp64Tol = 1e-10;

// fp32 chunked against fp64 stepwise on the same (fp32-rounded) inputs. Each output is a sum of up
// to L intra-chunk terms (products of 3-4 factors) plus a state carried through T/L chunk updates, so
// with fp32's 6e-8 unit roundoff the error grows with the number of accumulated terms (~100 here:
// ~6e-6 at worst, ~1e-6 typically). On top, every decay is exp(c_t - c_s) of chunk-local cumulative
// sums: its relative error is ~6e-8 * |c_s|, and |c_s| reaches a few hundred when a chunk holds
// decays near 0 (a = 1e-3: |c| ~ 440). Observed maxima (printed): ~1e-6 (SSM), ~8e-6 (RG-LRU with
// a mixing 1e-3 and 1-1e-4). Gradients sum over T outputs and get 10x this.
constexpr double kFp32Tol = 3e-5;

TEST(SsmScan, ChunkedMatchesStepwiseFp64) {
  uint64_t seed = 100;
  for (const auto& s : kSsmShapes) {
    const auto in = ssm_inputs(s.B, s.T, s.H, s.P, s.N, seed++, s.opt);
    const auto want = ref::ssm_scan_stepwise(as_scan_inputs(in, 1));
    const auto got = ref::ssm_scan_chunked(as_scan_inputs(in, s.L));
    ASSERT_EQ(got.y.sizes(), (std::vector<int64_t>{s.B, s.T, s.H, s.P})) << s.name();
    ASSERT_EQ(got.h_last.sizes(), (std::vector<int64_t>{s.B, s.H, s.P, s.N})) << s.name();
    EXPECT_EQ(got.y.scalar_type(), torch::kDouble);
    const double err_y = rel_err(got.y, want.y), err_h = rel_err(got.h_last, want.h_last);
    note("ssm fp64 chunked vs stepwise y " + s.name(), err_y);
    note("ssm fp64 chunked vs stepwise h_last " + s.name(), err_h);
    EXPECT_LT(err_y, kFp64Tol) << s.name();
    EXPECT_LT(err_h, kFp64Tol) << s.name();
  }
}

// Independent of both implementations: T = 2, P = N = 1, the recurrence evaluated by hand.
// beta_0 is set non-zero and must not contribute without x_prev / k_prev; with them (and h0, z) it does.
TEST(SsmScan, HandComputedT2) {
  const double x0 = 0.7, x1 = -1.3, k0 = 0.9, k1 = 0.4, q0 = -0.6, q1 = 1.1;
  const double la0 = -0.2, la1 = -0.5, b0 = 0.35, b1 = 0.25, g0 = 0.8, g1 = 0.6, D = 0.3;
  const double hinit = -0.45, xp = 1.7, kp = -0.8, z0 = 0.9, z1 = -2.1;
  auto t4 = [](double a, double b) { return torch::tensor({a, b}, torch::kDouble).view({1, 2, 1, 1}); };
  auto t3 = [](double a, double b) { return torch::tensor({a, b}, torch::kDouble).view({1, 2, 1}); };
  auto one = [](double v, at::IntArrayRef shape) { return torch::full(shape, v, torch::kDouble); };
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  for (const bool continued : {false, true}) {
    // continued: h_{-1} = hinit, beta_0 x_prev k_prev enters h_0, and the output is gated by silu(z).
    const double h0 = (continued ? std::exp(la0) * hinit + b0 * xp * kp : 0.0) + g0 * x0 * k0;
    const double y0 = (h0 * q0 + D * x0) * (continued ? silu(z0) : 1.0);
    const double h1 = std::exp(la1) * h0 + b1 * x0 * k0 + g1 * x1 * k1;
    const double y1 = (h1 * q1 + D * x1) * (continued ? silu(z1) : 1.0);
    std::vector<Tensor> in = {t4(x0, x1), t4(q0, q1), t4(k0, k1), t3(la0, la1), t3(b0, b1), t3(g0, g1),
                              torch::tensor({D}, torch::kDouble), Tensor(), Tensor(), Tensor(), Tensor()};
    if (continued) {
      in[7] = t4(z0, z1);
      in[8] = one(hinit, {1, 1, 1, 1});
      in[9] = one(xp, {1, 1, 1});
      in[10] = one(kp, {1, 1, 1});
    }
    const auto want = torch::tensor({y0, y1, h1}, torch::kDouble);
    const std::string what = continued ? " continued, gated" : "";
    EXPECT_LT((ssm_stepwise(in) - want).abs().max().item<double>(), 1e-15) << what;
    for (int64_t L : {1, 2, 64}) {
      const double err = (ssm_chunked(L)(in) - want).abs().max().item<double>();
      note("ssm hand check T=2 L=" + std::to_string(L) + what + " (abs)", err);
      EXPECT_LT(err, 1e-15) << "L=" << L << what;
    }
  }
}

// A sequence cut in two and continued from (h_last, x_prev = x_{m-1}, k_prev = k_{m-1}) gives the
// outputs and final state of one scan over the whole sequence: the contract decode and long-sequence
// chunking rely on. Cuts inside a chunk, at a chunk boundary, and after one token.
TEST(SsmScan, ContinuationFromHLastMatchesOneScan) {
  const int64_t B = 2, T = 45, H = 3, P = 5, N = 8, L = 8;
  const auto all = ssm_inputs(B, T, H, P, N, 150, {true, false, false});
  const auto whole = ref::ssm_scan_chunked(as_scan_inputs(all, L));
  for (const int64_t m : {int64_t{1}, int64_t{16}, int64_t{21}}) {
    auto first = all, second = all;
    for (int i : {0, 1, 2, 3, 4, 5, 7}) {
      const int64_t dim = 1;
      first[i] = all[i].narrow(dim, 0, m);
      second[i] = all[i].narrow(dim, m, T - m);
    }
    const auto a = ref::ssm_scan_chunked(as_scan_inputs(first, L));
    second[8] = a.h_last;
    second[9] = all[0].select(1, m - 1);
    second[10] = all[2].select(1, m - 1);
    for (const bool stepwise : {false, true}) {
      const auto b = stepwise ? ref::ssm_scan_stepwise(as_scan_inputs(second, 1))
                              : ref::ssm_scan_chunked(as_scan_inputs(second, L));
      const double err = std::max({rel_err(torch::cat({a.y, b.y}, 1), whole.y), rel_err(b.h_last, whole.h_last)});
      note("ssm continuation at m=" + std::to_string(m) + (stepwise ? " (stepwise)" : " (chunked)"), err);
      EXPECT_LT(err, kFp64Tol) << "m=" << m << (stepwise ? " stepwise" : " chunked");
    }
  }
}

// T = 0: no output rows, and the final state is h0 (zeros without it).
TEST(SsmScan, EmptySequenceReturnsH0) {
  auto in = ssm_inputs(2, 0, 3, 4, 6, 160, kAllOptions);
  for (const auto& o : {ref::ssm_scan_chunked(as_scan_inputs(in, 4)), ref::ssm_scan_stepwise(as_scan_inputs(in, 4))}) {
    EXPECT_EQ(o.y.sizes(), (std::vector<int64_t>{2, 0, 3, 4}));
    EXPECT_TRUE(torch::equal(o.h_last, in[8]));
  }
  in[8] = Tensor();
  EXPECT_TRUE(torch::equal(ref::ssm_scan_chunked(as_scan_inputs(in, 4)).h_last, torch::zeros({2, 3, 4, 6}, torch::kDouble)));
}

void ssm_fp32_check(torch::Device dev) {
  uint64_t seed = 200;
  for (const auto& s : {SsmShape{2, 37, 3, 5, 8, 8}, SsmShape{2, 200, 3, 5, 8, 64}, SsmShape{2, 300, 3, 16, 16, 16},
                        SsmShape{2, 100, 3, 16, 16, 16, kAllOptions}}) {
    const auto in32 = cast(ssm_inputs(s.B, s.T, s.H, s.P, s.N, seed++, s.opt), torch::kFloat, dev);
    const auto in64 = cast(in32, torch::kDouble);  // the same rounded values, on the CPU
    const auto got = ssm_chunked(s.L)(in32);
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_EQ(got.device(), dev);
    const auto want = ssm_stepwise(in64);
    const double err = rel_err(got, want);
    note("ssm fp32 chunked (" + dev.str() + ") vs fp64 stepwise " + s.name(), err);
    EXPECT_LT(err, kFp32Tol) << s.name();

    // Backward in fp32 against fp64 stepwise (see kFp32Tol for the 10x).
    const auto g = ssm_cotangent(s.B, s.T, s.H, s.P, s.N, seed++);
    const auto d32 = grads(ssm_chunked(s.L), in32, g.to(dev, torch::kFloat));
    const auto d64 = grads(ssm_stepwise, in64, g);
    for (size_t i = 0; i < d32.size(); ++i) {
      if (!d64[i].defined()) continue;
      const double e = rel_err(d32[i], d64[i]);
      note("ssm fp32 grad[" + std::to_string(i) + "] (" + dev.str() + ") " + s.name(), e);
      EXPECT_LT(e, 10 * kFp32Tol) << "input " << i << " " << s.name();
    }
  }
}

TEST(SsmScan, Fp32ChunkedMatchesFp64StepwiseCpu) { ssm_fp32_check(torch::kCPU); }

TEST(SsmScan, Fp32ChunkedMatchesFp64StepwiseCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  ssm_fp32_check(torch::Device(torch::kCUDA, 0));
}

TEST(SsmScan, GradientsChunkedMatchStepwiseFp64) {
  uint64_t seed = 300;
  for (const auto& s : {SsmShape{2, 37, 3, 5, 8, 8}, SsmShape{2, 13, 3, 5, 8, 1}, SsmShape{2, 5, 3, 5, 8, 16},
                        SsmShape{1, 100, 2, 3, 4, 64}, SsmShape{2, 37, 3, 5, 8, 8, kAllOptions},
                        SsmShape{2, 1, 2, 3, 4, 8, kAllOptions}}) {
    const auto in = ssm_inputs(s.B, s.T, s.H, s.P, s.N, seed++, s.opt);
    const auto g = ssm_cotangent(s.B, s.T, s.H, s.P, s.N, seed++);
    const auto got = grads(ssm_chunked(s.L), in, g);
    const auto want = grads(ssm_stepwise, in, g);
    const char* names[] = {"x", "q", "k", "log_alpha", "beta", "gamma", "D", "z", "h0", "x_prev", "k_prev"};
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].defined(), in[i].defined()) << names[i];
      if (!got[i].defined()) continue;
      const double err = rel_err(got[i], want[i]);
      note(std::string("ssm fp64 grad ") + names[i] + " " + s.name(), err);
      EXPECT_LT(err, kFp64Tol) << names[i] << " " << s.name();
    }
  }
}

// Central differences of sum(y * g) in fp64 against the chunked form's autograd gradients, every
// element of every input. Step 1e-6: truncation error ~1e-12, rounding ~1e-16 * |f| / 1e-6 ~ 1e-9.
void finite_difference_check(const Fn& f, const std::vector<Tensor>& in, const Tensor& g, const std::string& what) {
  const auto analytic = grads(f, in, g);
  const double h = 1e-6;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) continue;
    auto numeric = torch::zeros_like(in[i]);
    auto flat_numeric = numeric.view(-1);
    for (int64_t j = 0; j < in[i].numel(); ++j) {
      auto plus = in, minus = in;
      plus[i] = in[i].clone();
      minus[i] = in[i].clone();
      plus[i].view(-1)[j] += h;
      minus[i].view(-1)[j] -= h;
      flat_numeric[j] = ((f(plus) * g).sum() - (f(minus) * g).sum()) / (2 * h);
    }
    const double err = rel_err(analytic[i], numeric);
    note(what + " finite differences, input " + std::to_string(i), err);
    EXPECT_LT(err, 1e-7) << what << " input " << i;
  }
}

TEST(SsmScan, FiniteDifferencesChunkedFp64) {
  const auto in = ssm_inputs(1, 7, 2, 2, 3, 400, kAllOptions);
  finite_difference_check(ssm_chunked(3), in, ssm_cotangent(1, 7, 2, 2, 3, 401), "ssm L=3 T=7 z h0 prev");
}

// alpha that underflows in fp32 (Delta*A = -150: exp gives 0, so beta = (1-lambda) Delta alpha = 0 too).
// A form that divides beta by alpha would produce 0/0 here; ours must stay finite and accurate.
TEST(SsmScan, Fp32SurvivesVanishingAlpha) {
  auto in = ssm_inputs(2, 50, 3, 5, 8, 500, kAllOptions);
  auto la = in[3].clone();
  la.select(1, 10).fill_(-150.0);  // a hard reset inside the first chunk
  la.select(1, 31).fill_(-150.0);  // and one at the boundary-adjacent position of a later chunk
  in[3] = la;
  in[4] = in[4].clone();
  in[4].select(1, 10).zero_();  // what the block computes in fp32: (1-lambda) Delta exp(-150) = 0
  in[4].select(1, 31).zero_();
  const auto in32 = cast(in, torch::kFloat);
  const auto got = ssm_chunked(16)(in32);
  ASSERT_TRUE(all_finite(got));
  const double err = rel_err(got, ssm_stepwise(cast(in32, torch::kDouble)));
  note("ssm fp32 with alpha = exp(-150)", err);
  EXPECT_LT(err, kFp32Tol);
  const auto g = ssm_cotangent(2, 50, 3, 5, 8, 501).to(torch::kFloat);
  for (const auto& d : grads(ssm_chunked(16), in32, g))
    if (d.defined()) {
      EXPECT_TRUE(all_finite(d));
    }
}

// Under bf16 autocast (as the model runs) the scan must still compute in fp32: compare with the same
// call outside autocast. A bf16 matmul inside would be off by ~1e-2.
void autocast_check(torch::Device dev) {
  const auto in = cast(ssm_inputs(2, 70, 3, 8, 16, 600, kAllOptions), torch::kFloat, dev);
  const auto plain = ssm_chunked(16)(in);
  const auto dev_type = dev.type();
  const bool was = at::autocast::is_autocast_enabled(dev_type);
  const auto was_dtype = at::autocast::get_autocast_dtype(dev_type);
  at::autocast::set_autocast_enabled(dev_type, true);
  at::autocast::set_autocast_dtype(dev_type, at::kBFloat16);
  // Proof that autocast is live in this scope, so the comparison below can fail.
  const auto probe = torch::matmul(in[0].select(1, 0), in[0].select(1, 0).transpose(-1, -2)).scalar_type();
  const auto under = ssm_chunked(16)(in);
  at::autocast::set_autocast_enabled(dev_type, was);
  at::autocast::set_autocast_dtype(dev_type, was_dtype);
  at::autocast::clear_cache();
  EXPECT_EQ(probe, at::kBFloat16);
  EXPECT_EQ(under.scalar_type(), torch::kFloat);
  const double err = rel_err(under, plain);
  note("ssm under bf16 autocast vs without (" + dev.str() + ")", err);
  EXPECT_LT(err, 1e-6);
}

TEST(SsmScan, AutocastKeepsFp32Cpu) { autocast_check(torch::kCPU); }

TEST(SsmScan, AutocastKeepsFp32Cuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  autocast_check(torch::Device(torch::kCUDA, 0));
}

// bf16 x/q/k/z (what a bf16 projection hands over) are promoted and computed in fp32, y comes back in
// x's dtype (the fp32 result rounded once), h_last in fp32, and non-contiguous views give the same
// result as contiguous tensors.
TEST(SsmScan, DtypesAndLayouts) {
  auto in = cast(ssm_inputs(2, 21, 3, 4, 6, 700, kAllOptions), torch::kFloat);
  for (int i : {0, 1, 2, 7}) in[i] = in[i].to(torch::kBFloat16);
  const auto out = ref::ssm_scan_chunked(as_scan_inputs(in, 8));
  EXPECT_EQ(out.y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(out.h_last.scalar_type(), torch::kFloat);
  auto up = in;
  for (int i : {0, 1, 2, 7}) up[i] = in[i].to(torch::kFloat);
  const auto exact = ref::ssm_scan_chunked(as_scan_inputs(up, 8));
  EXPECT_EQ(exact.y.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(out.y, exact.y.to(torch::kBFloat16)));
  EXPECT_EQ(rel_err(out.h_last, exact.h_last), 0.0);
  // x as a [B,H,T,P] buffer seen through a transpose, q through a slice of a wider buffer.
  auto strided = up;
  strided[0] = up[0].transpose(1, 2).contiguous().transpose(1, 2);
  strided[1] = torch::cat({up[1], up[1]}, -1).narrow(-1, 0, up[1].size(-1));
  ASSERT_FALSE(strided[0].is_contiguous());
  ASSERT_FALSE(strided[1].is_contiguous());
  EXPECT_EQ(rel_err(ssm_chunked(8)(strided), ssm_chunked(8)(up)), 0.0);
}

TEST(SsmScan, RejectsBadArguments) {
  const auto in = ssm_inputs(1, 4, 2, 3, 4, 800, kAllOptions);
  auto bad = [&](int i, const Tensor& t) {
    auto v = in;
    v[i] = t;
    return v;
  };
  EXPECT_THROW(ssm_chunked(0)(in), c10::Error);
  EXPECT_THROW(ssm_chunked(4)(bad(1, in[1].narrow(3, 0, 3))), c10::Error);             // k and q differ in N
  EXPECT_THROW(ssm_chunked(4)(bad(3, in[3].narrow(1, 0, 3))), c10::Error);             // log_alpha shorter in T
  EXPECT_THROW(ssm_chunked(4)(bad(6, torch::ones({3}, torch::kDouble))), c10::Error);  // D not [H]
  EXPECT_THROW(ssm_stepwise(bad(0, in[0].select(0, 0))), c10::Error);                  // x not 4-D
  EXPECT_THROW(ssm_chunked(4)(bad(7, in[7].narrow(3, 0, 2))), c10::Error);             // z not like x
  EXPECT_THROW(ssm_chunked(4)(bad(8, in[8].narrow(3, 0, 2))), c10::Error);             // h0 not [B,H,P,N]
  EXPECT_THROW(ssm_chunked(4)(bad(10, Tensor())), c10::Error);                         // x_prev without k_prev
  EXPECT_THROW(ssm_stepwise(bad(9, in[9].narrow(2, 0, 1))), c10::Error);               // x_prev not [B,H,P]
}

// A backend of the registry (what the parity driver runs), as an Fn over the same inputs.
Fn ssm_backend(const std::string& name, int64_t L) {
  return [name, L](const std::vector<Tensor>& v) {
    return flat(kernels::implementations().ssm_scan.at(name)(as_scan_inputs(v, L)));
  };
}

// The fused backend refuses what it does not support with an error that says so, never a wrong answer.
TEST(FusedSsmScan, RejectsUnsupportedShapes) {
  if (!kernels::has_implementation("ssm_scan", "fused_cuda")) GTEST_SKIP() << "built without CUDA";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  const auto fused = ssm_backend("fused_cuda", 16);
  auto on_gpu = [](std::vector<Tensor> v) {
    for (auto& t : v)
      if (t.defined()) t = t.to(torch::kCUDA, torch::kFloat);
    return v;
  };
  EXPECT_THROW(fused(on_gpu(ssm_inputs(1, 20, 2, 5, 16, 900))), c10::Error);    // P not a multiple of 16
  EXPECT_THROW(fused(on_gpu(ssm_inputs(1, 20, 2, 16, 144, 901))), c10::Error);  // N over 128
  EXPECT_THROW(ssm_backend("fused_cuda", 24)(on_gpu(ssm_inputs(1, 20, 2, 16, 16, 902))), c10::Error);  // chunk 24
  EXPECT_NO_THROW(fused(on_gpu(ssm_inputs(1, 20, 2, 16, 16, 903))));
}

// An output without a gradient (the model never uses h_last; a caller may use h_last alone) reaches the
// backward undefined (set_materialize_grads(false)): the gradients must equal those of a zero cotangent
// for it, i.e. the paths without dh_last (no <dh_last, h_last>, the adjoint scan from zero) and without
// dy (a zero dout) against the same kernels fed zeros. Both paths, every optional input, T not a
// multiple of the chunk. The tensor-core path (bf16 x) adds every partial sum in a fixed order: bit for
// bit. The SIMT path (fp32 x) adds some row sums with shared-memory atomics, in any order: to 1e-5 of
// the gradient's largest element (fp32 rounding of sums of at most a few hundred terms, ~1e-7 each).
TEST(FusedSsmScan, AnAbsentOutputGradientEqualsAZeroOne) {
  if (!kernels::has_implementation("ssm_scan", "fused_cuda")) GTEST_SKIP() << "built without CUDA";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  const int64_t B = 2, T = 37, H = 3, P = 16, N = 32, L = 16;
  const auto& fused = kernels::implementations().ssm_scan.at("fused_cuda");
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  const auto gy = torch::randn({B, T, H, P}, cuda), gh = torch::randn({B, H, P, N}, cuda);
  for (const auto x_dtype : {torch::kFloat, torch::kBFloat16}) {
    auto in = cast(ssm_inputs(B, T, H, P, N, 910, kAllOptions), torch::kFloat, torch::kCUDA);
    for (const int i : {0, 1, 2, 7}) in[i] = in[i].to(x_dtype);  // x, q, k, z
    // Gradients of <y, wy> + <h_last, wh>; a null weight leaves that output out of the loss altogether.
    auto gradients = [&](const Tensor& wy, const Tensor& wh) {
      std::vector<Tensor> leaves, wrt;
      for (const auto& t : in) {
        leaves.push_back(t.defined() ? t.detach().clone().requires_grad_(true) : Tensor());
        if (t.defined()) wrt.push_back(leaves.back());
      }
      const auto out = fused(as_scan_inputs(leaves, L));
      Tensor loss = torch::zeros({}, cuda);
      if (wy.defined()) loss = loss + (out.y.to(torch::kFloat) * wy).sum();
      if (wh.defined()) loss = loss + (out.h_last * wh).sum();
      return torch::autograd::grad({loss}, wrt);
    };
    const std::string path = x_dtype == torch::kFloat ? "fp32 " : "bf16 ";
    auto same = [&](const Tensor& a, const Tensor& b) {
      if (x_dtype == torch::kBFloat16) return torch::equal(a, b);
      return (a - b).abs().max().item<double>() <= 1e-5 * b.abs().max().item<double>();
    };
    const auto y_only = gradients(gy, Tensor()), y_zero_h = gradients(gy, torch::zeros_like(gh));
    const auto h_only = gradients(Tensor(), gh), h_zero_y = gradients(torch::zeros_like(gy), gh);
    ASSERT_EQ(y_only.size(), y_zero_h.size());
    for (size_t i = 0; i < y_only.size(); ++i) {
      EXPECT_TRUE(same(y_only[i], y_zero_h[i])) << path << "y alone, input " << i;
      EXPECT_TRUE(same(h_only[i], h_zero_y[i])) << path << "h_last alone, input " << i;
      EXPECT_GT(y_only[i].abs().sum().item<double>(), 0.0) << path << "input " << i;  // a real gradient
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// RG-LRU: the linear recurrence alone (linear_recurrence_*), then the seam with its gates.

// {a, b}, fp64 on the CPU: log a = -8 r softplus(-Lambda) with r = sigmoid(z) and softplus(-Lambda)
// spread over ~1e-3..~3 (wider than the block's init), so a runs from ~1 - 1e-4 down to ~1e-10;
// b = sqrt(1 - a^2) * z as the block feeds it (keeps h of order 1 in every channel).
std::vector<Tensor> rec_inputs(int64_t B, int64_t T, int64_t W, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto opt = torch::TensorOptions().dtype(torch::kDouble);
  auto rn = [&](at::IntArrayRef s) { return torch::randn(s, gen, opt); };
  const auto log_a = -8 * torch::sigmoid(rn({B, T, W})) * torch::softplus(2 * rn({B, T, W}) - 2);
  const auto a = log_a.exp();
  return {a, (1 - a * a).sqrt() * rn({B, T, W})};
}

// {a, b} or {a, b, h0}: h of the linear recurrence (h_last is h's last step, checked separately).
Fn rec_chunked(int64_t L) {
  return [L](const std::vector<Tensor>& v) {
    return ref::linear_recurrence_chunked(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), L).first;
  };
}
Tensor rec_stepwise(const std::vector<Tensor>& v) {
  return ref::linear_recurrence_stepwise(v[0], v[1], v.size() > 2 ? v[2] : Tensor()).first;
}

struct RecShape {
  int64_t B, T, W, L;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " W" + std::to_string(W) + " L" + std::to_string(L);
  }
};
const std::vector<RecShape> kRecShapes = {{2, 37, 5, 8},  {2, 5, 5, 16},   {2, 1, 5, 4},    {2, 13, 5, 1},
                                          {1, 16, 3, 16}, {3, 200, 7, 64}, {1, 1000, 4, 64}};

TEST(RecurrentScan, ChunkedMatchesStepwiseFp64) {
  uint64_t seed = 1100;
  for (const auto& s : kRecShapes) {
    auto in = rec_inputs(s.B, s.T, s.W, seed++);
    const auto got = rec_chunked(s.L)(in);
    ASSERT_EQ(got.sizes(), in[1].sizes()) << s.name();
    const double err = rel_err(got, rec_stepwise(in));
    note("rec fp64 chunked vs stepwise " + s.name(), err);
    EXPECT_LT(err, kFp64Tol) << s.name();
    // From an initial state: every chunk's entry state moves.
    in.push_back(torch::randn({s.B, s.W}, at::detail::createCPUGenerator(seed++), torch::kDouble));
    const double err_h0 = rel_err(rec_chunked(s.L)(in), rec_stepwise(in));
    note("rec fp64 chunked vs stepwise from h0 " + s.name(), err_h0);
    EXPECT_LT(err_h0, kFp64Tol) << s.name() << " from h0";
  }
}

TEST(RecurrentScan, HandComputedT3) {
  // h_0 = a_0 h0 + b_0, h_1 = a_1 h_0 + b_1, h_2 = a_2 h_1 + b_2; without h0, h_0 = b_0.
  const double a0 = 0.5, a1 = 0.9, a2 = 0.25, b0 = 2.0, b1 = -1.0, b2 = 0.125, init = 3.0;
  for (const bool with_h0 : {false, true}) {
    const double h0 = (with_h0 ? a0 * init : 0.0) + b0, h1 = a1 * h0 + b1, h2 = a2 * h1 + b2;
    std::vector<Tensor> in = {torch::tensor({a0, a1, a2}, torch::kDouble).view({1, 3, 1}),
                              torch::tensor({b0, b1, b2}, torch::kDouble).view({1, 3, 1})};
    if (with_h0) in.push_back(torch::full({1, 1}, init, torch::kDouble));
    const auto want = torch::tensor({h0, h1, h2}, torch::kDouble).view({1, 3, 1});
    EXPECT_LT((rec_stepwise(in) - want).abs().max().item<double>(), 1e-15);
    for (int64_t L : {1, 2, 64}) {
      const double err = (rec_chunked(L)(in) - want).abs().max().item<double>();
      note("rec hand check T=3 L=" + std::to_string(L) + (with_h0 ? " from h0" : "") + " (abs)", err);
      EXPECT_LT(err, 1e-15) << "L=" << L << " h0 " << with_h0;
      const auto [h, h_last] = ref::linear_recurrence_chunked(in[0], in[1], with_h0 ? in[2] : Tensor(), L);
      EXPECT_NEAR(h_last.item<double>(), h2, 1e-15) << "h_last, L=" << L;
    }
  }
}

TEST(RecurrentScan, GradientsChunkedMatchStepwiseFp64) {
  uint64_t seed = 1200;
  for (const auto& s : {RecShape{2, 37, 5, 8}, RecShape{2, 13, 5, 1}, RecShape{2, 5, 5, 16}, RecShape{1, 300, 4, 64}}) {
    auto in = rec_inputs(s.B, s.T, s.W, seed++);
    in.push_back(torch::randn({s.B, s.W}, at::detail::createCPUGenerator(seed++), torch::kDouble));  // h0
    const auto g = torch::randn({s.B, s.T, s.W}, at::detail::createCPUGenerator(seed++), torch::kDouble);
    const auto got = grads(rec_chunked(s.L), in, g);
    const auto want = grads(rec_stepwise, in, g);
    const char* names[] = {"a", "b", "h0"};
    for (size_t i = 0; i < 3; ++i) {
      const double err = rel_err(got[i], want[i]);
      note(std::string("rec fp64 grad ") + names[i] + " " + s.name(), err);
      EXPECT_LT(err, kFp64Tol) << names[i] << " " << s.name();
    }
  }
}

TEST(RecurrentScan, FiniteDifferencesChunkedFp64) {
  // a kept >= 0.01 so that a +- 1e-6 stays inside (0, 1] (below, a - h could go negative).
  auto in = rec_inputs(2, 9, 3, 1300);
  in[0] = in[0].clamp_min(0.01);
  in.push_back(torch::randn({2, 3}, at::detail::createCPUGenerator(1302), torch::kDouble));  // h0
  const auto g = torch::randn({2, 9, 3}, at::detail::createCPUGenerator(1301), torch::kDouble);
  finite_difference_check(rec_chunked(4), in, g, "rec L=4 T=9");
}

void rec_fp32_check(torch::Device dev) {
  uint64_t seed = 1400;
  for (const auto& s : {RecShape{2, 37, 5, 8}, RecShape{3, 200, 7, 64}, RecShape{2, 1000, 16, 64}}) {
    const auto in32 = cast(rec_inputs(s.B, s.T, s.W, seed++), torch::kFloat, dev);
    const auto in64 = cast(in32, torch::kDouble);
    const auto got = rec_chunked(s.L)(in32);
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    const double err = rel_err(got, rec_stepwise(in64));
    note("rec fp32 chunked (" + dev.str() + ") vs fp64 stepwise " + s.name(), err);
    EXPECT_LT(err, kFp32Tol) << s.name();
    const auto g = torch::randn({s.B, s.T, s.W}, at::detail::createCPUGenerator(seed++), torch::kDouble);
    const auto d32 = grads(rec_chunked(s.L), in32, g.to(dev, torch::kFloat));
    const auto d64 = grads(rec_stepwise, in64, g);
    for (size_t i = 0; i < 2; ++i) {
      const double e = rel_err(d32[i], d64[i]);
      note(std::string("rec fp32 grad ") + (i == 0 ? "a" : "b") + " (" + dev.str() + ") " + s.name(), e);
      EXPECT_LT(e, 10 * kFp32Tol) << s.name();
    }
  }
}

TEST(RecurrentScan, Fp32ChunkedMatchesFp64StepwiseCpu) { rec_fp32_check(torch::kCPU); }

TEST(RecurrentScan, Fp32ChunkedMatchesFp64StepwiseCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  rec_fp32_check(torch::Device(torch::kCUDA, 0));
}

// Long sequences at the ends of (0, 1]: a = 1 - 1e-4 (memory of ~1e4 steps, h a running sum of
// unit-variance b), a = 1e-3 (chunk-local log-cumsums reach -440: exp(-c_s) would overflow fp32),
// a = 1 exactly, a mix of both extremes, and a with exact zeros (underflowed upstream).
TEST(RecurrentScan, ExtremeDecaysLongSequence) {
  const int64_t B = 2, T = 1000, W = 4;
  auto gen = at::detail::createCPUGenerator(1500);
  const auto b = torch::randn({B, T, W}, gen, torch::kDouble);
  const auto coin = torch::rand({B, T, W}, gen, torch::kDouble) < 0.5;
  const auto full = [&](double v) { return torch::full({B, T, W}, v, torch::kDouble); };
  auto with_zeros = full(0.9);
  with_zeros.select(1, 100).zero_();
  with_zeros.select(1, 517).zero_();
  const std::vector<std::pair<std::string, Tensor>> cases = {
      {"a=1-1e-4", full(1 - 1e-4)},
      {"a=1e-3", full(1e-3)},
      {"a=1", full(1.0)},
      {"a mixed 1e-3 / 1-1e-4", torch::where(coin, full(1e-3), full(1 - 1e-4))},
      {"a=0.9 with exact zeros", with_zeros},
  };
  const auto g = torch::randn({B, T, W}, gen, torch::kDouble);
  for (const auto& [name, a] : cases) {
    const std::vector<Tensor> in = {a, b};
    const auto want = rec_stepwise(in);
    const auto got64 = rec_chunked(64)(in);
    ASSERT_TRUE(all_finite(got64)) << name;
    const double err64 = rel_err(got64, want);
    note("rec fp64 " + name + " T=1000", err64);
    EXPECT_LT(err64, kFp64Tol) << name;

    const auto in32 = cast(in, torch::kFloat);
    const auto got32 = rec_chunked(64)(in32);
    ASSERT_TRUE(all_finite(got32)) << name;
    const double err32 = rel_err(got32, rec_stepwise(cast(in32, torch::kDouble)));
    note("rec fp32 " + name + " T=1000", err32);
    EXPECT_LT(err32, kFp32Tol) << name;

    // Backward: finite in fp32, close to fp64 stepwise in fp32 and equal to it in fp64 (including
    // d/da at a = 0, which is h_{t-1} dLoss/dh_t, not 0).
    const auto w64 = grads(rec_stepwise, in, g);
    const auto d32 = grads(rec_chunked(64), in32, g.to(torch::kFloat));
    const auto w32 = grads(rec_stepwise, cast(in32, torch::kDouble), g);
    const auto d64 = grads(rec_chunked(64), in, g);
    for (size_t i = 0; i < 2; ++i) {
      const std::string which = i == 0 ? " grad a" : " grad b";
      EXPECT_TRUE(all_finite(d32[i])) << name << which;
      const double e32 = rel_err(d32[i], w32[i]), e64 = rel_err(d64[i], w64[i]);
      note("rec fp32" + which + " " + name + " T=1000", e32);
      note("rec fp64" + which + " " + name + " T=1000", e64);
      EXPECT_LT(e32, 10 * kFp32Tol) << name << which;
      EXPECT_LT(e64, kFp64Tol) << name << which;
    }
  }
}

// The chunked form's backward is the adjoint scan, not recorded by autograd: asking for a graph of
// the gradient must fail loudly rather than return gradients that silently have no second order.
TEST(RecurrentScan, DoubleBackwardFailsClosed) {
  const auto in = rec_inputs(1, 10, 3, 1600);
  const auto a = in[0].clone().requires_grad_(true), b = in[1].clone().requires_grad_(true);
  const auto h = ref::linear_recurrence_chunked(a, b, Tensor(), 4).first;
  EXPECT_THROW(torch::autograd::grad({h.sum()}, {a, b}, {}, /*retain_graph=*/true, /*create_graph=*/true), c10::Error);
}

TEST(RecurrentScan, RejectsBadArguments) {
  const auto a = torch::full({1, 4, 2}, 0.5), b = torch::ones({1, 4, 2});
  EXPECT_THROW(ref::linear_recurrence_chunked(a, b, Tensor(), 0), c10::Error);
  EXPECT_THROW(ref::linear_recurrence_chunked(a, b.narrow(1, 0, 3), Tensor()), c10::Error);
  EXPECT_THROW(ref::linear_recurrence_chunked(a, b, torch::zeros({1, 3})), c10::Error);  // h0 not [B,W]
  EXPECT_THROW(ref::linear_recurrence_stepwise(a.select(0, 0), b.select(0, 0), Tensor()), c10::Error);
}

// --- the seam: gates (docs/model.md "R") + recurrence -----------------------------------------------------

// {gate_a, gate_x, u, lambda, h0}, fp64 on the CPU: gate logits N(0, 3^2), sigmoid(Lambda) spread over
// [0.5, 0.9999] (a from ~1 - 1e-5 down to ~e^-5.5), h0 N(0, 1).
std::vector<Tensor> seam_inputs(int64_t B, int64_t T, int64_t W, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto opt = torch::TensorOptions().dtype(torch::kDouble);
  const auto decay = 0.5 + 0.4999 * torch::rand({W}, gen, opt);
  return {3 * torch::randn({B, T, W}, gen, opt), 3 * torch::randn({B, T, W}, gen, opt),
          torch::randn({B, T, W}, gen, opt), torch::log(decay) - torch::log1p(-decay), torch::randn({B, W}, gen, opt)};
}

RecurrentScanInputs to_seam(const std::vector<Tensor>& v) {
  return {.gate_a = v[0], .gate_x = v[1], .u = v[2], .lambda = v[3], .h0 = v.size() > 4 ? v[4] : Tensor()};
}

// h and h_last of a RecurrentScanFn as one tensor [B, T+1, W] (h_last appended), for grads().
Fn seam(const std::function<ablate::kernels::RecurrentScanOutputs(const RecurrentScanInputs&)>& fn) {
  return [fn](const std::vector<Tensor>& v) {
    const auto out = fn(to_seam(v));
    return torch::cat({out.h, out.h_last.unsqueeze(1)}, 1);
  };
}
const Fn seam_chunked = seam([](const RecurrentScanInputs& in) { return ref::recurrent_scan_chunked(in, 8); });
const Fn seam_stepwise = seam([](const RecurrentScanInputs& in) { return ref::recurrent_scan_stepwise(in); });

// Independent of both implementations: one step from h0, the gates evaluated by hand.
TEST(RecurrentScan, SeamHandComputedOneStep) {
  const double ga = 0.3, gx = -1.2, u = 0.7, lambda = 2.5, h0 = -0.4;
  const double r = 1 / (1 + std::exp(-ga)), i = 1 / (1 + std::exp(-gx));
  const double a = std::exp(-8 * r * std::log1p(std::exp(-lambda)));
  const double want = a * h0 + std::sqrt(1 - a * a) * i * u;
  const std::vector<Tensor> in = {torch::full({1, 1, 1}, ga, torch::kDouble), torch::full({1, 1, 1}, gx, torch::kDouble),
                                  torch::full({1, 1, 1}, u, torch::kDouble), torch::full({1}, lambda, torch::kDouble),
                                  torch::full({1, 1}, h0, torch::kDouble)};
  for (const auto& [what, f] : {std::pair{"stepwise", seam_stepwise}, std::pair{"chunked", seam_chunked}}) {
    const auto h = f(in);
    EXPECT_NEAR(h[0][0][0].item<double>(), want, 1e-15) << what;
    EXPECT_NEAR(h[0][1][0].item<double>(), want, 1e-15) << what << " h_last";
  }
}

TEST(RecurrentScan, SeamChunkedMatchesStepwiseFp64) {
  uint64_t seed = 1700;
  for (const auto& s : {RecShape{2, 37, 5, 8}, RecShape{1, 1, 3, 8}, RecShape{2, 100, 4, 8}}) {
    for (const bool with_h0 : {false, true}) {
      auto in = seam_inputs(s.B, s.T, s.W, seed++);
      if (!with_h0) in.pop_back();
      const std::string what = s.name() + (with_h0 ? " from h0" : "");
      const double err = rel_err(seam_chunked(in), seam_stepwise(in));
      note("rec seam fp64 chunked vs stepwise " + what, err);
      EXPECT_LT(err, kFp64Tol) << what;
      const auto g = torch::randn({s.B, s.T + 1, s.W}, at::detail::createCPUGenerator(seed++), torch::kDouble);
      const auto got = grads(seam_chunked, in, g), want = grads(seam_stepwise, in, g);
      const char* names[] = {"gate_a", "gate_x", "u", "lambda", "h0"};
      for (size_t k = 0; k < got.size(); ++k) {
        const double e = rel_err(got[k], want[k]);
        note(std::string("rec seam fp64 grad ") + names[k] + " " + what, e);
        EXPECT_LT(e, kFp64Tol) << names[k] << " " << what;
      }
    }
  }
}

// The registry's reference backend uses the default chunk (16): several chunks and a tail.
TEST(RecurrentScan, SeamDefaultChunkMatchesStepwiseFp64) {
  const auto in = seam_inputs(2, 333, 6, 1750);
  const auto fn = ablate::kernels::implementations().recurrent_scan.at("reference");
  const double err = rel_err(seam(fn)(in), seam_stepwise(in));
  note("rec seam fp64 registry reference vs stepwise B2 T333 W6", err);
  EXPECT_LT(err, kFp64Tol);
}

TEST(RecurrentScan, SeamFiniteDifferencesFp64) {
  const auto in = seam_inputs(2, 7, 3, 1800);
  const auto g = torch::randn({2, 8, 3}, at::detail::createCPUGenerator(1801), torch::kDouble);
  finite_difference_check(seam_chunked, in, g, "rec seam L=8 T=7");
}

// bf16 gate logits and u (what bf16 projections hand over) are promoted: the output is fp32 and equal
// to the call on the same values in fp32; under bf16 autocast the arithmetic stays fp32; T = 0 gives an
// empty h and h_last = h0.
TEST(RecurrentScan, SeamDtypesAutocastAndEmpty) {
  auto in = cast(seam_inputs(2, 21, 6, 1900), torch::kFloat);
  auto low = in;
  for (int k = 0; k < 3; ++k) low[k] = in[k].to(torch::kBFloat16);
  const auto out = ref::recurrent_scan_chunked(to_seam(low));
  EXPECT_EQ(out.h.scalar_type(), torch::kFloat);
  EXPECT_EQ(out.h_last.scalar_type(), torch::kFloat);
  auto up = low;
  for (int k = 0; k < 3; ++k) up[k] = low[k].to(torch::kFloat);
  EXPECT_EQ(rel_err(out.h, ref::recurrent_scan_chunked(to_seam(up)).h), 0.0);

  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto under = ref::recurrent_scan_chunked(to_seam(in));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(under.h.scalar_type(), torch::kFloat);
  EXPECT_LT(rel_err(under.h, ref::recurrent_scan_chunked(to_seam(in)).h), 1e-6);

  auto empty = in;
  for (int k = 0; k < 3; ++k) empty[k] = in[k].narrow(1, 0, 0);
  for (const auto& out0 : {ref::recurrent_scan_chunked(to_seam(empty)), ref::recurrent_scan_stepwise(to_seam(empty))}) {
    EXPECT_EQ(out0.h.sizes(), (std::vector<int64_t>{2, 0, 6}));
    EXPECT_EQ(rel_err(out0.h_last, in[4]), 0.0);
  }
}

TEST(RecurrentScan, SeamRejectsBadArguments) {
  const auto in = seam_inputs(1, 4, 3, 2000);
  auto bad = [&](size_t k, const Tensor& t) {
    auto v = in;
    v[k] = t;
    return to_seam(v);
  };
  EXPECT_THROW(ref::recurrent_scan_chunked(bad(1, in[1].narrow(1, 0, 3))), c10::Error);          // gate_x shorter
  EXPECT_THROW(ref::recurrent_scan_chunked(bad(2, in[2].narrow(2, 0, 2))), c10::Error);          // u narrower
  EXPECT_THROW(ref::recurrent_scan_chunked(bad(3, torch::zeros({4}, torch::kDouble))), c10::Error);  // lambda not [W]
  EXPECT_THROW(ref::recurrent_scan_chunked(bad(4, torch::zeros({1, 4}, torch::kDouble))), c10::Error);  // h0 not [B,W]
  EXPECT_THROW(ref::recurrent_scan_chunked(bad(0, in[0].select(0, 0))), c10::Error);            // gate_a not 3-D
  EXPECT_THROW(ref::recurrent_scan_stepwise(bad(2, torch::ones({1, 4, 3}, torch::kLong))), c10::Error);  // u integer
  EXPECT_THROW(ref::recurrent_scan_chunked(to_seam(in), 0), c10::Error);                         // chunk 0
}

// ---------------------------------------------------------------------------------------------------
// CUDA graphs: forward and backward of both chunked scans must capture (no host sync, no
// data-dependent shape: either would abort the capture) and replay to the eager result, also after
// the inputs are overwritten in place (the graph reads them, it did not bake them in).
#ifdef ABLATE_SCANS_TEST_CUDA_GRAPHS
void graph_check(const Fn& f, const std::vector<Tensor>& inputs_cpu, const std::string& what) {
  const torch::Device dev(torch::kCUDA, 0);
  std::vector<Tensor> in;
  for (const auto& t : inputs_cpu) in.push_back(t.defined() ? t.to(dev, torch::kFloat).requires_grad_(true) : Tensor());
  std::vector<Tensor> wrt;
  for (const auto& t : in)
    if (t.defined()) wrt.push_back(t);
  auto run = [&] {
    const auto y = f(in);
    auto out = torch::autograd::grad({(y * y).sum()}, wrt);
    out.insert(out.begin(), y);
    return out;
  };
  const auto side = c10::cuda::getStreamFromPool(false, 0);
  c10::cuda::CUDAStreamGuard on_side(side);
  for (int i = 0; i < 3; ++i) run();  // warm-up outside capture (cuBLAS workspaces, allocator pools)
  side.synchronize();
  at::cuda::CUDAGraph graph;
  std::vector<Tensor> captured;
  graph.capture_begin();
  captured = run();
  graph.capture_end();
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      torch::NoGradGuard no_grad;
      for (auto& t : wrt) t.mul_(0.5);  // new values in the same storage
    }
    graph.replay();
    const auto eager = run();
    side.synchronize();
    for (size_t i = 0; i < eager.size(); ++i) {
      const double err = rel_err(captured[i], eager[i]);
      EXPECT_LT(err, 1e-6) << what << " output " << i << " round " << round;
    }
  }
}
#endif

TEST(Scans, CudaGraphCaptureAndReplay) {
#ifdef ABLATE_SCANS_TEST_CUDA_GRAPHS
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  graph_check(ssm_chunked(16), ssm_inputs(2, 100, 3, 8, 16, 1700, kAllOptions), "ssm_scan_chunked");
  if (kernels::has_implementation("ssm_scan", "fused_cuda"))
    graph_check(ssm_backend("fused_cuda", 16), ssm_inputs(2, 100, 3, 16, 32, 1702, kAllOptions), "ssm_scan fused_cuda");
  graph_check(rec_chunked(16), rec_inputs(2, 100, 32, 1701), "recurrent_scan_chunked");
  if (ablate::kernels::has_implementation("recurrent_scan", "fused_cuda"))
    graph_check(seam(ablate::kernels::implementations().recurrent_scan.at("fused_cuda")),
                seam_inputs(2, 100, 32, 1702), "recurrent_scan fused_cuda");
#else
  GTEST_SKIP() << "LibTorch built without CUDA headers";
#endif
}

// ---------------------------------------------------------------------------------------------------
// recurrent_scan = fused_cuda (kernels/recurrent_scan/fused_cuda.cu). The parity rows (parity_test.cpp) cover
// small shapes, extreme decays, T = 1 and both dtypes; here: long sequences against the fp64
// definition, bitwise determinism, both vector widths, the model's mixed input dtypes, T = 0 and the
// errors for what it cannot run. GPU only: skipped elsewhere with the reason.

std::string fused_unavailable() {
  if (!ablate::kernels::has_implementation("recurrent_scan", "fused_cuda")) return "built without CUDA";
  if (!torch::cuda::is_available()) return "no CUDA device visible to LibTorch";
  return "";
}

const ablate::kernels::RecurrentScanFn& fused_rglru() {
  return ablate::kernels::implementations().recurrent_scan.at("fused_cuda");
}

// The fused scan on `leaves` (which require grad): {h with h_last appended, then each gradient} of
// sum(y * g).
std::vector<Tensor> fused_forward_backward(const std::vector<Tensor>& leaves, const Tensor& g) {
  const auto y = seam(fused_rglru())(leaves);
  auto out = torch::autograd::grad({(y * g).sum()}, leaves);
  out.insert(out.begin(), y);
  return out;
}

// 2053 = 128 chunks of 16 and a tail of 5 (17 runs of 8 chunks, the last of one), at widths that take
// the 2-channel path when it is forced (64: one warp of channels; 66: a second, nearly idle) and the
// 1-channel one always (65), each with the built-in rule and 2 channels forced. fp32 tolerances as
// kFp32Tol: h_t sums decayed terms over up to T steps (a up to 1 - 1e-5 here), the gates add a few ulp
// each, d lambda sums B*T terms.
TEST(RecurrentScanFused, LongSequencesMatchStepwiseFp64) {
  if (const auto why = fused_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device cuda(torch::kCUDA, 0);
  const Fn fused = seam(fused_rglru());
  uint64_t seed = 2100;
  for (const auto& [B, T, W] : {std::tuple<int64_t, int64_t, int64_t>{2, 2053, 64}, {1, 700, 66}, {1, 300, 65}})
    for (const int vec : {0, 2}) {
      const std::string what = "B" + std::to_string(B) + " T" + std::to_string(T) + " W" + std::to_string(W) +
                               (vec == 0 ? " built-in" : " 2-channel");
      const auto in32 = cast(seam_inputs(B, T, W, seed++), torch::kFloat, cuda);
      const auto in64 = cast(in32, torch::kDouble);
#if defined(ABLATE_HAVE_CUDA)
      kernels::fused::tuning::recurrent_scan_channels_per_thread(vec);
#endif
      const auto got = fused(in32);
      const auto g = torch::randn({B, T + 1, W}, at::detail::createCPUGenerator(seed++), torch::kDouble);
      const auto d32 = grads(fused, in32, g.to(cuda, torch::kFloat));
#if defined(ABLATE_HAVE_CUDA)
      kernels::fused::tuning::recurrent_scan_channels_per_thread(0);
#endif
      ASSERT_TRUE(all_finite(got)) << what;
      const double err = rel_err(got, seam_stepwise(in64));
      note("rec fused fp32 vs fp64 stepwise " + what, err);
      EXPECT_LT(err, kFp32Tol) << what;
      const auto d64 = grads(seam_stepwise, in64, g);
      const char* names[] = {"gate_a", "gate_x", "u", "lambda", "h0"};
      for (size_t k = 0; k < d32.size(); ++k) {
        const double e = rel_err(d32[k], d64[k]);
        note(std::string("rec fused fp32 grad ") + names[k] + " " + what, e);
        EXPECT_LT(e, 10 * kFp32Tol) << names[k] << " " << what;
      }
    }
}

// Two runs give identical bits (no atomics on values: the chain's associations are fixed, d lambda is a
// fixed-order sum), h_last is h's last step exactly, and inputs whose addresses are not 16-byte aligned
// (the 1-channel path) give the same values as aligned ones on the 2-channel path: the same arithmetic
// per element.
TEST(RecurrentScanFused, DeterministicAndIndependentOfTheVectorPath) {
  if (const auto why = fused_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device cuda(torch::kCUDA, 0);
  auto in = cast(seam_inputs(3, 77, 64, 2200), torch::kFloat, cuda);
  for (int k = 0; k < 3; ++k) in[k] = in[k].to(torch::kBFloat16);
  const auto g = torch::randn({3, 78, 64}, at::detail::createCPUGenerator(2201), torch::kFloat).to(cuda);
  auto leaves = [&](bool misaligned) {
    std::vector<Tensor> out;
    for (const auto& t : in) {
      Tensor leaf = t.clone();
      if (misaligned) {  // the same values one element past an aligned address, still contiguous
        auto buffer = torch::empty({t.numel() + 1}, t.options());
        leaf = buffer.narrow(0, 1, t.numel()).view(t.sizes());
        leaf.copy_(t);
      }
      out.push_back(leaf.requires_grad_(true));
    }
    return out;
  };
  const auto first = fused_forward_backward(leaves(false), g);  // the built-in rule
  const auto second = fused_forward_backward(leaves(false), g);
  const auto shifted = fused_forward_backward(leaves(true), g);  // misaligned: 1 channel a thread
#if defined(ABLATE_HAVE_CUDA)
  kernels::fused::tuning::recurrent_scan_channels_per_thread(2);
  const auto wide = fused_forward_backward(leaves(false), g);
  kernels::fused::tuning::recurrent_scan_channels_per_thread(0);
#else
  const auto wide = first;  // unreachable: fused_unavailable() skipped above
#endif
  ASSERT_EQ(first.size(), 6u);
  for (size_t k = 0; k < first.size(); ++k) {
    EXPECT_TRUE(torch::equal(first[k], second[k])) << "output " << k << " differs between two runs";
    for (const auto& [other, what] : {std::pair{&shifted, "1-channel"}, std::pair{&wide, "2-channel"}}) {
      const double e = rel_err((*other)[k], first[k]);
      note(std::string("rec fused ") + what + " vs the built-in path, output " + std::to_string(k), e);
      EXPECT_LT(e, 1e-6) << what << " output " << k;
    }
  }
  const auto out = fused_rglru()(to_seam(in));
  EXPECT_TRUE(torch::equal(out.h.select(1, 76), out.h_last));
}

// The model under bf16 autocast hands over bf16 gate logits and fp32 u; gate_x in another dtype than
// gate_a (both are then read in fp32). Against the fp64 definition on the same (rounded) values: fp32
// arithmetic, so kFp32Tol for h and 10x for the gradients of fp32 inputs; the gradients of bf16 inputs
// come back in bf16 (rounded: 4e-3 relative), so 1e-2 for those.
TEST(RecurrentScanFused, MixedInputDtypesMatchStepwiseFp64) {
  if (const auto why = fused_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device cuda(torch::kCUDA, 0);
  const auto base = cast(seam_inputs(2, 45, 24, 2300), torch::kFloat, cuda);
  for (const auto gate_x_dtype : {torch::kBFloat16, torch::kFloat}) {
    auto in = base;
    in[0] = base[0].to(torch::kBFloat16);
    in[1] = base[1].to(gate_x_dtype);
    const auto in64 = cast(in, torch::kDouble);
    const auto g = torch::randn({2, 46, 24}, at::detail::createCPUGenerator(2301), torch::kDouble);
    EXPECT_LT(rel_err(seam(fused_rglru())(in), seam_stepwise(in64)), kFp32Tol);
    const auto got = grads(seam(fused_rglru()), in, g.to(cuda, torch::kFloat)), want = grads(seam_stepwise, in64, g);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].scalar_type(), in[k].scalar_type()) << "gradient " << k;
      const double e = rel_err(got[k], want[k]);
      note("rec fused mixed dtypes grad " + std::to_string(k), e);
      EXPECT_LT(e, in[k].scalar_type() == torch::kBFloat16 ? 1e-2 : 10 * kFp32Tol) << "gradient " << k;
    }
  }
}

TEST(RecurrentScanFused, EmptySequenceAndRefusals) {
  if (const auto why = fused_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device cuda(torch::kCUDA, 0);
  auto in = cast(seam_inputs(2, 5, 8, 2400), torch::kFloat, cuda);
  // T = 0: h is empty and h_last is h0, gradient included.
  auto empty = in;
  for (int k = 0; k < 3; ++k) empty[k] = in[k].narrow(1, 0, 0);
  empty[4] = in[4].clone().requires_grad_(true);
  const auto out = fused_rglru()(to_seam(empty));
  EXPECT_EQ(out.h.sizes(), (std::vector<int64_t>{2, 0, 8}));
  EXPECT_TRUE(torch::equal(out.h_last, in[4]));
  EXPECT_TRUE(torch::equal(torch::autograd::grad({out.h_last.sum()}, {empty[4]})[0], torch::ones_like(in[4])));

  auto with = [&](size_t k, const Tensor& t) {
    auto v = in;
    v[k] = t;
    return to_seam(v);
  };
  const auto expect_error = [](const RecurrentScanInputs& bad, const std::string& needle) {
    try {
      fused_rglru()(bad);
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(to_seam(cast(in, torch::kFloat, torch::kCPU)), "CUDA");
  expect_error(with(3, in[3].cpu()), "CUDA");
  expect_error(with(0, in[0].to(torch::kDouble)), "fp32 or bf16");
  expect_error(with(2, in[2].to(torch::kHalf)), "fp32 or bf16");
  expect_error(with(1, in[1].narrow(1, 0, 4)), "gate_x must match");
}

}  // namespace
