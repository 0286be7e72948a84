// tests/kernels/parity_test.cpp: one table-driven parity driver for every (seam, backend) row of the
// kernel catalog, in the manner of ggml's test-backend-ops: each row runs forward + backward on
// fresh seeded inputs with odd shapes and is compared with the `reference` backend evaluated in fp64
// on the CPU (or, where a case names one, the seam's per-timestep definition in fp64). A row runs in fp64 where it can (rows built from LibTorch ops) and in fp32 and bf16
// where its seam contract allows; a row unavailable on this machine (no CUDA, too old a GPU, a dtype
// the kernel refuses) is skipped with the catalog's reason. Adding a backend to the catalog and the
// registry adds its rows here; adding a seam needs its cases in parity_cases().
// Run: build/tests/kernels_tests --gtest_filter='*Parity*'   (on a GPU machine the CUDA rows run too)
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/dispatch.h"
#include "kernels/loss/chunked.h"
#include "kernels/recurrent_scan/reference.h"
#include "kernels/registry.h"
#include "tests/kernels/tensor_checks.h"
#include "tests/model/bf16_autocast.h"

namespace ablate::kernels {
namespace {

using testing::random_normal;
using testing::relative_error;
using testing::seeded_generator;
using torch::Tensor;

// How a case input is converted for a run at a given dtype.
enum class Kind {
  floating,    // cast to the run dtype
  fp32_floor,  // cast to the wider of the run dtype and fp32 (the contract says fp32, e.g. cos/sin)
  integer,     // indices, kept as they are
  mask,        // 0/1 values, kept as they are
  absent,      // an undefined tensor (optional argument)
};

struct Input {
  Tensor value;  // fp64 (or integer) on the CPU
  Kind kind = Kind::floating;
  bool differentiable = false;
};

// Bounds on relative error (max |diff| / max |reference|) of a row's outputs and gradients.
struct Tolerance {
  double value, gradient;
};

struct ParityCase {
  std::string seam;
  std::string label;                      // the shape, for the test name
  std::vector<torch::ScalarType> dtypes;  // the dtypes the seam's contract accepts for its inputs
  std::function<std::vector<Input>(at::Generator&)> make_inputs;
  // Calls backend `name` of the seam through the registry; returns its outputs.
  std::function<std::vector<Tensor>(const std::string& name, const std::vector<Tensor>&)> run;
  // Optional: the fp64 baseline every row is compared with (a seam's per-timestep definition); when
  // empty the baseline is the `reference` backend in fp64.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> definition = {};
  // Per-dtype bounds that replace tolerance_for's for this case (each with its reason where it is set).
  std::map<torch::ScalarType, Tolerance> tolerance = {};
  // The model shapes the case stands for, as the catalog's availability checks see them (a backend
  // that cannot take them is skipped with the catalog's reason); unset: not checked.
  ModelDims dims = {};
  // Bounds for rows whose backend changes the numerics (catalog changes_numerics: FP8 GEMMs), with
  // their derivation where set; such a row of a case without them fails.
  std::optional<Tolerance> changed_numerics = {};
};

const std::vector<torch::ScalarType> kAllDtypes = {torch::kDouble, torch::kFloat, torch::kBFloat16};
const std::vector<torch::ScalarType> kFp32Dtypes = {torch::kDouble, torch::kFloat};

Input floating(Tensor t) { return {std::move(t), Kind::floating, true}; }
Input fp32_floor(Tensor t, bool differentiable = true) { return {std::move(t), Kind::fp32_floor, differentiable}; }

// "B2H3T7" from {{"B", 2}, {"H", 3}, {"T", 7}}: the shape part of a test name.
std::string shape_label(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string label;
  for (const auto& [name, size] : dims) label.append(name).append(std::to_string(size));
  return label;
}

// k distinct experts per token, drawn from the generator.
Tensor distinct_experts(int64_t tokens, int64_t experts, int64_t k, at::Generator& gen) {
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < tokens; ++t) rows.push_back(torch::randperm(experts, gen, torch::kLong).narrow(0, 0, k));
  return torch::stack(rows);
}

// dense_gemm as the blocks call it: x [B, T, K] in the run dtype (bf16 under autocast, as the model
// trains), an fp32 master weight [N, K] and bias [N].
ParityCase dense_gemm_case(int64_t B, int64_t T, int64_t K, int64_t N, bool with_bias) {
  ParityCase c{"dense_gemm", shape_label({{"B", B}, {"T", T}, {"K", K}, {"N", N}}).append(with_bias ? "_bias" : ""),
               kAllDtypes,
               [=](at::Generator& g) {
                 return std::vector<Input>{
                     floating(random_normal({B, T, K}, g)), fp32_floor(random_normal({N, K}, g, 1.0 / std::sqrt(double(K)))),
                     with_bias ? fp32_floor(random_normal({N}, g)) : Input{Tensor(), Kind::absent, false}};
               },
               [](const std::string& name, const std::vector<Tensor>& in) {
                 std::optional<testing::Bf16Autocast> autocast;
                 if (in[0].scalar_type() == torch::kBFloat16) autocast.emplace(in[0].device().type());
                 return std::vector<Tensor>{implementations().dense_gemm.at(name)(in[0], in[1], in[2])};
               }};
  c.dims.projection_alignment = std::gcd(std::gcd(K, N), B * T);
  // FP8 rows (fp8_tensorwise, fp8_rowwise): e4m3 rounds each operand to 3 mantissa bits, a relative error
  // uniform in +-2^-4 (standard deviation 2^-4 / sqrt(3) = 0.036), e5m2 (the tensorwise output gradient)
  // to 2 bits (0.072). A GEMM's sum of K independently rounded products then errs by ~0.051 of its own
  // spread (two e4m3 operands: sqrt(2) x 0.036) and ~0.080 with an e5m2 one; the check's max |diff| /
  // max |reference| over thousands of outputs tracks that ratio. Twice it leaves room for the tails and
  // the bf16 rounding of y and dx; a wrong scale, transpose or dtype errs by O(1).
  c.changed_numerics = Tolerance{0.1, 0.16};
  return c;
}

ParityCase attention_case(int64_t B, int64_t H, int64_t T, int64_t dqk, int64_t dv) {
  return {"attention", shape_label({{"B", B}, {"H", H}, {"T", T}, {"Dqk", dqk}, {"Dv", dv}}), kAllDtypes,
          [=](at::Generator& g) {
            return std::vector<Input>{floating(random_normal({B, H, T, dqk}, g)),
                                      floating(random_normal({B, H, T, dqk}, g)),
                                      floating(random_normal({B, H, T, dv}, g))};
          },
          [=](const std::string& name, const std::vector<Tensor>& in) {
            return std::vector<Tensor>{
                implementations().attention.at(name)(in[0], in[1], in[2], 1.0 / std::sqrt(double(dqk)))};
          }};
}

ParityCase rope_case(int64_t B, int64_t T, int64_t H, int64_t dn, int64_t dr) {
  return {"rope", shape_label({{"B", B}, {"T", T}, {"H", H}, {"dn", dn}, {"dr", dr}}), kAllDtypes,
          [=](at::Generator& g) {
            const auto angle = random_normal({T, dr / 2}, g, 3.0);
            return std::vector<Input>{floating(random_normal({B, T, H, dn}, g)),
                                      floating(random_normal({B, T, H, dr}, g)),
                                      floating(random_normal({B, T, H, dn}, g)),
                                      floating(random_normal({B, T, 1, dr}, g)),
                                      fp32_floor(angle.cos(), false),
                                      fp32_floor(angle.sin(), false)};
          },
          [](const std::string& name, const std::vector<Tensor>& in) {
            auto [q, k] = implementations().rope.at(name)(in[0], in[1], in[2], in[3], in[4], in[5]);
            return std::vector<Tensor>{q, k};
          }};
}

// with_branch = false: the first layer's call, residual_norm(undefined, residual, ...).
ParityCase residual_norm_case(int64_t rows, int64_t T, int64_t d, bool with_branch) {
  return {
      "residual_norm", shape_label({{"R", rows}, {"T", T}, {"d", d}}).append(with_branch ? "" : "_no_branch"),
      kAllDtypes,
      [=](at::Generator& g) {
        Input branch = with_branch ? floating(random_normal({rows, T, d}, g)) : Input{Tensor(), Kind::absent, false};
        return std::vector<Input>{branch, fp32_floor(random_normal({rows, T, d}, g, 2.0)),
                                  fp32_floor(1.0 + random_normal({d}, g, 0.3))};
      },
      [](const std::string& name, const std::vector<Tensor>& in) {
        auto [y, s] = implementations().residual_norm.at(name)(in[0], in[1], in[2], 1e-6);
        return std::vector<Tensor>{y, s};
      }};
}

ParityCase swiglu_case(int64_t rows, int64_t width) {
  return {"swiglu", shape_label({{"R", rows}, {"W", width}}), kAllDtypes,
          [=](at::Generator& g) {
            return std::vector<Input>{floating(random_normal({rows, width}, g, 2.0)),
                                      floating(random_normal({rows, width}, g))};
          },
          [](const std::string& name, const std::vector<Tensor>& in) {
            return std::vector<Tensor>{implementations().swiglu.at(name)(in[0], in[1])};
          }};
}

// The router inputs {x, weight}: x in the run dtype, the weight fp32 at least (a parameter). Both are
// drawn exactly representable in their narrowest run dtype (x in bf16, the weight in fp32), so every row
// routes the same inputs and top_idx (compared exactly) cannot flip on input rounding; what remains is
// the arithmetic's own (~1e-7 relative on logits whose gaps are ~1e-1: a flip is vanishingly rare, and
// these seeded draws have none). probs and top_w take the driver's per-dtype bounds; dx is written in
// x's dtype (bf16: 4e-3).
ParityCase moe_router_case(int64_t T, int64_t d, int64_t E, int64_t k) {
  return {"moe_router", shape_label({{"T", T}, {"d", d}, {"E", E}, {"k", k}}), kAllDtypes,
          [=](at::Generator& g) {
            return std::vector<Input>{floating(random_normal({T, d}, g).to(torch::kBFloat16).to(torch::kDouble)),
                                      fp32_floor(random_normal({E, d}, g, 0.5).to(torch::kFloat).to(torch::kDouble))};
          },
          [=](const std::string& name, const std::vector<Tensor>& in) {
            auto out = implementations().moe_router.at(name)(in[0], in[1], k);
            return std::vector<Tensor>{out.probs, out.top_w, out.top_idx};
          }};
}

ParityCase moe_case(int64_t T, int64_t d, int64_t E, int64_t k, int64_t f, double capacity_factor) {
  ParityCase c{"moe_dispatch",
          shape_label({{"T", T}, {"d", d}, {"E", E}, {"k", k}, {"f", f}})
              .append(capacity_factor > 0 ? "_capacity" : "_dropless"),
          kAllDtypes,
          [=](at::Generator& g) {
            const auto weights = testing::random_uniform({T, k}, g, 0.1, 1.0);
            return std::vector<Input>{
                floating(random_normal({T, d}, g)),          {distinct_experts(T, E, k, g), Kind::integer, false},
                fp32_floor(weights / weights.sum(-1, true)), floating(random_normal({E, f, d}, g, 0.5)),
                floating(random_normal({E, f, d}, g, 0.5)),  floating(random_normal({E, d, f}, g, 0.5))};
          },
          [=](const std::string& name, const std::vector<Tensor>& in) {
            Tensor dropped;
            auto y = implementations().moe_dispatch.at(name)(in[0], in[1], in[2], in[3], in[4], in[5], capacity_factor,
                                                             &dropped, nullptr);
            return std::vector<Tensor>{y, dropped};
          }};
  c.dims.expert_alignment = std::gcd(d, f);
  // FP8 rows (grouped_mm_fp8_rowwise): every GEMM rounds both operands to e4m3, a relative error uniform
  // in +-2^-4 each (standard deviation 0.036; 0.051 for a product of two). y passes through the gate and
  // up projections (0.051 each, so silu(g) u errs by ~0.072) and the down projection, which rounds that
  // input and W2 again: ~sqrt(0.072^2 + 0.051^2) = 0.088 of its spread. A gradient passes through two or
  // three more (the down projection's input gradient, the SwiGLU backward reading the forward's g and u,
  // then the gate/up projections' input or weight gradient): ~0.10 (dx, dW1: sqrt(4 x 0.051^2 + ...)).
  // Twice that leaves room for the tails and the bf16 roundings; a wrong scale, group offset, padding or
  // transpose errs by O(1) (power-of-two scales: a factor of 2 at least).
  c.changed_numerics = Tolerance{0.2, 0.25};
  return c;
}

// The ssm_rotary inputs {b, c, b_bias, c_bias, delta, theta, phi0}. b and c take the run dtype (bf16
// included); the biases, delta, theta and phi0 stay at least fp32 as the M block gives them. Delta as
// softplus(N(0,1) - 2) (0.02 to ~2) and theta ~ N(0,1) keep |Phi| within ~30 rad over 150 steps, with
// phi0 ~ N(0, 10^2) offsetting whole sequences. fp32 bounds (3e-5, 3e-4): Phi is a running sum, and its
// fp32 rounding grows as sqrt(T) ulp(|Phi|) (~2e-5 rad at |Phi| 30 over 150 steps), which cos/sin turn
// into the same absolute error on q and k (entries ~1-3); the gradients for delta and theta sum dPhi
// over the later steps (reverse cumulative sum), 10x. The CPU reference measures <= 2e-6 on these
// cases; the bound leaves room for the GPU's own cumsum order and FMA contraction. bf16: the driver's
// bound (b, c rounded; measured <= 2e-3).
// qk_bf16: q and k asked in bf16 (qk_dtype, as the M block asks under autocast) in the fp32 and bf16 rows;
// the fp64 baseline keeps them exact. fp32 row bounds (4e-3, 1e-2): q and k rounded once to bf16 (half
// an ulp, 2^-9 ~ 2e-3 of an entry), and their gradients arrive in bf16 (the same rounding of each
// projection term) before the fp32 sums over heads and time.
ParityCase ssm_rotary_case(int64_t B, int64_t T, int64_t H, int64_t N, int64_t S, bool with_phi0,
                           bool qk_bf16 = false) {
  ParityCase c{"ssm_rotary",
               shape_label({{"B", B}, {"T", T}, {"H", H}, {"N", N}, {"S", S}})
                   .append(with_phi0 ? "_phi0" : "")
                   .append(qk_bf16 ? "_qk_bf16" : ""),
               kAllDtypes,
               [=](at::Generator& g) {
                 return std::vector<Input>{
                     floating(random_normal({B, T, N}, g)),
                     floating(random_normal({B, T, N}, g)),
                     fp32_floor(1.0 + random_normal({H, N}, g, 0.5)),
                     fp32_floor(1.0 + random_normal({H, N}, g, 0.5)),
                     fp32_floor(torch::softplus(random_normal({B, T, H}, g) - 2.0)),
                     fp32_floor(random_normal({B, T, S}, g)),
                     with_phi0 ? fp32_floor(random_normal({B, H, S}, g, 10.0)) : Input{Tensor(), Kind::absent, false}};
               },
               [qk_bf16](const std::string& name, const std::vector<Tensor>& in) {
                 std::optional<torch::Dtype> qk_dtype;
                 if (qk_bf16 && in[0].scalar_type() != torch::kDouble) qk_dtype = torch::kBFloat16;
                 const auto out = implementations().ssm_rotary.at(name)(
                     {.b = in[0], .c = in[1], .b_bias = in[2], .c_bias = in[3], .delta = in[4], .theta = in[5],
                      .phi0 = in[6], .qk_dtype = qk_dtype});
                 if (qk_dtype) {
                   EXPECT_EQ(out.q.scalar_type(), torch::kBFloat16);
                   EXPECT_EQ(out.k.scalar_type(), torch::kBFloat16);
                 }
                 return std::vector<Tensor>{out.q, out.k, out.phi_last};
               }};
  c.tolerance = {{torch::kFloat, qk_bf16 ? Tolerance{4e-3, 1e-2} : Tolerance{3e-5, 3e-4}}};
  return c;
}

// Which optional inputs an ssm_scan case passes, and its decays: `extreme` mixes log alpha near 0
// (-1e-6: alpha = 1 - 1e-6) with hard resets (-30 and -150, below the fp32 floor of the chunked
// form) instead of the model's usual range. `qk_fp32`: q and k stay fp32 in the bf16 row, as the M block
// gives them under autocast (ssm_rotary computes in fp32; x and z come from the bf16 projection).
// `strided_pad` >= 0: x (and z) reach the backend as views into one [B, T, 2 H P + pad] buffer (z first,
// then x, then pad unused elements), as the M block hands them over from its input projection: a token
// stride of 2 H P + pad elements (pad 1: rows no longer 16-byte aligned).
struct SsmCaseOptions {
  bool z = false, h0 = false, prev = false, extreme = false, qk_fp32 = false;
  int strided_pad = -1;
};

ParityCase ssm_scan_case(int64_t B, int64_t T, int64_t H, int64_t P, int64_t N, int64_t chunk, SsmCaseOptions o) {
  std::string label = shape_label({{"B", B}, {"T", T}, {"H", H}, {"P", P}, {"N", N}, {"L", chunk}});
  label += std::string(o.z ? "_z" : "") + (o.h0 ? "_h0" : "") + (o.prev ? "_prev" : "") + (o.extreme ? "_extreme" : "") +
           (o.qk_fp32 ? "_qk32" : "") + (o.strided_pad >= 0 ? "_strided" + std::to_string(o.strided_pad) : "");
  const Input absent{Tensor(), Kind::absent, false};
  const auto qk_input = [qk_fp32 = o.qk_fp32](Tensor t) { return qk_fp32 ? fp32_floor(std::move(t)) : floating(std::move(t)); };
  ParityCase c{"ssm_scan", label, kAllDtypes,
               [=](at::Generator& g) {
                 // Delta in (0, ~5), A <= -1e-4 as docs/model.md builds them; beta carries alpha.
                 const auto delta = torch::softplus(random_normal({B, T, H}, g, 2.0) - 2.0);
                 auto log_alpha = -delta * torch::softplus(random_normal({B, T, H}, g)).clamp_min(1e-4);
                 if (o.extreme) {
                   const auto pick = testing::random_uniform({B, T, H}, g, 0, 1);
                   log_alpha = torch::where(pick < 0.45, torch::full_like(log_alpha, -1e-6), log_alpha);
                   log_alpha = torch::where(pick > 0.9, torch::full_like(log_alpha, -30.0), log_alpha);
                   log_alpha = torch::where(pick > 0.97, torch::full_like(log_alpha, -150.0), log_alpha);
                 }
                 const auto lambda = torch::sigmoid(random_normal({B, T, H}, g));
                 // q, k as the block's biased RMSNorm gives them (entries ~1, norm ~ sqrt(N)), scaled so
                 // that q.k stays O(1) like x.
                 const double qk = 1.0 / std::sqrt(std::sqrt(double(N)));
                 return std::vector<Input>{floating(random_normal({B, T, H, P}, g)),
                                           qk_input(random_normal({B, T, H, N}, g, qk)),
                                           qk_input(random_normal({B, T, H, N}, g, qk)),
                                           fp32_floor(log_alpha),
                                           fp32_floor((1 - lambda) * delta * log_alpha.exp()),
                                           fp32_floor(lambda * delta),
                                           fp32_floor(random_normal({H}, g)),
                                           o.z ? floating(random_normal({B, T, H, P}, g, 2.0)) : absent,
                                           o.h0 ? fp32_floor(random_normal({B, H, P, N}, g)) : absent,
                                           o.prev ? fp32_floor(random_normal({B, H, P}, g)) : absent,
                                           o.prev ? fp32_floor(random_normal({B, H, N}, g, qk)) : absent};
               },
               [=](const std::string& name, const std::vector<Tensor>& in) {
                 SsmScanInputs args;
                 args.x = in[0], args.q = in[1], args.k = in[2], args.log_alpha = in[3], args.beta = in[4];
                 args.gamma = in[5], args.D = in[6], args.z = in[7], args.h0 = in[8], args.x_prev = in[9];
                 args.k_prev = in[10], args.chunk = chunk;
                 if (o.strided_pad >= 0) {
                   const auto rows = [&](const Tensor& t) { return t.reshape({B, T, H * P}); };
                   const auto z = in[7].defined() ? in[7] : torch::zeros_like(in[0]);
                   const auto buffer =
                       torch::cat({rows(z), rows(in[0]), torch::zeros({B, T, o.strided_pad}, in[0].options())}, -1);
                   args.x = buffer.narrow(-1, H * P, H * P).view({B, T, H, P});
                   if (in[7].defined()) args.z = buffer.narrow(-1, 0, H * P).view({B, T, H, P});
                   EXPECT_FALSE(args.x.is_contiguous());
                 }
                 auto out = implementations().ssm_scan.at(name)(args);
                 return std::vector<Tensor>{out.y, out.h_last};
               }};
  // fp32: the output and the state (h_last) are sums over a state carried across T/L chunks, and every
  // decay is exp of a difference of chunk-local cumulative log alphas, whose fp32 rounding is ~6e-8
  // times their size (|cum| reaches ~100-400 with resets, where a decay ~1 then loses ~1e-5): the
  // chunked fp32 reference itself measures up to ~1e-5 against fp64 on such inputs (scans_test's
  // kFp32Tol is 3e-5 for the same reason); gradients sum over T outputs, 10x. bf16 inputs: the
  // shared bf16 bound (rounding of x, q, k, z at 4e-3 each, all arithmetic in fp32); with qk_fp32, x
  // and z rounded to bf16, and q, k (fp32) rounded to bf16 as fused_cuda's tensor-core operands: within it.
  c.tolerance = {{torch::kFloat, {3e-5, 3e-4}}};
  return c;
}

// A case without its fp32 row, for a shape past fused_cuda's fp32 path: that path's backward chunk keeps
// fp32 tiles (234,516 bytes of shared memory at P = N = 128, chunk 64, over the H100's 232,448) and
// refuses it with a TORCH_CHECK; the bf16 row (tensor-core path, bf16 tiles) is what the case is for.
ParityCase without_fp32(ParityCase c) {
  std::erase(c.dtypes, torch::kFloat);
  return c;
}

// A long RG-LRU case with extreme decays: T = 2100 fp32-rounded decays and resets summed into each output.
// The chunked LibTorch reference measured 9.4e-6 (h), 3.5e-5 (h_last) and 8.5e-6 (d lambda) against the fp64
// per-timestep definition here (H100, 78db415, 2026-11-26, experiments/results/2026-11-26-h100-s14/), past
// the seam's fp32 bound of 5e-6 sized for T <= 300; fused_cuda stayed within 5e-6. fp32 bounded at 5e-5
// for this case; bf16 keeps the seam's bound.
ParityCase long_extreme_recurrence(ParityCase c) {
  c.tolerance[torch::kFloat] = {5e-5, 5e-5};
  return c;
}

// The causal_conv inputs {x, weight, bias}: x in the run dtype, the parameters fp32 at least (as the R
// block's are). `strided`: x reaches the backend as the second half of a [B, T, 2C] tensor, as the block
// hands it a slice of its input projection (the fused kernel reads it in place).
ParityCase causal_conv_case(int64_t B, int64_t T, int64_t C, int64_t K, bool strided) {
  return {"causal_conv", shape_label({{"B", B}, {"T", T}, {"C", C}, {"K", K}}).append(strided ? "_strided" : ""),
          kAllDtypes,
          [=](at::Generator& g) {
            return std::vector<Input>{floating(random_normal({B, T, C}, g)), fp32_floor(random_normal({C, K}, g, 0.5)),
                                      fp32_floor(random_normal({C}, g))};
          },
          [=](const std::string& name, const std::vector<Tensor>& in) {
            const auto x = strided ? torch::cat({in[0], in[0]}, -1).narrow(-1, C, C) : in[0];
            return std::vector<Tensor>{implementations().causal_conv.at(name)(x, in[1], in[2])};
          }};
}

// The RG-LRU inputs {gate_a, gate_x, u, lambda, h0}. typical: gate logits N(0, 2^2), sigmoid(lambda)
// ~ U[0.9, 0.999] (the block's init). extreme: a quarter of the gate logits at +30 and a quarter at -30
// (sigmoid 1 - 1e-13 and 1e-13: a = 1 to fp32 precision, or the full decay), and lambda cycling through
// 12, -6, 0, 3 (a down to 1 - 5e-5 and to e^-48 ~ 1e-21). The baseline is the per-timestep recurrence
// in fp64 (reference::recurrent_scan_stepwise). Tolerances are the driver's per dtype: fp32 (5e-6):
// each h_t is a sum of decayed terms carried through T steps; with fp32 gates (a few ulp each) the
// emulated kernel arithmetic measured <= 4e-7 on these cases, outputs and gradients (d lambda sums
// over B*T terms). bf16 (3e-2, 5e-2 gradients): the gate logits and u are rounded to bf16 (4e-3) before
// anything else, and the gradients for them are written in bf16; measured <= 3e-3 in emulation.
ParityCase recurrent_scan_case(int64_t B, int64_t T, int64_t W, bool extreme, bool with_h0) {
  std::string label = shape_label({{"B", B}, {"T", T}, {"W", W}});
  label += std::string(extreme ? "_extreme" : "_typical") + (with_h0 ? "_h0" : "");
  return {"recurrent_scan", label, kAllDtypes,
          [=](at::Generator& g) {
            auto gate_a = random_normal({B, T, W}, g, 2.0), gate_x = random_normal({B, T, W}, g, 2.0);
            const auto u = random_normal({B, T, W}, g);
            const auto decay = testing::random_uniform({W}, g, 0.9, 0.999);  // sigmoid(lambda)
            auto lambda = torch::log(decay) - torch::log1p(-decay);
            if (extreme) {
              const auto extremes = [&](const Tensor& logits) {
                const auto pick = torch::randint(4, logits.sizes(), g, torch::kLong);
                return torch::where(pick == 0, 30.0, torch::where(pick == 1, -30.0, logits));
              };
              gate_a = extremes(gate_a);
              gate_x = extremes(gate_x);
              lambda = torch::tensor({12.0, -6.0, 0.0, 3.0}, torch::kDouble).repeat({W / 4 + 1}).narrow(0, 0, W);
            }
            return std::vector<Input>{
                floating(gate_a), floating(gate_x), floating(u), fp32_floor(lambda),
                with_h0 ? fp32_floor(random_normal({B, W}, g)) : Input{Tensor(), Kind::absent, false}};
          },
          [](const std::string& name, const std::vector<Tensor>& in) {
            const auto out = implementations().recurrent_scan.at(name)(
                {.gate_a = in[0], .gate_x = in[1], .u = in[2], .lambda = in[3], .h0 = in[4]});
            return std::vector<Tensor>{out.h, out.h_last};
          },
          [](const std::vector<Tensor>& in) {
            const auto out = reference::recurrent_scan_stepwise(
                {.gate_a = in[0], .gate_x = in[1], .u = in[2], .lambda = in[3], .h0 = in[4]});
            return std::vector<Tensor>{out.h, out.h_last};
          }};
}

// mask_mode: "mixed" (some rows masked out), "all" (every row counts), "none" (every row masked out).
ParityCase loss_case(int64_t N, int64_t d, int64_t V, const std::string& mask_mode) {
  ParityCase c{"loss", shape_label({{"N", N}, {"d", d}, {"V", V}}).append("_mask_").append(mask_mode), kAllDtypes,
          [=](at::Generator& g) {
            Tensor mask = torch::ones({N}, torch::kUInt8);
            if (mask_mode == "none") mask.zero_();
            if (mask_mode == "mixed") {
              mask = (testing::random_uniform({N}, g, 0, 1) > 0.35).to(torch::kUInt8);
              mask[0] = 0;  // at least one masked-out and one counted row
              mask[N - 1] = 1;
            }
            return std::vector<Input>{floating(random_normal({N, d}, g)),
                                      floating(random_normal({V, d}, g, 0.5)),
                                      {torch::randint(V, {N}, g, torch::kLong), Kind::integer, false},
                                      {mask, Kind::mask, false}};
          },
          [](const std::string& name, const std::vector<Tensor>& in) {
            return std::vector<Tensor>{implementations().loss.at(name)(in[0], in[1], in[2], in[3])};
          }};
  c.dims.projection_alignment = std::gcd(std::gcd(N, d), V);
  // The FP8 head (fused_cuda_fp8_rowwise): its three GEMMs round every operand to e4m3 along the GEMM's
  // inner dimension as dense_gemm's fp8_rowwise does, so the same bounds and reasoning (dense_gemm_case):
  // ~0.05 of each GEMM's spread from two e4m3 operands, twice that for the tails and bf16 outputs; the
  // loss itself (a log-sum-exp minus one logit, averaged) errs less than its logits.
  c.changed_numerics = Tolerance{0.1, 0.16};
  return c;
}

// The optimizer seam mutates its state: a case is three AdamW updates (a learning-rate schedule, fresh
// gradients each time) of two parameters of odd shapes starting from a mid-run state (step 4, non-zero
// moments), with a gradient scale (the clipping's) when grad_scale > 0; the outputs are the final
// parameters, moments and step counts (the gradients' values after a scaled call are unspecified).
// Nothing is differentiated.
ParityCase optimizer_case(std::vector<int64_t> shape_a, std::vector<int64_t> shape_b, double grad_scale = 0) {
  constexpr int kUpdates = 3;
  const std::vector<std::vector<int64_t>> shapes = {shape_a, shape_b};
  auto label = shape_label({{"a", shape_a[0]}, {"b", shape_b[0]}});
  if (grad_scale > 0) label += "_scaled";
  return {"optimizer", label, kFp32Dtypes,
          [=](at::Generator& g) {
            std::vector<Input> in;
            for (const auto& shape : shapes) {
              in.push_back({random_normal(shape, g), Kind::floating, false});             // parameter
              in.push_back({random_normal(shape, g, 0.1), Kind::floating, false});        // exp_avg
              in.push_back({random_normal(shape, g, 0.1).abs(), Kind::floating, false});  // exp_avg_sq >= 0
              for (int u = 0; u < kUpdates; ++u) in.push_back({random_normal(shape, g, 0.3), Kind::floating, false});
            }
            return in;
          },
          [=](const std::string& name, const std::vector<Tensor>& in) {
            const size_t per_param = 3 + kUpdates;
            std::vector<Tensor> params, exp_avgs, exp_avg_sqs, steps;
            for (size_t j = 0; j < shapes.size(); ++j) {
              // Cloned: the fp64 reference run receives the case's own tensors (to() does not copy).
              params.push_back(in[j * per_param].clone());
              exp_avgs.push_back(in[j * per_param + 1].clone());
              exp_avg_sqs.push_back(in[j * per_param + 2].clone());
              steps.push_back(torch::full({}, 4.0, in[0].options().dtype(torch::kFloat)));
            }
            const AdamWHyper hyper{0.9, 0.95, 1e-8, 0.1};
            const double schedule[kUpdates] = {1e-2, 3e-2, 2e-2};  // large rates: the update is visible in fp32
            // The contract's fp32 scale in every dtype (2.5: exact in both).
            const auto scale =
                grad_scale > 0 ? torch::full({}, grad_scale, in[0].options().dtype(torch::kFloat)) : Tensor();
            std::vector<Tensor> grads;
            for (int u = 0; u < kUpdates; ++u) {
              grads.clear();
              // Cloned: a scaled update may divide them in place.
              for (size_t j = 0; j < shapes.size(); ++j) grads.push_back(in[j * per_param + 3 + u].clone());
              const auto lr = torch::full({}, schedule[u], in[0].options().dtype(torch::kFloat));
              implementations().optimizer.at(name)(params, grads, exp_avgs, exp_avg_sqs, steps, lr, scale, hyper, {});
            }
            std::vector<Tensor> out;
            for (size_t j = 0; j < shapes.size(); ++j)
              out.insert(out.end(), {params[j], exp_avgs[j], exp_avg_sqs[j], steps[j].to(params[j].scalar_type())});
            return out;
          }};
}

// Odd shapes: widths that are not powers of two, single rows and single steps, masked rows.
const std::vector<ParityCase>& parity_cases() {
  static const std::vector<ParityCase> cases = {
      // dense_gemm: multiples of 16 (what FP8 GEMMs take: the FP8 rows run), a 64-wide tile's tail in
      // every dimension of the quantisation (80, 48, 208), and odd widths (the FP8 rows skip themselves
      // with the catalog's reason).
      dense_gemm_case(2, 48, 128, 80, false),
      dense_gemm_case(1, 208, 80, 48, true),
      dense_gemm_case(3, 7, 37, 23, true),
      attention_case(2, 3, 7, 20, 12),
      attention_case(1, 1, 1, 24, 16),
      attention_case(1, 2, 33, 96, 64),
      rope_case(2, 5, 3, 6, 10),
      rope_case(1, 1, 1, 0, 2),
      rope_case(2, 3, 4, 64, 32),  // nam56r-small's head dims: the fused kernel's vectorised path
      residual_norm_case(3, 5, 37, true),
      residual_norm_case(1, 1, 19, false),
      residual_norm_case(2, 3, 1000, true),    // 8 * 125: vectorised, not a power of two
      residual_norm_case(1, 1, 16384, true),   // the widest row the contract allows, one row
      residual_norm_case(4, 2, 1024, false),   // nam56r-small's width, first layer (no branch)
      swiglu_case(7, 45),
      swiglu_case(1, 3),
      swiglu_case(3, 1000),
      swiglu_case(1, 16384),
      // moe_router: fused_cuda gives a warp 64 / EMAX tokens (EMAX = E rounded up to 16, 32, 64) and reads
      // x in 16-byte words when d allows; dW sums blocks of 512 tokens.
      moe_router_case(37, 24, 8, 2),     // a partial last warp; padded experts; 16-byte words (bf16 and fp32)
      moe_router_case(1, 20, 5, 1),      // one token; d 20: bf16 element-wise, fp32 in words
      moe_router_case(33, 40, 24, 3),    // EMAX 32
      moe_router_case(9, 16, 64, 4),     // EMAX 64: one token a warp
      moe_router_case(600, 32, 16, 2),   // nam56r-small's E and k; two dW token blocks
      moe_router_case(130, 1000, 16, 2), // a wide d: four column rounds a lane, eight dW column blocks
      moe_case(13, 10, 5, 2, 6, 0.0),
      moe_case(13, 10, 5, 2, 6, 0.6),
      moe_case(1, 7, 3, 1, 5, 0.0),
      moe_case(40, 16, 4, 2, 24, 0.0),  // d, f multiples of 8: grouped_mm without padding; uneven loads
      moe_case(96, 64, 8, 2, 40, 0.0),  // grouped_mm's fused passes on 16-byte accesses (d, f multiples of 8)
      moe_case(96, 64, 8, 2, 40, 1.0),  // the same with a capacity: dropped slots weighted 0
      // d, f multiples of 16: the FP8 row runs (the cases above skip it with the catalog's reason); token
      // groups that cross the quantisation's 64-row tiles; nam56r's 16 experts, top 2.
      moe_case(96, 64, 8, 2, 48, 0.0),
      moe_case(96, 64, 8, 2, 48, 1.0),
      moe_case(150, 128, 16, 2, 96, 0.0),
      // ssm_rotary: the fused kernel's block is (N/2 pairs) x (head lanes, 256 / (N/2) of them): heads
      // spread unevenly over lanes, pass-through dims (2S < N) and none (2S == N), one token.
      ssm_rotary_case(2, 37, 3, 16, 4, false),
      ssm_rotary_case(1, 1, 1, 8, 2, true),
      ssm_rotary_case(2, 150, 6, 128, 32, true),  // nam56r-small's N and S; 6 heads over 4 lanes
      ssm_rotary_case(1, 20, 5, 12, 6, false),     // 2S == N
      ssm_rotary_case(1, 9, 33, 6, 1, true),       // more heads than a warp, 3 pairs a row
      ssm_rotary_case(2, 150, 6, 128, 32, true, true),  // q, k in bf16 (the M block under autocast)
      ssm_rotary_case(1, 20, 5, 12, 6, false, true),
      // fused_cuda's backward splits the heads into groups of 8 lanes x 4 at N 128: two groups, the second
      // partly filled, and nam56r-large's 128 heads (four groups) with q, k in bf16.
      ssm_rotary_case(2, 24, 40, 128, 32, true),
      ssm_rotary_case(1, 16, 128, 128, 32, false, true),
      // More rows than the forward's and the angle gradients' grids (16 blocks an SM on 132 SMs): blocks
      // walk several rows. 260 heads at S 32: 34 KB of shared memory a row in the angle-gradient pass,
      // 17 head steps a row in the forward, 9 head groups in the backward.
      ssm_rotary_case(2, 1100, 3, 16, 4, true, true),
      ssm_rotary_case(1, 5, 260, 128, 32, true),
      // ssm_scan: P and N multiples of 16 (the fused kernel's contract), T not a multiple of the chunk,
      // one token, several chunks at nam56r-small's P 64 / N 128, every optional input alone and together.
      ssm_scan_case(2, 75, 3, 16, 16, 16, {}),
      ssm_scan_case(1, 1, 1, 16, 32, 64, {.z = true, .h0 = true, .prev = true}),
      ssm_scan_case(2, 150, 2, 64, 128, 64, {.z = true, .h0 = true, .prev = true}),
      ssm_scan_case(2, 50, 2, 32, 16, 32, {.z = true}),
      ssm_scan_case(1, 40, 2, 48, 80, 16, {.h0 = true}),
      ssm_scan_case(2, 37, 2, 16, 32, 16, {.prev = true}),
      ssm_scan_case(2, 100, 2, 16, 16, 16, {.z = true, .h0 = true, .prev = true, .extreme = true}),
      ssm_scan_case(1, 130, 2, 64, 128, 64, {.extreme = true}),
      // The model's autocast mix (bf16 x, z; fp32 q, k): fused_cuda's tensor-core path with fp32 q/k tiles.
      ssm_scan_case(2, 150, 2, 64, 128, 64, {.z = true, .h0 = true, .prev = true, .qk_fp32 = true}),
      ssm_scan_case(2, 75, 3, 16, 16, 16, {.z = true, .qk_fp32 = true}),
      // x and z as views into the input projection (the M block's layout), aligned and not.
      ssm_scan_case(2, 150, 2, 64, 128, 64, {.z = true, .h0 = true, .prev = true, .qk_fp32 = true, .strided_pad = 8}),
      ssm_scan_case(2, 75, 3, 16, 16, 16, {.z = true, .strided_pad = 1}),
      ssm_scan_case(1, 40, 2, 48, 80, 16, {.h0 = true, .strided_pad = 0}),
      // fused_cuda's tensor-core tiling: chunk 48 (3 x 3 score blocks, N 48 = one and a half warps of
      // column-0 outputs), N 16 under P 128 (one 16-wide block), and P = N = 128 at chunk 64 (the largest
      // shared-memory layout; bf16 only, see without_fp32).
      ssm_scan_case(2, 100, 2, 32, 48, 48, {.z = true, .h0 = true}),
      ssm_scan_case(1, 70, 2, 128, 16, 32, {.z = true, .prev = true}),
      without_fp32(ssm_scan_case(1, 130, 1, 128, 128, 64, {.h0 = true, .prev = true, .qk_fp32 = true})),
      // The tensor-core state scans walk P in slices of 64 rows: P 80 is a full slice and a 16-row one.
      ssm_scan_case(2, 70, 2, 80, 32, 32, {.z = true, .h0 = true, .prev = true}),
      // causal_conv: fused_cuda walks tiles of 32 steps, 4 channels a thread when C and the strides allow
      // (else 1), with the K-1 steps before a tile in registers.
      causal_conv_case(2, 37, 8, 4, false),  // a tile and a tail, 4 channels a thread
      causal_conv_case(1, 1, 6, 4, false),   // one token, C not a multiple of 4
      causal_conv_case(2, 70, 16, 4, true),  // a slice of a wider row, as the R block passes it
      causal_conv_case(2, 33, 12, 3, true),  // 3 taps
      causal_conv_case(1, 5, 4, 1, false),   // one tap: no history
      // The fused kernel scans chunks of 16 steps, 4 channels a thread when W % 4 == 0, else 2 when W
      // is even, else 1.
      recurrent_scan_case(2, 13, 9, false, true),     // T < one chunk, W odd
      recurrent_scan_case(1, 1, 3, false, false),     // one token
      recurrent_scan_case(2, 1, 8, true, true),       // one token, vectorised, from h0
      recurrent_scan_case(2, 37, 12, true, true),     // two chunks and a tail, extreme decays
      recurrent_scan_case(3, 50, 20, true, false),    // extreme decays without h0
      recurrent_scan_case(2, 100, 18, false, false),  // seven chunks, the last partial; 2 channels a thread
      recurrent_scan_case(1, 300, 8, false, true),    // 19 chunks of carry
      // 132 chunks: the carry's 16 runs of 9 (the last of 6) composed, then chained.
      recurrent_scan_case(2, 2100, 8, false, true),
      long_extreme_recurrence(recurrent_scan_case(1, 2100, 6, true, true)),
      loss_case(11, 9, 37, "mixed"),
      loss_case(1, 5, 23, "all"),
      loss_case(4, 6, 29, "none"),
      loss_case(37, 24, 1000, "mixed"),  // V a multiple of 8: the fused kernel's vectorised rows
      loss_case(64, 48, 80, "mixed"),    // multiples of 16: the FP8 head runs (the others skip it with the reason)
      loss_case(32, 16, 1024, "none"),   // every row masked out: zero loss and gradients through the FP8 scales
      optimizer_case({7, 5}, {13}),
      optimizer_case({1}, {64, 33}),      // a single element; a matrix the multi-tensor kernel splits
      optimizer_case({7, 5}, {64, 33}, 2.5),  // the clipping's gradient scale folded into the update
  };
  return cases;
}

// Bounds on relative error (max |diff| / max |reference|) by the dtype the backend ran in.
Tolerance tolerance_for(torch::ScalarType dtype) {
  switch (dtype) {
    // fp64 vs fp64: the same math in a different order; only rounding at 1e-16 differs.
    case torch::kDouble:
      return {1e-10, 1e-10};
    // fp32: 24-bit mantissa (6e-8) grown by reductions of up to ~100 terms and by exp/log
    // (observed up to 6e-7 on these cases). The fused CUDA kernels sum a row of up to 16384 squares
    // (and <dy * w, s> in backward) as per-thread runs plus a butterfly: error ~ log2(d) * 6e-8
    // relative, inside this bound.
    case torch::kFloat:
      return {5e-6, 5e-6};
    // bf16: inputs and outputs rounded to an 8-bit mantissa (4e-3 each) before any arithmetic
    // (observed up to 9e-3 on values, 2e-2 on gradients through the three MoE matmuls). Fused
    // kernels compute in fp32 and round each output once, so they sit inside the same bound.
    default:
      return {3e-2, 5e-2};
  }
}

struct RowUnderTest {
  std::string seam, backend;
  size_t case_index;
  torch::ScalarType dtype;
};

std::string dtype_name(torch::ScalarType t) {
  return t == torch::kDouble ? "fp64" : t == torch::kFloat ? "fp32" : "bf16";
}

// fp64 runs only for rows built from LibTorch ops, i.e. with no CUPTI kernel patterns of their own
// (vendor and custom CUDA kernels have no fp64 path);
// the reference in fp64 is the baseline itself, so it runs in the narrower dtypes only.
bool runs_in(const BackendInfo& row, torch::ScalarType dtype) {
  if (dtype != torch::kDouble) return true;
  return row.role != Role::reference && row.kernel_patterns.empty();
}

std::vector<RowUnderTest> rows_under_test() {
  std::vector<RowUnderTest> rows;
  const auto& cases = parity_cases();
  for (const auto& row : catalog())
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].seam != row.seam) continue;
      for (const auto dtype : cases[i].dtypes)
        if (runs_in(row, dtype)) rows.push_back({row.seam, row.name, i, dtype});
    }
  return rows;
}

