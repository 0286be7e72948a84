// tests/model/model_test.cpp: the whole hybrid model (model/hybrid_model.h) and its accounting
// (model/accounting.cpp): pattern errors, parameter count and FLOPs/token of `tiny` and
// `nam56r-small` against hand-computed values, the built model's real parameter count, seeded
// determinism, the loss (mask, aux term, chunked loss seam), gradients, and on a CUDA machine
// the absence of host syncs and CPU/GPU agreement.
// Run: build/tests/model_tests --gtest_filter='HybridModel*:Accounting*'
#include <ATen/autocast_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>

#include "model/hybrid_model.h"
#include "tests/kernels/tensor_checks.h"
#include "tests/model/bf16_autocast.h"

#if defined(ABLATE_HAVE_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ablate::model {
namespace {

using ::testing::HasSubstr;
using testing::relative_error;
using testing::seeded_generator;
using torch::Tensor;

ModelConfig tiny() { return *named_config("tiny"); }

// A model small enough for fp64 finite differences: every block once, odd widths.
ModelConfig micro() {
  ModelConfig c;
  c.name = "micro";
  c.pattern = "AEMRD";
  c.vocab = 259;
  c.d_model = 10;
  c.init_std = 0.2;
  c.attention = {.heads = 2, .nope_dim = 2, .rope_dim = 4, .v_dim = 3, .q_lora = 5, .kv_lora = 6};
  c.moe = {.experts = 3, .top_k = 2, .ffn = 5};
  c.mamba = {.expand = 2, .head_dim = 5, .state = 4, .chunk = 3};
  c.recurrent = {.width = 7};
  c.dense = {.ffn = 9};
  return c;
}

struct Batch {
  Tensor tokens, targets, mask;
};

// Random ids in [0, V) and a mask with some zeros, from a seeded generator.
Batch random_batch(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  auto gen = seeded_generator(seed);
  const auto ids = torch::randint(c.vocab, {B, T + 1}, gen, torch::kLong);
  auto mask = (testing::random_uniform({B, T}, gen, 0, 1) > 0.2).to(torch::kUInt8);
  mask[0][0] = 0;
  return {ids.narrow(1, 0, T), ids.narrow(1, 1, T), mask};
}

std::shared_ptr<const kernels::Dispatcher> seams(const std::map<std::string, std::string>& requested = {}) {
  return std::make_shared<const kernels::Dispatcher>(requested, kernels::DeviceInfo{}, /*strict=*/true);
}

std::string construction_error(const std::string& pattern) {
  auto c = tiny();
  c.pattern = pattern;
  try {
    HybridModel model(c, seams());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(HybridModelPattern, FailsClosedNamingTheLetterAndItsPosition) {
  EXPECT_THAT(construction_error("AEXR"), HasSubstr("'X' at position 3"));
  EXPECT_THAT(construction_error("aEMR"), HasSubstr("'a' at position 1"));
  EXPECT_THAT(construction_error("AEMR "), HasSubstr("' ' at position 5"));
  EXPECT_THAT(construction_error(""), HasSubstr("empty"));
  EXPECT_THAT(construction_error("AE|MR"), HasSubstr("'|' at position 3 is not supported yet"));
  EXPECT_EQ(construction_error("AEMRD"), "");
}

TEST(HybridModelPattern, BuildsOneBlockPerLetterInOrder) {
  auto c = micro();
  c.pattern = "DRMEAA";
  HybridModel model(c, seams());
  std::string letters;
  for (const auto& b : model->blocks()) letters += b->letter();
  EXPECT_EQ(letters, "DRMEAA");
}

// Hand-computed accounting. tiny: V 512, d 64, pattern AEMR, T 128.
//  A (H 2, dn 16, dr 8, dv 16, q_lora 32, kv_lora 32):
//    W_dq 64*32 = 2048, W_uq 32*2*24 = 1536, W_dkv 64*(32+8) = 2560, W_ukv 32*2*(16+16) = 2048,
//    W_o 2*16*64 = 2048 -> projections 10240; norms q 32 + kv 32; pre-norm 64 -> 10368 params.
//    FLOPs 2*10240 + 2*2*(128/2)*(16+8+16) = 20480 + 10240 = 30720.
//  E (E 4, k 2, f 64): router 64*4 = 256, experts 4*3*64*64 = 49152, pre-norm 64 -> 49472 total;
//    active 256 + 2*3*64*64 + 64 = 24896. FLOPs 2*64*4 + 2*3*2*64*64 = 512 + 49152 = 49664.
//  M (expand 2 -> d_inner 128, P 16 -> H 8, N 16, S 4): W_in 64*(256+32+24+4) = 64*316 = 20224,
//    dt_bias 8, norms 2*16 = 32, b_B + b_C 2*8*16 = 256, D 8, W_out 128*64 = 8192, pre-norm 64
//    -> 28784. FLOPs 2*20224 + 2*8192 + 7*128*16 = 40448 + 16384 + 14336 = 71168.
//  R (w 64, conv 4): W_in 64*128 = 8192, conv 4*64 + 64 = 320, gates 2*(64*64 + 64) = 8320,
//    Lambda 64, W_out 64*64 = 4096, pre-norm 64 -> 21056. FLOPs 2*64*128 + 2*2*64*64 + 2*64*64
//    = 16384 + 16384 + 8192 = 40960.
//  Embedding 512*64 = 32768, head 32768, final norm 64.
//  Total 10368 + 49472 + 28784 + 21056 + 32768 + 32768 + 64 = 175280;
//  active 175280 - (49472 - 24896) = 150704.
//  FLOPs 30720 + 49664 + 71168 + 40960 + head 2*64*512 = 65536 -> 258048.
TEST(Accounting, TinyMatchesTheHandComputedValues) {
  const auto count = parameter_count(tiny());
  EXPECT_EQ(count.total, 175280);
  EXPECT_EQ(count.active_per_token, 150704);
  EXPECT_EQ(forward_flops_per_token(tiny()), 258048.0);
  EXPECT_EQ(training_flops_per_token(tiny()), 3 * 258048.0);
}

// nam56r-small: V 32768, d 1024, pattern AEMEAEMEAEMR (A x3, E x5, M x3, R x1), T 2048.
//  A (H 16, dn 64, dr 32, dv 64, q_lora 384, kv_lora 256): W_dq 1024*384 = 393216,
//    W_uq 384*16*96 = 589824, W_dkv 1024*288 = 294912, W_ukv 256*16*128 = 524288,
//    W_o 16*64*1024 = 1048576 -> projections 2850816; + norms 384 + 256 + pre-norm 1024 = 2852480.
//    FLOPs 2*2850816 + 2*16*1024*160 = 5701632 + 5242880 = 10944512.
//  E (E 16, k 2, f 768): router 16384, experts 16*3*1024*768 = 37748736, + 1024 -> 37766144;
//    active 16384 + 2*3*1024*768 + 1024 = 4736000. FLOPs 2*1024*16 + 2*3*2*1024*768 = 32768 + 9437184 = 9469952.
//  M (d_inner 2048, P 64 -> H 32, N 128, S 32): W_in 1024*(4096+256+96+32) = 1024*4480 = 4587520,
//    dt_bias 32, norms 256, b_B + b_C 2*32*128 = 8192, D 32, W_out 2048*1024 = 2097152, + 1024
//    -> 6694208. FLOPs 2*4587520 + 2*2097152 + 7*2048*128 = 9175040 + 4194304 + 1835008 = 15204352.
//  R (w 1024): W_in 2097152, conv 5*1024 = 5120, gates 2*(1048576 + 1024) = 2099200, Lambda 1024,
//    W_out 1048576, + 1024 -> 5252096. FLOPs 4194304 + 4194304 + 2097152 = 10485760.
//  Embedding + head 2*32768*1024 = 67108864, final norm 1024.
//  Total 3*2852480 + 5*37766144 + 3*6694208 + 5252096 + 67108864 + 1024
//      = 8557440 + 188830720 + 20082624 + 5252096 + 67108864 + 1024 = 289832768 (docs/model.md: about 290 M);
//  active 289832768 - 5*(37766144 - 4736000) = 289832768 - 165150720 = 124682048 (about 125 M).
//  FLOPs 3*10944512 + 5*9469952 + 3*15204352 + 10485760 + head 2*1024*32768 = 67108864
//      = 32833536 + 47349760 + 45613056 + 10485760 + 67108864 = 203390976.
TEST(Accounting, Nam56rSmallMatchesTheHandComputedValues) {
  const auto c = *named_config("nam56r-small");
  const auto count = parameter_count(c);
  EXPECT_EQ(count.total, 289832768);
  EXPECT_EQ(count.active_per_token, 124682048);
  EXPECT_EQ(forward_flops_per_token(c), 203390976.0);
}

// flops-v2 splits the same total by precision: with FP8 projections, the blocks' dense projections
// (dense_gemm) count as FP8. nam56r-small's, forward, from the terms above: A 2*2850816 x 3 =
// 17104896, M 2*(4587520 + 2097152) x 3 = 40108032, R 2*(2097152 + 2*1048576 + 1048576) = 10485760
// -> 67698688; training x 3 = 203096064 of 610172928 (a third).
// The head: 2 d V = 2 * 1024 * 32768 = 67108864 forward. The experts: E blocks x top_k x 3 GEMMs x 2 d f
// (nam56r-small: 5 E blocks, k 2, f 768 -> 5 * 2 * 3 * 2 * 1024 * 768 = 47185920).
TEST(Accounting, FlopsByPrecisionCountEachFamilyAsFp8WhenItRunsFp8) {
  const auto c = *named_config("nam56r-small");
  const auto bf16 = training_flops_by_precision(c, {});
  EXPECT_EQ(bf16.fp8, 0.0);
  EXPECT_EQ(bf16.run_dtype, training_flops_per_token(c));
  const auto projections = training_flops_by_precision(c, {.projections = true});
  EXPECT_EQ(projections.fp8, 3.0 * 67698688.0);
  EXPECT_EQ(projections.total(), training_flops_per_token(c));
  EXPECT_EQ(training_flops_by_precision(c, {.head = true}).fp8, 3.0 * 67108864.0);
  EXPECT_EQ(training_flops_by_precision(c, {.experts = true}).fp8, 3.0 * 47185920.0);
  const auto all = training_flops_by_precision(c, {.projections = true, .head = true, .experts = true});
  EXPECT_EQ(all.fp8, 3.0 * (67698688.0 + 67108864.0 + 47185920.0));
  EXPECT_EQ(all.total(), training_flops_per_token(c));
  EXPECT_EQ(std::string(kFlopsVersion), "flops-v2");
}

// The larger nam56r configurations: the same formulas, term by term as above, at their widths.
//  nam56r-medium (d 2048, 24 layers; A 16, 128, 64, 128, 768, 512; E f 1536; R w 2048):
//    A 11,404,544 + 2048, E 151,027,712 + 2048, M 26,165,632 + 2048, R 20,987,904 + 2048 (x 6, 10, 6, 2);
//    embedding + head 134,217,728, final norm 2048.
//  nam56r-large (d 4096; A 32, 128, 64, 128, 1536, 512; E f 3584; R w 4096): the same with those widths.
TEST(Accounting, Nam56rMediumAndLargeAreAbout2BAnd8B) {
  const auto medium = parameter_count(*named_config("nam56r-medium"));
  EXPECT_EQ(medium.total, 1'911'942'912);
  EXPECT_EQ(medium.active_per_token, 590'737'152);
  const auto large = parameter_count(*named_config("nam56r-large"));
  EXPECT_EQ(large.total, 8'338'525'184);
  EXPECT_EQ(large.active_per_token, 2'172'898'304);
  EXPECT_EQ(forward_flops_per_token(*named_config("nam56r-medium")), 1'194'721'280.0);
  EXPECT_EQ(forward_flops_per_token(*named_config("nam56r-large")), 4'372'299'776.0);
}

TEST(Accounting, DenseBlockAndPlainQueryProjection) {
  auto c = tiny();
  c.pattern = "AD";
  c.attention.q_lora = 0;
  // A with q = W_q x: W_q 64*2*24 = 3072 replaces W_dq + norm + W_uq (2048 + 32 + 1536):
  //   3072 + 2560 + 32 + 2048 + 2048 + 64 = 9824. D (f 64): 3*64*64 + 64 = 12352.
  //   Total 9824 + 12352 + 65536 + 64 = 87776.
  EXPECT_EQ(parameter_count(c).total, 87776);
  EXPECT_EQ(parameter_count(c).active_per_token, 87776);
  // FLOPs: A 2*(3072 + 2560 + 2048 + 2048) + 10240 = 29696; D 6*64*64 = 24576; head 65536.
  EXPECT_EQ(forward_flops_per_token(c), 29696.0 + 24576.0 + 65536.0);
}

int64_t numel_of_parameters(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(HybridModelParameters, RealCountEqualsTheAccounting) {
  for (const auto& [pattern, q_lora] :
       std::vector<std::pair<std::string, int64_t>>{{"AEMR", 32}, {"DRMEA", 0}, {"MMEE", 32}}) {
    auto c = tiny();
    c.pattern = pattern;
    c.attention.q_lora = q_lora;
    HybridModel model(c, seams());
    EXPECT_EQ(numel_of_parameters(*model), parameter_count(c).total) << pattern << " q_lora " << q_lora;
  }
  auto c = micro();
  HybridModel model(c, seams());
  EXPECT_EQ(numel_of_parameters(*model), parameter_count(c).total) << "micro";
}

TEST(HybridModelInit, SameSeedSameWeightsAndLossOtherSeedOtherWeights) {
  const auto c = tiny();
  HybridModel a(c, seams(), 5), b(c, seams(), 5), other(c, seams(), 6);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_differs = false;
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
    any_differs = any_differs || !torch::equal(item.value(), po[item.key()]);
  }
  EXPECT_TRUE(any_differs);
  const auto batch = random_batch(c, 2, 16, 9);
  const auto la = a->forward(batch.tokens, batch.targets, batch.mask).loss;
  const auto lb = b->forward(batch.tokens, batch.targets, batch.mask).loss;
  EXPECT_TRUE(torch::equal(la, lb));
}

// The unit hooks' contract (model/parameter_units.h): every parameter in exactly one unit, and no unit's
// parameters read before its hook. Each unit's weights are NaN until its hook puts them back, so a
// forward that reads one early gives a NaN loss (or a different one).
// With `drop` the hooks also NaN a unit's weights again after its forward (all but the last unit's)
// and restore them before its backward, as a harness that frees them does.
class RestoringHooks : public ParameterUnitHooks {
 public:
  RestoringHooks(std::vector<std::vector<Tensor>> units, bool drop) : units_(std::move(units)), drop_(drop) {
    for (auto& unit : units_) {
      saved_.emplace_back();
      for (auto& p : unit) saved_.back().push_back(p.detach().clone());
    }
    for (size_t u = 0; u < units_.size(); ++u) set(u, false);
  }
  void before_unit(int64_t u) override {
    order.push_back(u);
    set(static_cast<size_t>(u), true);
  }
  void after_unit(int64_t u) override {
    if (drop_ && static_cast<size_t>(u) + 1 < units_.size()) set(static_cast<size_t>(u), false);
  }
  bool wants_backward_hooks() const override { return drop_; }
  void before_unit_backward(int64_t u) override {
    backward_order.push_back(u);
    set(static_cast<size_t>(u), true);
  }
  std::vector<int64_t> order, backward_order;

 private:
  // Through .data(): a tensor of its own version counter, so autograd's saved-tensor check sees no
  // in-place change (a harness writes the storage through buffers of its own, just as invisibly).
  void set(size_t u, bool whole) {
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < units_.at(u).size(); ++k) {
      if (whole) units_[u][k].data().copy_(saved_[u][k]);
      else units_[u][k].data().fill_(NAN);
    }
  }
  std::vector<std::vector<Tensor>> units_, saved_;
  bool drop_;
};

TEST(HybridModelUnits, EveryParameterInOneUnitAndNoneReadOutsideItsHooks) {
  auto c = micro();
  HybridModel model(c, seams(), 3), reference(c, seams(), 3);
  const auto units = model->parameter_units();
  ASSERT_EQ(units.size(), c.pattern.size() + 2);
  std::set<const void*> seen;
  size_t count = 0;
  for (const auto& unit : units)
    for (const auto& p : unit) {
      seen.insert(p.unsafeGetTensorImpl());
      ++count;
    }
  EXPECT_EQ(count, seen.size()) << "a parameter in two units";
  EXPECT_EQ(count, model->parameters().size());
  for (const auto& p : model->parameters()) EXPECT_TRUE(seen.count(p.unsafeGetTensorImpl())) << "a parameter in no unit";

  const auto batch = random_batch(c, 2, 12, 4);
  const auto want = reference->forward(batch.tokens, batch.targets, batch.mask).loss;
  want.backward();
  std::vector<int64_t> in_order(units.size());
  std::iota(in_order.begin(), in_order.end(), 0);
  for (const bool drop : {false, true}) {
    SCOPED_TRACE(drop ? "weights dropped after each unit's forward" : "weights kept");
    RestoringHooks hooks(units, drop);
    model->set_unit_hooks(&hooks);
    model->zero_grad();
    const auto got = model->forward(batch.tokens, batch.targets, batch.mask).loss;
    got.backward();
    model->set_unit_hooks(nullptr);
    EXPECT_TRUE(torch::equal(got, want)) << got.item<double>() << " vs " << want.item<double>();
    EXPECT_EQ(hooks.order, in_order);
    const auto mine = model->named_parameters(), theirs = reference->named_parameters();
    for (const auto& item : mine)
      EXPECT_TRUE(torch::equal(item.value().grad(), theirs[item.key()].grad())) << item.key();
    if (drop) {
      // Every layer, last first; not the embedding (its backward reads no weight) nor the head.
      std::vector<int64_t> layers_backward(in_order.rbegin() + 1, in_order.rend() - 1);
      EXPECT_EQ(hooks.backward_order, layers_backward);
    }
  }
}

TEST(HybridModelInit, LinearWeightsFollowInitStd) {
  const auto c = tiny();
  HybridModel model(c, seams());
  EXPECT_NEAR(model->embedding.std().item<double>(), c.init_std, 0.001);
  EXPECT_NEAR(model->head.std().item<double>(), c.init_std, 0.001);
  EXPECT_TRUE(torch::equal(model->final_norm, torch::ones({c.d_model})));
}

TEST(HybridModelLoss, StartsNearUniformAndAddsTheAuxTerm) {
  const auto c = tiny();
  HybridModel model(c, seams(), 1);
  const auto batch = random_batch(c, 2, 24, 10);
  const auto out = model->forward(batch.tokens, batch.targets, batch.mask);
  // Small initial weights: the logits are nearly equal, so CE is close to ln V = 6.238.
  EXPECT_NEAR(out.ce.item<double>(), std::log(double(c.vocab)), 0.05);
  // One E layer with a near-uniform router: L_aux = E * sum_e f_e P_e with P_e ~ 1/E, so ~ sum f_e = 1.
  EXPECT_NEAR(out.aux.item<double>(), 1.0, 0.05);
  EXPECT_NEAR(out.loss.item<double>(), out.ce.item<double>() + c.moe.aux_coef * out.aux.item<double>(), 1e-6);
  EXPECT_EQ(out.dropped_slots.item<int64_t>(), 0);
  EXPECT_EQ(out.loss.dim(), 0);
}

TEST(HybridModelLoss, MaskedPositionsDoNotCount) {
  const auto c = tiny();
  HybridModel model(c, seams(), 2);
  auto batch = random_batch(c, 2, 12, 11);
  torch::NoGradGuard no_grad;
  const auto before = model->forward(batch.tokens, batch.targets, batch.mask).ce;
  const auto changed_targets = torch::where(batch.mask.to(torch::kBool), batch.targets, (batch.targets + 1) % c.vocab);
  EXPECT_FALSE(torch::equal(changed_targets, batch.targets));
  const auto after = model->forward(batch.tokens, changed_targets, batch.mask).ce;
  EXPECT_TRUE(torch::equal(before, after));
}

TEST(HybridModelLoss, CapacityFactorReportsDroppedSlots) {
  auto c = tiny();
  c.pattern = "EE";
  c.moe.capacity_factor = 0.5;  // half the slots fit at best: drops are certain
  HybridModel model(c, seams(), 3);
  const auto batch = random_batch(c, 2, 16, 12);
  const auto out = model->forward(batch.tokens, batch.targets, batch.mask);
  EXPECT_EQ(out.dropped_slots.scalar_type(), torch::kLong);
  // 2 layers x 32 tokens x 2 slots = 128 slots; capacity ceil(0.5*64/4) = 8 per expert per layer -> at most 64 kept.
  EXPECT_GE(out.dropped_slots.item<int64_t>(), 64);
}

TEST(HybridModelLoss, ChunkedLossSeamGivesTheSameLoss) {
  const auto c = tiny();
  HybridModel reference(c, seams(), 4), chunked(c, seams({{"loss", "chunked"}}), 4);
  const auto batch = random_batch(c, 2, 16, 13);
  const auto want = reference->forward(batch.tokens, batch.targets, batch.mask).loss;
  const auto got = chunked->forward(batch.tokens, batch.targets, batch.mask).loss;
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5);  // fp32, summed in another order
  want.backward();
  got.backward();
  EXPECT_LE(relative_error(chunked->head.grad(), reference->head.grad()), 1e-4);
  EXPECT_LE(relative_error(chunked->embedding.grad(), reference->embedding.grad()), 1e-4);
}

TEST(HybridModelGradients, WholeModelMatchesCentralDifferencesInFp64) {
  const auto c = micro();
  HybridModel model(c, seams(), 7);
  model->to(torch::kDouble);
  const auto batch = random_batch(c, 2, 5, 14);
  std::vector<Tensor> leaves;
  for (const auto& p : model->parameters()) leaves.push_back(p);
  auto loss = [&] { return model->forward(batch.tokens, batch.targets, batch.mask).loss; };
  auto gen = seeded_generator(15);
  EXPECT_LE(testing::gradient_check_error(loss, leaves, gen, /*directions=*/2), 1e-6);
}

TEST(HybridModelGradients, EveryParameterGetsAFiniteGradientAndTrainingLowersTheLoss) {
  const auto c = tiny();
  HybridModel model(c, seams(), 8);
  const auto batch = random_batch(c, 2, 16, 16);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.5));
  double first = 0, last = 0;
  for (int step = 0; step < 4; ++step) {
    sgd.zero_grad();
    const auto out = model->forward(batch.tokens, batch.targets, batch.mask);
    out.loss.backward();
    if (step == 0) {
      first = out.loss.item<double>();
      for (const auto& p : model->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
      }
    }
    last = out.loss.item<double>();
    sgd.step();
  }
  EXPECT_LT(last, first - 0.05);
}

bool have_cuda() { return torch::cuda::is_available(); }

TEST(HybridModelCuda, MatchesTheCpuInFp32) {
  if (!have_cuda()) GTEST_SKIP() << "needs a CUDA device";
  const auto c = tiny();
  HybridModel cpu(c, seams(), 17), gpu(c, seams(), 17);
  gpu->to(torch::Device(torch::kCUDA, 0));
  const auto batch = random_batch(c, 2, 32, 18);
  const auto want = cpu->forward(batch.tokens, batch.targets, batch.mask);
  const torch::Device dev(torch::kCUDA, 0);
  const auto got = gpu->forward(batch.tokens.to(dev), batch.targets.to(dev), batch.mask.to(dev));
  // fp32 on both sides; TF32 is off by default for LibTorch matmuls, so only summation order differs.
  EXPECT_NEAR(got.loss.item<double>(), want.loss.item<double>(), 1e-4);
  want.loss.backward();
  got.loss.backward();
  EXPECT_LE(relative_error(gpu->head.grad(), cpu->head.grad()), 1e-3);
}

// The training posture: fp32 weights, bf16 autocast forward, backward outside autocast, with every
// attention backend resolved strictly (so a vendor kernel that cannot run fails the test).
TEST(HybridModelCuda, Bf16AutocastRunsOnEveryAttentionBackend) {
  if (!have_cuda()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device dev(torch::kCUDA, 0);
  const auto c = tiny();
  const auto batch = random_batch(c, 2, 64, 21);
  const auto tokens = batch.tokens.to(dev), targets = batch.targets.to(dev), mask = batch.mask.to(dev);
  HybridModel fp32_model(c, seams(), 22);
  fp32_model->to(dev);
  const double want = fp32_model->forward(tokens, targets, mask).loss.item<double>();
  const auto device_info = kernels::describe_device(dev, torch::kBFloat16);
  for (const std::string backend : {"reference", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"}) {
    const auto* row = kernels::find_backend("attention", backend);
    if (const auto why = kernels::why_unavailable(*row, device_info); !why.empty()) {
      ADD_FAILURE() << backend << " unavailable on this GPU: " << why;
      continue;
    }
    auto dispatcher = std::make_shared<const kernels::Dispatcher>(
        std::map<std::string, std::string>{{"attention", backend}}, device_info, /*strict=*/true);
    HybridModel model(c, dispatcher, 22);
    model->to(dev);
    Tensor loss;
    {
      ablate::testing::Bf16Autocast autocast;
      loss = model->forward(tokens, targets, mask).loss;
    }
    loss.backward();
    // bf16 matmuls against the fp32 model: the loss (about ln V = 6.2) agrees to a few 1e-3.
    EXPECT_NEAR(loss.item<double>(), want, 2e-2) << backend;
    for (const auto& p : model->named_parameters())
      ASSERT_TRUE(p.value().grad().defined() && torch::isfinite(p.value().grad()).all().item<bool>())
          << backend << ": " << p.key();
  }
}

// The default path must not synchronise with the host: every block, a capacity factor (the dropless
// standard MoE path is the documented exception), forward and backward under sync-debug "error".
TEST(HybridModelCuda, ForwardAndBackwardDoNotSyncWithTheHost) {
  if (!have_cuda()) GTEST_SKIP() << "needs a CUDA device";
#if defined(ABLATE_HAVE_CUDA)
  auto c = tiny();
  c.pattern = "AEMRD";
  c.moe.capacity_factor = 1.25;
  const torch::Device dev(torch::kCUDA, 0);
  for (const std::string loss_backend : {"reference", "chunked"}) {
    HybridModel model(c, seams({{"loss", loss_backend}}), 19);
    model->to(dev);
    const auto batch = random_batch(c, 2, 32, 20);
    const auto tokens = batch.tokens.to(dev), targets = batch.targets.to(dev), mask = batch.mask.to(dev);
    model->forward(tokens, targets, mask).loss.backward();  // warm-up: allocator, cuBLAS handles
    torch::cuda::synchronize();
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    try {
      const auto out = model->forward(tokens, targets, mask);
      out.loss.backward();
    } catch (const std::exception& e) {
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      FAIL() << "host sync with loss backend " << loss_backend << ": " << e.what();
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace ablate::model
