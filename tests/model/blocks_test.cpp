// tests/model/blocks_test.cpp: every block of the hybrid model (model/blocks.h) on its reference
// seams against a slow, obviously-correct form written here from docs/model.md (explicit loops over
// tokens, heads and time steps, in fp64), gradients of every block by central differences in fp64,
// and the initialisation ranges docs/model.md fixes.
// Run: build/tests/model_tests --gtest_filter='Block*'
#include "kernels/registry.h"
#include "model/blocks.h"

#include <ATen/CPUGeneratorImpl.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "base/rng.h"
#include "tests/kernels/tensor_checks.h"

namespace ablate::model {
namespace {

using testing::random_normal;
using testing::relative_error;
using testing::seeded_generator;
using torch::Tensor;

// fp64 vs a slow loop in fp64: the same math summed in another order.
constexpr double kFp64Tolerance = 1e-10;
// Central differences at h = 1e-6 in fp64 are good to about 1e-8 on these smooth functions.
constexpr double kGradientTolerance = 1e-6;

// Small odd sizes: nothing is a power of two where docs/model.md allows it.
ModelConfig small_config() {
  ModelConfig c;
  c.d_model = 12;
  c.attention = {.heads = 2, .nope_dim = 4, .rope_dim = 6, .v_dim = 5, .q_lora = 7, .kv_lora = 9};
  c.moe = {.experts = 5, .top_k = 2, .ffn = 6};
  c.mamba = {.expand = 2, .head_dim = 8, .state = 8, .chunk = 4};  // d_inner 24, H 3, N 8, S 2
  c.recurrent = {.width = 10};
  c.dense = {.ffn = 7};
  return c;
}

constexpr int64_t kBatch = 2, kSteps = 6;

std::shared_ptr<const kernels::Dispatcher> reference_seams() { return std::make_shared<const kernels::Dispatcher>(); }

// A block in fp64 with weights large enough (std 0.3) that every term of the output matters.
template <typename B>
std::shared_ptr<B> make_fp64(const ModelConfig& c, uint64_t seed = 11) {
  SeededInit init(seed, 0.3);
  auto block = std::make_shared<B>(c, reference_seams(), init);
  block->to(torch::kDouble);
  return block;
}

// The elementary functions written out (named apart from torch's, which ADL would also find).
Tensor rms_normalize(const Tensor& v, double eps) { return v / std::sqrt((v * v).mean().item<double>() + eps); }
Tensor silu_of(const Tensor& v) { return v / (1 + torch::exp(-v)); }
Tensor softplus_of(const Tensor& v) { return torch::log1p(torch::exp(v)); }
Tensor sigmoid_of(const Tensor& v) { return 1 / (1 + torch::exp(-v)); }

// Rotates adjacent pairs (v[2i], v[2i+1]) for i < angle.size(0) by angle[i]; the rest passes through.
Tensor rotate_pairs(Tensor v, const Tensor& angle) {
  v = v.clone();
  for (int64_t i = 0; i < angle.size(0); ++i) {
    const double c = std::cos(angle[i].item<double>()), s = std::sin(angle[i].item<double>());
    const double a = v[2 * i].item<double>(), b = v[2 * i + 1].item<double>();
    v[2 * i] = a * c - b * s;
    v[2 * i + 1] = a * s + b * c;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// A: MLA against an explicit per-head softmax loop.
Tensor slow_attention(const AttentionBlock& blk, const ModelConfig& c, const Tensor& x) {
  const auto& a = c.attention;
  const int64_t H = a.heads, dn = a.nope_dim, dr = a.rope_dim, dv = a.v_dim, qk = dn + dr;
  auto out = torch::zeros({x.size(0), x.size(1), c.d_model}, torch::kDouble);
  for (int64_t b = 0; b < x.size(0); ++b) {
    std::vector<std::vector<Tensor>> q(H), k(H), v(H);  // [head][t] vectors
    for (int64_t t = 0; t < x.size(1); ++t) {
      const auto xt = x[b][t];
      const auto qt = a.q_lora > 0
                          ? torch::mv(blk.w_uq, rms_normalize(torch::mv(blk.w_dq, xt), c.norm_eps) * blk.q_norm)
                          : torch::mv(blk.w_q, xt);
      const auto down = torch::mv(blk.w_dkv, xt);
      const auto kv = torch::mv(blk.w_ukv, rms_normalize(down.narrow(0, 0, a.kv_lora), c.norm_eps) * blk.kv_norm);
      auto angle = torch::empty({dr / 2}, torch::kDouble);
      for (int64_t i = 0; i < dr / 2; ++i) angle[i] = double(t) * std::pow(a.rope_base, -2.0 * double(i) / double(dr));
      const auto k_rope = rotate_pairs(down.narrow(0, a.kv_lora, dr), angle);
      for (int64_t h = 0; h < H; ++h) {
        const auto qh = qt.narrow(0, h * qk, qk);
        q[h].push_back(torch::cat({qh.narrow(0, 0, dn), rotate_pairs(qh.narrow(0, dn, dr), angle)}));
        const auto kvh = kv.narrow(0, h * (dn + dv), dn + dv);
        k[h].push_back(torch::cat({kvh.narrow(0, 0, dn), k_rope}));
        v[h].push_back(kvh.narrow(0, dn, dv));
      }
    }
    for (int64_t t = 0; t < x.size(1); ++t) {
      std::vector<Tensor> heads;
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> score;
        for (int64_t s = 0; s <= t; ++s)
          score.push_back(torch::dot(q[h][t], k[h][s]).item<double>() / std::sqrt(double(qk)));
        const double top = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (auto& e : score) total += (e = std::exp(e - top));
        auto o = torch::zeros({dv}, torch::kDouble);
        for (int64_t s = 0; s <= t; ++s) o += score[s] / total * v[h][s];
        heads.push_back(o);
      }
      out[b][t] = torch::mv(blk.w_o, torch::cat(heads));
    }
  }
  return out;
}

TEST(BlockAttention, MatchesAnExplicitPerHeadSoftmaxLoop) {
  for (const int64_t q_lora : {7, 0}) {  // low-rank q and the plain q = W_q x
    auto c = small_config();
    c.attention.q_lora = q_lora;
    auto blk = make_fp64<AttentionBlock>(c);
    auto gen = seeded_generator(1);
    const auto x = random_normal({kBatch, kSteps, c.d_model}, gen);
    torch::NoGradGuard no_grad;
    EXPECT_LE(relative_error(blk->forward(x).y, slow_attention(*blk, c, x)), kFp64Tolerance) << "q_lora " << q_lora;
  }
}

// ---------------------------------------------------------------------------------------------
// E: MoE against a loop over tokens (router, top-k, renormalised weights, experts, capacity, L_aux).
struct SlowMoe {
  Tensor y, aux;
  int64_t dropped = 0;
};

SlowMoe slow_moe(const MoeBlock& blk, const ModelConfig& c, const Tensor& x) {
  const auto& e = c.moe;
  const int64_t tokens = x.size(0) * x.size(1);
  const auto flat = x.reshape({tokens, c.d_model});
  const int64_t capacity =
      e.capacity_factor > 0 ? int64_t(std::ceil(e.capacity_factor * tokens * e.top_k / e.experts)) : tokens * e.top_k;
  std::vector<int64_t> used(e.experts, 0), assigned(e.experts, 0);
  auto prob_sum = torch::zeros({e.experts}, torch::kDouble);
  SlowMoe r;
  r.y = torch::zeros({tokens, c.d_model}, torch::kDouble);
  for (int64_t t = 0; t < tokens; ++t) {
    const auto logits = torch::mv(blk.router, flat[t]);
    const auto p = torch::exp(logits - logits.max()) / torch::exp(logits - logits.max()).sum();
    prob_sum += p;
    std::vector<int64_t> order(e.experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t i, int64_t j) { return p[i].item<double>() > p[j].item<double>(); });
    double kept_mass = 0;
    for (int64_t j = 0; j < e.top_k; ++j) kept_mass += p[order[j]].item<double>();
    for (int64_t j = 0; j < e.top_k; ++j) {
      const int64_t ex = order[j];
      ++assigned[ex];
      if (used[ex] >= capacity) {  // over capacity: this slot contributes 0
        ++r.dropped;
        continue;
      }
      ++used[ex];
      const auto hidden = silu_of(torch::mv(blk.w1[ex], flat[t])) * torch::mv(blk.w3[ex], flat[t]);
      r.y[t] += p[order[j]].item<double>() / kept_mass * torch::mv(blk.w2[ex], hidden);
    }
  }
  double aux = 0;
  for (int64_t ex = 0; ex < e.experts; ++ex)
    aux += double(assigned[ex]) / double(tokens * e.top_k) * prob_sum[ex].item<double>() / double(tokens);
  r.aux = torch::tensor(double(e.experts) * aux, torch::kDouble);
  r.y = r.y.view(x.sizes());
  return r;
}

TEST(BlockMoe, DroplessMatchesALoopOverTokens) {
  const auto c = small_config();
  auto blk = make_fp64<MoeBlock>(c);
  auto gen = seeded_generator(2);
  const auto x = random_normal({kBatch, kSteps, c.d_model}, gen);
  torch::NoGradGuard no_grad;
  const auto got = blk->forward(x);
  const auto want = slow_moe(*blk, c, x);
  EXPECT_LE(relative_error(got.y, want.y), kFp64Tolerance);
  EXPECT_LE(relative_error(got.aux, want.aux), kFp64Tolerance);
  EXPECT_EQ(want.dropped, 0);
  EXPECT_EQ(got.dropped.item<int64_t>(), 0);
  EXPECT_EQ(got.dropped.scalar_type(), torch::kLong);
}

TEST(BlockMoe, CapacityDropsTheLatestSlotsAndCountsThem) {
  auto c = small_config();
  c.moe.capacity_factor = 0.5;  // capacity ceil(0.5 * 12 * 2 / 5) = 3 slots per expert for 24 slots
  auto blk = make_fp64<MoeBlock>(c);
  auto gen = seeded_generator(3);
  const auto x = random_normal({kBatch, kSteps, c.d_model}, gen);
  torch::NoGradGuard no_grad;
  const auto got = blk->forward(x);
  const auto want = slow_moe(*blk, c, x);
  ASSERT_GE(want.dropped, 24 - 5 * 3);  // at most 15 of the 24 slots fit
  EXPECT_EQ(got.dropped.item<int64_t>(), want.dropped);
  EXPECT_LE(relative_error(got.y, want.y), kFp64Tolerance);
  EXPECT_LE(relative_error(got.aux, want.aux), kFp64Tolerance);
}

// ---------------------------------------------------------------------------------------------
// D: dense SwiGLU against the per-token formula.
TEST(BlockDense, MatchesThePerTokenFormula) {
  const auto c = small_config();
  auto blk = make_fp64<DenseBlock>(c);
  auto gen = seeded_generator(4);
  const auto x = random_normal({kBatch, kSteps, c.d_model}, gen);
  torch::NoGradGuard no_grad;
  auto want = torch::zeros_like(x);
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < kSteps; ++t)
      want[b][t] = torch::mv(blk->w2, silu_of(torch::mv(blk->w1, x[b][t])) * torch::mv(blk->w3, x[b][t]));
  EXPECT_LE(relative_error(blk->forward(x).y, want), kFp64Tolerance);
}

// ---------------------------------------------------------------------------------------------
// M: Mamba-3 SISO against the per-timestep recurrence of docs/model.md.
Tensor slow_mamba(const MambaBlock& blk, const ModelConfig& c, const Tensor& u) {
  const int64_t di = blk.d_inner, H = blk.heads, P = blk.head_dim, N = blk.state, S = blk.angles;
  auto out = torch::zeros({u.size(0), u.size(1), c.d_model}, torch::kDouble);
  for (int64_t b = 0; b < u.size(0); ++b) {
    std::vector<Tensor> state(H, torch::zeros({P, N}, torch::kDouble)), phi(H, torch::zeros({S}, torch::kDouble));
    std::vector<Tensor> prev_x(H), prev_k(H);
    for (int64_t t = 0; t < u.size(1); ++t) {
      const auto proj = torch::mv(blk.w_in, u[b][t]);
      int64_t at = 0;
      auto take = [&](int64_t n) {
        auto v = proj.narrow(0, at, n);
        at += n;
        return v;
      };
      const auto z = take(di), x = take(di), braw = take(N), craw = take(N), dd_dt = take(H), dd_a = take(H),
                 trap = take(H), theta = take(S);
      const auto b_normed = rms_normalize(braw, 1e-5) * blk.b_norm, c_normed = rms_normalize(craw, 1e-5) * blk.c_norm;
      auto y = torch::zeros({di}, torch::kDouble);
      for (int64_t h = 0; h < H; ++h) {
        const double delta = softplus_of(dd_dt[h] + blk.dt_bias[h]).item<double>();
        const double decay = std::min(-softplus_of(dd_a[h]).item<double>(), -1e-4);
        const double lambda = sigmoid_of(trap[h]).item<double>();
        phi[h] = phi[h] + delta * std::numbers::pi * torch::tanh(theta);
        const auto k = rotate_pairs(b_normed + blk.b_bias[h], phi[h]);
        const auto q = rotate_pairs(c_normed + blk.c_bias[h], phi[h]);
        const auto xh = x.narrow(0, h * P, P);
        const double alpha = std::exp(delta * decay);
        state[h] = alpha * state[h] + lambda * delta * torch::outer(xh, k);
        if (t > 0) state[h] = state[h] + (1 - lambda) * delta * alpha * torch::outer(prev_x[h], prev_k[h]);
        y.narrow(0, h * P, P).copy_(torch::mv(state[h], q) + blk.skip[h] * xh);
        prev_x[h] = xh;
        prev_k[h] = k;
      }
      out[b][t] = torch::mv(blk.w_out, y * silu_of(z));
    }
  }
  return out;
}

TEST(BlockMamba, MatchesThePerTimestepRecurrence) {
  const auto c = small_config();
  auto blk = make_fp64<MambaBlock>(c);
  auto gen = seeded_generator(5);
  const auto x = random_normal({kBatch, kSteps + 3, c.d_model}, gen);  // 9 steps: two chunks of 4 and a partial one
  torch::NoGradGuard no_grad;
  EXPECT_LE(relative_error(blk->forward(x).y, slow_mamba(*blk, c, x)), kFp64Tolerance);
}

// The block with `seam` = fused_cuda against the same block on the reference seam, on CUDA in fp32, for
// each config `configure(c, variant)` gives: output and every parameter gradient. Both sides compute in
// fp32 over 40 steps: 1e-5 on the output, 1e-4 on gradients (sums over batch and time). GPU only (the
// caller skips elsewhere).
template <typename Block, typename Configure>
void expect_fused_block_matches_reference(const std::string& seam, const std::vector<int64_t>& variants,
                                          Configure configure, uint64_t seed) {
  const torch::Device cuda(torch::kCUDA, 0);
  const auto fused_seams = std::make_shared<const kernels::Dispatcher>(
      std::map<std::string, std::string>{{seam, "fused_cuda"}}, kernels::describe_device(cuda, torch::kFloat),
      /*strict=*/true);
  for (const int64_t variant : variants) {
    auto c = small_config();
    configure(c, variant);
    SeededInit init_reference(seed, 0.3), init_fused(seed, 0.3);
    Block reference(c, reference_seams(), init_reference), fused(c, fused_seams, init_fused);
    reference.to(cuda);
    fused.to(cuda);
    auto gen = seeded_generator(seed + 1);
    const auto x = random_normal({kBatch, 40, c.d_model}, gen, 1.0, torch::kFloat, cuda);
    const auto projection = random_normal({kBatch, 40, c.d_model}, gen, 1.0, torch::kFloat, cuda);
    const auto y_reference = reference.forward(x).y, y_fused = fused.forward(x).y;
    EXPECT_LE(relative_error(y_fused, y_reference), 1e-5) << seam << " variant " << variant;
    // allow_unused: the pre-norm weight is not used by forward(); any other parameter without a gradient is
    // named below instead of aborting the test.
    const auto g_reference = torch::autograd::grad({(y_reference * projection).sum()}, reference.parameters(), {},
                                                   /*retain_graph=*/std::nullopt, /*create_graph=*/false,
                                                   /*allow_unused=*/true);
    const auto g_fused = torch::autograd::grad({(y_fused * projection).sum()}, fused.parameters(), {},
                                               /*retain_graph=*/std::nullopt, /*create_graph=*/false,
                                               /*allow_unused=*/true);
    const auto names = fused.named_parameters().keys();
    ASSERT_EQ(g_fused.size(), g_reference.size());
    for (size_t i = 0; i < g_fused.size(); ++i) {
      // `norm` is the block's pre-norm weight, applied by the model's residual_norm seam, not by forward().
      if (names[i] == "norm") continue;
      ASSERT_TRUE(g_reference[i].defined()) << "reference: no gradient reaches " << names[i] << ", variant " << variant;
      ASSERT_TRUE(g_fused[i].defined()) << seam << ": no gradient reaches " << names[i] << ", variant " << variant;
      EXPECT_LE(relative_error(g_fused[i], g_reference[i]), 1e-4) << seam << " " << names[i] << ", variant " << variant;
    }
  }
}

// ssm_rotary = fused_cuda (kernels/ssm_rotary/fused_cuda.cu; the scan on its reference on both sides):
// N 8 (S 2: rotated pairs and passed-through dims) and N 64 (S 16; 32 pairs a row).
TEST(BlockMamba, FusedRotaryMatchesTheReferenceSeamOnCuda) {
  if (!kernels::has_implementation("ssm_rotary", "fused_cuda")) GTEST_SKIP() << "built without CUDA";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  expect_fused_block_matches_reference<MambaBlock>(
      "ssm_rotary", {8, 64}, [](ModelConfig& c, int64_t state) { c.mamba.state = state; }, 41);
}

TEST(BlockMamba, InitialisationFollowsMamba3) {
  auto c = small_config();
  c.mamba.expand = 8;  // 96 / 8 = 12 heads: enough draws to see the range
  SeededInit init(21, 0.02);
  MambaBlock blk(c, reference_seams(), init);
  const auto dt = torch::softplus(blk.dt_bias.to(torch::kDouble));
  EXPECT_GE(dt.min().item<double>(), c.mamba.dt_min * (1 - 1e-5));
  EXPECT_LE(dt.max().item<double>(), c.mamba.dt_max * (1 + 1e-5));
  EXPECT_GT(dt.max().item<double>() / dt.min().item<double>(), 2.0) << "dt should spread over the log range";
  EXPECT_TRUE(torch::equal(blk.skip, torch::ones({blk.heads})));
  EXPECT_TRUE(torch::equal(blk.b_bias, torch::ones({blk.heads, blk.state})));
  EXPECT_TRUE(torch::equal(blk.c_bias, torch::ones({blk.heads, blk.state})));
  EXPECT_NEAR(blk.w_in.std().item<double>(), 0.02, 0.002);
}

// ---------------------------------------------------------------------------------------------
// R: RG-LRU against the per-timestep recurrence with an explicit convolution loop.
Tensor slow_recurrent(const RecurrentBlock& blk, const ModelConfig& c, const Tensor& x) {
  const int64_t w = c.recurrent.width, K = c.recurrent.conv_width;
  auto out = torch::zeros({x.size(0), x.size(1), c.d_model}, torch::kDouble);
  for (int64_t b = 0; b < x.size(0); ++b) {
    std::vector<Tensor> g, u;
    for (int64_t t = 0; t < x.size(1); ++t) {
      const auto gu = torch::mv(blk.w_in, x[b][t]);
      g.push_back(gu.narrow(0, 0, w));
      u.push_back(gu.narrow(0, w, w));
    }
    auto h = torch::zeros({w}, torch::kDouble);
    for (int64_t t = 0; t < x.size(1); ++t) {
      auto conv = blk.conv_bias.clone();
      for (int64_t j = 0; j < K; ++j)
        if (const int64_t src = t - (K - 1) + j; src >= 0) conv += blk.conv_weight.select(1, j) * u[src];
      const auto r = sigmoid_of(torch::mv(blk.w_a, conv) + blk.b_a), i = sigmoid_of(torch::mv(blk.w_x, conv) + blk.b_x);
      const auto a = torch::exp(-8.0 * r * softplus_of(-blk.lambda));
      h = a * h + torch::sqrt(1 - a * a) * (i * conv);
      const auto gelu = 0.5 * g[t] * (1 + torch::erf(g[t] / std::sqrt(2.0)));
      out[b][t] = torch::mv(blk.w_out, gelu * h);
    }
  }
  return out;
}

TEST(BlockRecurrent, MatchesThePerTimestepRecurrence) {
  const auto c = small_config();
  auto blk = make_fp64<RecurrentBlock>(c);
  auto gen = seeded_generator(6);
  const auto x = random_normal({kBatch, kSteps, c.d_model}, gen);
  torch::NoGradGuard no_grad;
  EXPECT_LE(relative_error(blk->forward(x).y, slow_recurrent(*blk, c, x)), kFp64Tolerance);
}

// recurrent_scan = fused_cuda (gates and recurrence in kernels/recurrent_scan/fused_cuda.cu): widths on
// the 2-channel (10) and the 4-channel (16) path.
TEST(BlockRecurrent, FusedScanMatchesTheReferenceSeamOnCuda) {
  if (!kernels::has_implementation("recurrent_scan", "fused_cuda")) GTEST_SKIP() << "built without CUDA";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  expect_fused_block_matches_reference<RecurrentBlock>(
      "recurrent_scan", {10, 16}, [](ModelConfig& c, int64_t width) { c.recurrent.width = width; }, 31);
}

// causal_conv = fused_cuda (kernels/causal_conv/fused_cuda.cu) on the slice of the block's projection:
// widths on the 1-channel (10) and the 4-channel (16) path.
TEST(BlockRecurrent, FusedConvMatchesTheReferenceSeamOnCuda) {
  if (!kernels::has_implementation("causal_conv", "fused_cuda")) GTEST_SKIP() << "built without CUDA";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch";
  expect_fused_block_matches_reference<RecurrentBlock>(
      "causal_conv", {10, 16}, [](ModelConfig& c, int64_t width) { c.recurrent.width = width; }, 33);
}

TEST(BlockRecurrent, LambdaStartsInTheGriffinRange) {
  auto c = small_config();
  c.recurrent.width = 200;
  SeededInit init(22, 0.02);
  RecurrentBlock blk(c, reference_seams(), init);
  const auto a = torch::sigmoid(blk.lambda.to(torch::kDouble));
  EXPECT_GE(a.min().item<double>(), 0.9 - 1e-6);
  EXPECT_LE(a.max().item<double>(), 0.999 + 1e-6);
  EXPECT_GT(a.max().item<double>() - a.min().item<double>(), 0.05) << "sigmoid(Lambda) should spread over the range";
}

TEST(BlockCausalConv, OnlyLooksBack) {
  auto gen = seeded_generator(8);
  const auto x = random_normal({1, 7, 3}, gen), w = random_normal({3, 4}, gen), b = random_normal({3}, gen);
  auto changed = x.clone();
  changed[0][5] += 1.0;  // a change at step 5 may only move steps 5 and 6
  const auto& conv = kernels::implementations().causal_conv.at("reference");  // the R block's seam
  const auto diff = (conv(changed, w, b) - conv(x, w, b)).abs().sum(-1)[0];
  EXPECT_EQ(diff.narrow(0, 0, 5).max().item<double>(), 0.0);
  EXPECT_GT(diff[5].item<double>(), 0.0);
  EXPECT_GT(diff[6].item<double>(), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Gradients of every block (inputs and all parameters) by central differences in fp64.
class BlockGradients : public ::testing::TestWithParam<char> {};

TEST_P(BlockGradients, MatchCentralDifferences) {
  auto c = small_config();
  c.moe.capacity_factor = GetParam() == 'E' ? 0.8 : 0.0;  // include dropped slots
  SeededInit init(31, 0.3);
  auto blk = make_block(GetParam(), c, reference_seams(), init);
  blk->to(torch::kDouble);
  auto gen = seeded_generator(32);
  const auto x = random_normal({kBatch, 5, c.d_model}, gen).requires_grad_(true);
  const auto projection = random_normal({kBatch, 5, c.d_model}, gen);
  std::vector<Tensor> leaves{x};
  for (const auto& p : blk->parameters()) leaves.push_back(p);
  auto scalar = [&] {
    const auto out = blk->forward(x);
    auto s = (out.y * projection).sum();
    if (out.aux.defined()) s = s + 0.7 * out.aux;
    return s;
  };
  EXPECT_LE(testing::gradient_check_error(scalar, leaves, gen), kGradientTolerance);
}

INSTANTIATE_TEST_SUITE_P(EveryBlock, BlockGradients, ::testing::Values('A', 'M', 'E', 'R', 'D'),
                         [](const ::testing::TestParamInfo<char>& info) { return std::string(1, info.param); });

// SeededInit's draws depend on the seed and the draw's place in construction order only: each chunk
// of kChunkElements is what its own generator gives (derive_seed(derive_seed(seed, init, draw), init,
// chunk)), whichever worker thread drew it; a partial last chunk too.
TEST(SeededInitialiser, EachChunkIsItsOwnGeneratorsDraw) {
  const uint64_t seed = 77;
  const int64_t n = 2 * SeededInit::kChunkElements + 12345;
  SeededInit init(seed, 0.02);
  const auto first = init.normal({n});
  const auto second = init.uniform({n}, -1.0, 1.0);
  for (int64_t draw = 0; draw < 2; ++draw) {
    const uint64_t draw_seed = base::derive_seed(seed, base::kModelInitDomain, static_cast<uint64_t>(draw));
    for (int64_t c = 0; c < 3; ++c) {
      auto g = at::make_generator<at::CPUGeneratorImpl>(base::derive_seed(draw_seed, base::kModelInitDomain, c));
      const int64_t begin = c * SeededInit::kChunkElements, len = std::min(SeededInit::kChunkElements, n - begin);
      auto want = torch::empty({len}, torch::kFloat);
      if (draw == 0)
        want.normal_(0.0, 0.02, g);
      else
        want.uniform_(-1.0, 1.0, g);
      EXPECT_TRUE(torch::equal((draw == 0 ? first : second).narrow(0, begin, len), want)) << "draw " << draw << " chunk " << c;
    }
  }
  // Chunks and draws are independent streams, not one stream repeated.
  EXPECT_FALSE(torch::equal(first.narrow(0, 0, 1000), first.narrow(0, SeededInit::kChunkElements, 1000)));
  EXPECT_FALSE(torch::equal(SeededInit(seed, 0.02).normal({1000}), SeededInit(seed + 1, 0.02).normal({1000})));
  // The same seed gives the same weights, and the draw is N(0, 0.02).
  EXPECT_TRUE(torch::equal(SeededInit(seed, 0.02).normal({n}), first));
  EXPECT_NEAR(first.mean().item<double>(), 0.0, 0.02 * 5 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(first.std().item<double>(), 0.02, 0.02 * 0.01);
}

TEST(BlockFactory, RejectsLettersOutsideThePattern) {
  const auto c = small_config();
  SeededInit init(1, 0.02);
  EXPECT_THROW(make_block('X', c, reference_seams(), init), std::invalid_argument);
  EXPECT_THROW(make_block('|', c, reference_seams(), init), std::invalid_argument);
  EXPECT_EQ(make_block('R', c, reference_seams(), init)->letter(), 'R');
}

}  // namespace
}  // namespace ablate::model

// An expert-parallel rank draws its experts as the same numbers one process draws for them: rows of a
// draw, drawing only the chunks they lie in (first and last cut mid-chunk here: 3 x 700 x 1000 elements
// over 1 M-element chunks), and the draws after it are unchanged.
TEST(SeededInit, RowsOfADrawAreTheWholeDrawsRows) {
  const std::vector<int64_t> sizes = {4, 700, 1000};
  for (const auto& [first, rows] : {std::pair<int64_t, int64_t>{0, 4}, {1, 2}, {3, 1}, {0, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(first) + " + " + std::to_string(rows));
    ablate::model::SeededInit whole(11, 0.02), part(11, 0.02);
    const auto all = whole.normal(sizes);
    const auto some = part.normal_rows(sizes, first, rows);
    EXPECT_TRUE(torch::equal(some, all.narrow(0, first, rows)));
    EXPECT_TRUE(torch::equal(part.normal({3, 5}), whole.normal({3, 5})));
  }
  ablate::model::SeededInit init(11, 0.02);
  EXPECT_THROW(init.normal_rows(sizes, 3, 2), std::invalid_argument);
}