struct Evaluation {
  std::vector<Tensor> outputs, leaves;
};

Evaluation evaluate(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& run,
                    const std::vector<Input>& inputs, torch::ScalarType dtype, const torch::Device& device) {
  Evaluation e;
  std::vector<Tensor> args;
  for (const auto& in : inputs) {
    Tensor t;
    switch (in.kind) {
      case Kind::floating:
        t = in.value.to(device, dtype);
        break;
      case Kind::fp32_floor:
        t = in.value.to(device, at::promote_types(dtype, torch::kFloat));
        break;
      case Kind::integer:
      case Kind::mask:
        t = in.value.to(device);
        break;
      case Kind::absent:
        break;
    }
    if (in.differentiable) {
      t = t.detach().requires_grad_(true);
      e.leaves.push_back(t);
    }
    args.push_back(t);
  }
  e.outputs = run(args);
  return e;
}

// Backward of sum_i <output_i, projection_i> over the floating outputs; gradients as fp64 on the CPU.
std::vector<Tensor> gradients(const Evaluation& e, const std::vector<Tensor>& projections) {
  if (e.leaves.empty()) return {};  // a seam without differentiable inputs (the optimizer)
  Tensor scalar = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < e.outputs.size(); ++i)
    if (e.outputs[i].is_floating_point())
      scalar = scalar + (e.outputs[i].to(torch::kCPU, torch::kDouble) * projections[i]).sum();
  const auto grads = torch::autograd::grad({scalar}, e.leaves, {}, false, false, /*allow_unused=*/true);
  std::vector<Tensor> out;
  for (size_t i = 0; i < grads.size(); ++i)
    out.push_back(grads[i].defined() ? grads[i].to(torch::kCPU, torch::kDouble)
                                     : torch::zeros_like(e.leaves[i], torch::kDouble).cpu());
  return out;
}

// What gtest prints for a failing row.
void PrintTo(const RowUnderTest& row, std::ostream* os) {
  *os << row.seam << "/" << row.backend << " on " << parity_cases()[row.case_index].label << " in "
      << dtype_name(row.dtype);
}

class Parity : public ::testing::TestWithParam<RowUnderTest> {};

TEST_P(Parity, ForwardAndBackwardMatchTheReference) {
  const auto& p = GetParam();
  const auto& c = parity_cases()[p.case_index];
  const auto* row = find_backend(p.seam, p.backend);
  ASSERT_NE(row, nullptr);
  const torch::Device device =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  auto device_info = describe_device(device, p.dtype);
  device_info.model = c.dims;
  if (const auto why = why_unavailable(*row, device_info); !why.empty())
    GTEST_SKIP() << p.seam << "/" << p.backend << " unavailable on this machine: " << why;

  auto gen = seeded_generator(std::hash<std::string>{}(c.seam + c.label));
  const auto inputs = c.make_inputs(gen);
  const auto backend = [&](const std::string& name) {
    return [&c, name](const std::vector<Tensor>& args) { return c.run(name, args); };
  };
  const auto expected =
      evaluate(c.definition ? c.definition : backend("reference"), inputs, torch::kDouble, torch::kCPU);
  std::vector<Tensor> projections;
  for (const auto& out : expected.outputs)
    projections.push_back(out.is_floating_point() ? random_normal(out.sizes(), gen) : Tensor());
  const auto expected_grads = gradients(expected, projections);

  const auto actual = evaluate(backend(p.backend), inputs, p.dtype, device);
  ASSERT_EQ(actual.outputs.size(), expected.outputs.size());
  const auto override_tol = c.tolerance.find(p.dtype);
  auto tol = override_tol != c.tolerance.end() ? override_tol->second : tolerance_for(p.dtype);
  if (row->changes_numerics) {
    ASSERT_TRUE(c.changed_numerics.has_value())
        << p.seam << "/" << p.backend << " changes the numerics: its case needs changed_numerics bounds";
    tol = *c.changed_numerics;
  }
  for (size_t i = 0; i < expected.outputs.size(); ++i) {
    const auto& want = expected.outputs[i];
    const auto got = actual.outputs[i];
    ASSERT_EQ(got.sizes(), want.sizes()) << "output " << i;
    ASSERT_EQ(got.device().type(), device.type()) << "output " << i << " left the device";
    if (!want.is_floating_point()) {
      EXPECT_TRUE(torch::equal(got.cpu(), want)) << "output " << i << ": " << got << " vs " << want;
      continue;
    }
    EXPECT_TRUE(torch::isfinite(got).all().item<bool>()) << "output " << i;
    const double error = relative_error(got, want);
    RecordProperty("output" + std::to_string(i) + "_relative_error", std::to_string(error));  // --gtest_output
    EXPECT_LE(error, tol.value) << "output " << i;
  }
  const auto grads = gradients(actual, projections);
  ASSERT_EQ(grads.size(), expected_grads.size());
  // Some gradients vanish by construction (q and k of attention over one position): measure every
  // gradient against the largest reference gradient of the case, not against its own zero.
  double gradient_scale = 0.0;
  for (const auto& g : expected_grads)
    if (g.numel() > 0) gradient_scale = std::max(gradient_scale, g.abs().max().item<double>());
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_TRUE(torch::isfinite(grads[i]).all().item<bool>()) << "gradient of input " << i;
    const double error = relative_error(grads[i], expected_grads[i], gradient_scale);
    RecordProperty("gradient" + std::to_string(i) + "_relative_error", std::to_string(error));
    EXPECT_LE(error, tol.gradient) << "gradient of input " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Catalog, Parity, ::testing::ValuesIn(rows_under_test()),
                         [](const ::testing::TestParamInfo<RowUnderTest>& info) {
                           const auto& p = info.param;
                           return p.seam + "_" + p.backend + "_" + parity_cases()[p.case_index].label + "_" +
                                  dtype_name(p.dtype);
                         });

TEST(ParityCoverage, EverySeamHasCasesAndEveryRowRuns) {
  for (const auto& seam : seams()) {
    bool has_case = false;
    for (const auto& c : parity_cases()) has_case = has_case || c.seam == seam;
    EXPECT_TRUE(has_case) << "seam " << seam << " has no parity case";
  }
  for (const auto& row : catalog()) {
    bool covered = false;
    for (const auto& r : rows_under_test()) covered = covered || (r.seam == row.seam && r.backend == row.name);
    EXPECT_TRUE(covered) << row.seam << "/" << row.name << " has no parity row";
  }
}

// The chunked loss over several chunks (the registry entry picks one chunk at these sizes):
// chunk boundaries inside the rows, a last partial chunk, masked rows.
TEST(ParityChunkedLoss, ManySmallChunksMatchTheFullLogits) {
  auto gen = seeded_generator(7);
  const auto hidden = random_normal({10, 6}, gen).requires_grad_(true);
  const auto weight = random_normal({31, 6}, gen, 0.5).requires_grad_(true);
  const auto targets = torch::randint(31, {10}, gen, torch::kLong);
  const auto mask = (testing::random_uniform({10}, gen, 0, 1) > 0.3).to(torch::kFloat);
  const auto expected = implementations().loss.at("reference")(hidden, weight, targets, mask);
  const auto [gh_want, gw_want] = [&] {
    auto g = torch::autograd::grad({expected}, {hidden, weight});
    return std::pair{g[0], g[1]};
  }();
  for (const int64_t chunk : {1, 3, 4, 10, 64}) {
    const auto got = loss_chunked(hidden, weight, targets, mask, chunk);
    const auto g = torch::autograd::grad({got}, {hidden, weight});
    EXPECT_LE(relative_error(got, expected), 1e-12) << "chunk " << chunk;  // fp64, same math
    EXPECT_LE(relative_error(g[0], gh_want), 1e-12) << "chunk " << chunk;
    EXPECT_LE(relative_error(g[1], gw_want), 1e-12) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace ablate::kernels
