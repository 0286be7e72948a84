// tests/kernels/fp8_test.cpp: FP8 quantisation (kernels/dense_gemm/fp8_quantize.h) and the edge cases of
// the FP8 backends (dense_gemm's, the LM head's loss fused_cuda_fp8_rowwise); their parity against fp64
// is the parity driver's (tests/kernels/parity_test.cpp, `*Parity*dense_gemm*`, `*Parity*loss*`). On the CPU: the reference quantisation's
// arithmetic on hand-checked values, an all-zero tensor, an outlier, inf and NaN, and the catalog's FP8
// rows unavailable with their reason; delayed scaling's history. On a GPU: the CUDA kernels bit for bit
// against the reference (delayed scaling over calls and in a CUDA graph too), and the backends on zeros
// and non-finite inputs.
// Run: build/tests/kernels_tests --gtest_filter='Fp8*'
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/dense_gemm/fp8_quantize.h"
#include "kernels/registry.h"
#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/loss/fused_cuda.h"
#endif
#include "tests/kernels/fp8_checks.h"
#include "tests/kernels/tensor_checks.h"
#include "tests/model/bf16_autocast.h"

namespace ablate::kernels::fp8 {
namespace {

using testing::random_normal;
using testing::seeded_generator;
using torch::Tensor;
using testing::as_float;
using testing::same_bits;
using testing::fp8_options;

TEST(Fp8Reference, ScalesFromTheAmaxAndCastsExactlyRepresentableValues) {
  const auto x = torch::tensor({{4.f, 1.f, -2.f, 0.5f}, {0.25f, -0.125f, 0.f, 0.0625f}});
  // Rowwise with power-of-two scales: row 0 amax 4 -> 448 / 4 = 112 -> 64; row 1 amax 0.25 -> 1792 -> 1024.
  const auto rw = quantize_reference(x, fp8_options(Scaling::rowwise, at::kFloat8_e4m3fn, true));
  EXPECT_TRUE(torch::equal(rw.rows_inverse, torch::tensor({1.f / 64, 1.f / 1024})));
  EXPECT_TRUE(torch::equal(as_float(rw.rows), torch::tensor({{256.f, 64.f, -128.f, 32.f}, {256.f, -128.f, 0.f, 64.f}})));
  // Columns: amax 4, 1, 2, 0.5 -> scales 112, 448, 224, 896 -> 64, 256, 128, 512; cols is x^T.
  EXPECT_TRUE(torch::equal(rw.cols_inverse, torch::tensor({1.f / 64, 1.f / 256, 1.f / 128, 1.f / 512})));
  EXPECT_TRUE(torch::equal(as_float(rw.cols),
                           torch::tensor({{256.f, 16.f}, {256.f, -32.f}, {-256.f, 0.f}, {256.f, 32.f}})));
  // Tensorwise without rounding the scale: 448 / 4 = 112, both orientations.
  const auto tw = quantize_reference(x, fp8_options(Scaling::tensorwise));
  EXPECT_TRUE(torch::equal(tw.rows_inverse, torch::tensor({1.f / 112})));
  EXPECT_TRUE(torch::equal(as_float(tw.rows), torch::tensor({{448.f, 112.f, -224.f, 56.f}, {28.f, -14.f, 0.f, 7.f}})));
  EXPECT_TRUE(torch::equal(as_float(tw.cols), as_float(tw.rows).t()));
}

TEST(Fp8Reference, RoundsToNearestEvenAndSaturatesAtTheLargestFiniteValue) {
  // Scale 1 (amax 448): 17 lies between e4m3's 16 and 18 (spacing 2): a tie, to the even mantissa 16;
  // 19 is a tie between 18 and 20: to 20 (even).
  const auto x = torch::tensor({{448.f, 17.f, 19.f, -448.f}});
  const auto q = quantize_reference(x, fp8_options(Scaling::tensorwise));
  EXPECT_TRUE(torch::equal(as_float(q.rows), torch::tensor({{448.f, 16.f, 20.f, -448.f}})));
  EXPECT_EQ(max_finite(at::kFloat8_e4m3fn), 448.f);
  EXPECT_EQ(max_finite(at::kFloat8_e5m2), 57344.f);
  EXPECT_THROW(max_finite(at::kBFloat16), c10::Error);
}

TEST(Fp8Reference, AnAllZeroTensorQuantisesToZeroWithUnitScales) {
  for (const auto scaling : {Scaling::tensorwise, Scaling::rowwise}) {
    const auto q = quantize_reference(torch::zeros({16, 32}), fp8_options(scaling));
    EXPECT_TRUE(torch::equal(as_float(q.rows), torch::zeros({16, 32})));
    EXPECT_TRUE(torch::equal(as_float(q.cols), torch::zeros({32, 16})));
    EXPECT_TRUE(torch::equal(q.rows_inverse, torch::ones_like(q.rows_inverse)));
    EXPECT_TRUE(torch::equal(q.cols_inverse, torch::ones_like(q.cols_inverse)));
  }
}

// Dequantised rows against x: ||q / scale - x|| / ||x|| per row.
Tensor row_errors(const Quantized& q, const Tensor& x) {
  const auto back = as_float(q.rows) * q.rows_inverse.reshape({-1, 1});
  return (back - x).norm(2, {1}) / x.norm(2, {1});
}

TEST(Fp8Reference, AnOutlierCostsItsOwnRowOnlyUnderRowwiseScaling) {
  auto gen = seeded_generator(5);
  auto x = random_normal({64, 64}, gen).to(torch::kFloat);
  x[3][5] = 1e5f;
  const auto rowwise = row_errors(quantize_reference(x, fp8_options(Scaling::rowwise)), x);
  const auto tensorwise = row_errors(quantize_reference(x, fp8_options(Scaling::tensorwise)), x);
  // e4m3 rounds a normal value by at most 2^-4 relative; every row keeps that under its own scale.
  EXPECT_LE(rowwise.max().item<float>(), 0.0625f);
  // One scale for the tensor (448 / 1e5) puts the other rows' values of ~1 at ~0.0045 after scaling, in
  // e4m3's subnormals (below 2^-6, spaced 2^-9 = 0.002): ~0.13 of their norm, five times rowwise's. (An
  // outlier of 1e4 costs tensorwise little: 0.027 against 0.024, measured on an H200, 2026-11-28.)
  auto others = torch::cat({tensorwise.narrow(0, 0, 3), tensorwise.narrow(0, 4, 60)});
  EXPECT_GT(others.mean().item<float>(), 3 * rowwise.mean().item<float>());
}

TEST(Fp8Reference, AnInfOrNanMakesEverythingItsScaleTouchesNan) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto x = torch::ones({16, 32});
    x[2][7] = bad;
    const auto tw = quantize_reference(x, fp8_options(Scaling::tensorwise));
    EXPECT_TRUE(torch::isnan(as_float(tw.rows)).all().item<bool>()) << bad;
    EXPECT_TRUE(torch::isnan(tw.rows_inverse).all().item<bool>()) << bad;
    const auto rw = quantize_reference(x, fp8_options(Scaling::rowwise));
    const auto rows = as_float(rw.rows), cols = as_float(rw.cols);
    EXPECT_TRUE(torch::isnan(rows[2]).all().item<bool>()) << bad;
    EXPECT_TRUE(torch::isnan(cols[7]).all().item<bool>()) << bad;
    EXPECT_EQ(torch::isnan(rows).sum().item<int64_t>(), 32) << "only row 2 is lost (" << bad << ")";
    EXPECT_EQ(torch::isnan(cols).sum().item<int64_t>(), 16) << "only column 7 is lost (" << bad << ")";
  }
}

// The history's amaxes as floats (its entries are float bits), newest first.
Tensor past_amaxes(const Tensor& history) { return history.narrow(0, 0, kAmaxHistory).cpu().view(torch::kFloat); }

// Delayed scaling: a call scales by the past calls' amax (none yet: scale 1) whatever its own, and enters
// its own amax as the newest; an amax leaves after kAmaxHistory later calls.
TEST(Fp8Reference, DelayedScalingScalesByThePastCallsAndEntersItsOwnAmax) {
  auto history = new_amax_history(torch::kCPU);
  const auto o = fp8_options(Scaling::tensorwise);
  const auto x = torch::tensor({{2.f, -1.f}, {0.5f, 0.25f}});
  auto q = quantize_delayed_reference(x, history, o);
  EXPECT_TRUE(torch::equal(q.rows_inverse, torch::ones({1})));
  EXPECT_TRUE(torch::equal(as_float(q.rows), x));
  EXPECT_TRUE(torch::equal(as_float(q.cols), x.t()));
  // amax 2 entered: the next call scales by 448 / 2 = 224 though its own amax is 4, so 4 saturates.
  q = quantize_delayed_reference(x * 2, history, o);
  EXPECT_FLOAT_EQ(q.rows_inverse.item<float>(), 2.f / 448);
  EXPECT_TRUE(torch::equal(as_float(q.rows), torch::tensor({{448.f, -448.f}, {224.f, 112.f}})));
  EXPECT_TRUE(torch::equal(q.cols_inverse, q.rows_inverse));
  auto past = past_amaxes(history);
  EXPECT_EQ(past[0].item<float>(), 4.f);
  EXPECT_EQ(past[1].item<float>(), 2.f);
  EXPECT_EQ(past.narrow(0, 2, kAmaxHistory - 2).abs().sum().item<float>(), 0.f);
  EXPECT_TRUE(torch::equal(history.narrow(0, kAmaxHistory, 2), torch::zeros({2}, torch::kInt32)))
      << "accumulator and block count back to 0";
  // The 4 scales the kAmaxHistory calls after its own, then leaves.
  for (int64_t i = 0; i < kAmaxHistory; ++i) {
    q = quantize_delayed_reference(x, history, o);
    EXPECT_FLOAT_EQ(q.rows_inverse.item<float>(), 4.f / 448) << "call " << i + 1 << " after it";
  }
  q = quantize_delayed_reference(x, history, o);
  EXPECT_FLOAT_EQ(q.rows_inverse.item<float>(), 2.f / 448);
}

// The delayed scale does not see this call's values, so an inf would saturate silently: it becomes NaN,
// and its amax makes every value of the next call NaN (the loss turns non-finite, the run stops).
TEST(Fp8Reference, DelayedScalingTurnsNonFiniteValuesToNanAndPoisonsTheNextCall) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto history = new_amax_history(torch::kCPU);
    const auto o = fp8_options(Scaling::tensorwise, at::kFloat8_e5m2);
    auto x = torch::ones({16, 32});
    quantize_delayed_reference(x, history, o);
    x[2][7] = bad;
    const auto hit = quantize_delayed_reference(x, history, o);
    EXPECT_EQ(torch::isnan(as_float(hit.rows)).sum().item<int64_t>(), 1) << bad;
    EXPECT_TRUE(torch::isnan(as_float(hit.rows)[2][7]).item<bool>()) << bad;
    EXPECT_TRUE(torch::isnan(as_float(hit.cols)[7][2]).item<bool>()) << bad;
    const auto next = quantize_delayed_reference(torch::ones({16, 32}), history, o);
    EXPECT_TRUE(torch::isnan(next.rows_inverse).all().item<bool>()) << bad;
    EXPECT_TRUE(torch::isnan(as_float(next.rows)).all().item<bool>()) << bad;
  }
}

TEST(Fp8Reference, DelayedScalingRefusesRowwiseAndAnyOtherHistory) {
  const auto x = torch::ones({16, 16});
  auto history = new_amax_history(torch::kCPU);
  EXPECT_THROW(quantize_delayed_reference(x, history, fp8_options(Scaling::rowwise)), c10::Error);
  const auto every_other = torch::zeros({2 * (kAmaxHistory + 2)}, torch::kInt32).slice(0, 0, 2 * (kAmaxHistory + 2), 2);
  for (auto other : {torch::zeros({kAmaxHistory}, torch::kInt32), torch::zeros({kAmaxHistory + 2}, torch::kFloat),
                     every_other})
    EXPECT_THROW(quantize_delayed_reference(x, other, fp8_options(Scaling::tensorwise)), c10::Error) << other.sizes();
  EXPECT_NO_THROW(quantize_delayed_reference(x, history, fp8_options(Scaling::tensorwise)));
}

TEST(Fp8Catalog, TheFp8RowsChangeNumericsAndNeedABf16RunOnHopperWithAlignedWidths) {
  const std::vector<std::tuple<const char*, const char*, const char*>> rows = {
      {"dense_gemm", "fp8_tensorwise", "reference"},
      {"dense_gemm", "fp8_rowwise", "reference"},
      {"dense_gemm", "fp8_delayed", "reference"},
      {"dense_gemm", "fp8_delayed_fast_accum", "reference"},
      {"loss", "fused_cuda_fp8_rowwise", "fused_cuda"}};
  for (const auto& [seam, name, fallback] : rows) {
    const auto* row = find_backend(seam, name);
    ASSERT_NE(row, nullptr) << name;
    EXPECT_TRUE(row->changes_numerics && row->fp8_gemms) << name;
    EXPECT_EQ(row->fallback, fallback);
    DeviceInfo hopper{.cuda = true, .sm_major = 9, .sm_minor = 0, .dtype = "bf16", .model = {}};
    EXPECT_EQ(row->unavailable_reason(hopper), "") << name;
    EXPECT_NE(row->unavailable_reason(DeviceInfo{}).find("CUDA"), std::string::npos) << name;
    DeviceInfo ampere = hopper;
    ampere.sm_major = 8;
    EXPECT_NE(row->unavailable_reason(ampere).find("compute capability"), std::string::npos) << name;
    DeviceInfo fp32 = hopper;
    fp32.dtype = "fp32";
    EXPECT_NE(row->unavailable_reason(fp32).find("train.dtype = \"bf16\""), std::string::npos) << name;
    DeviceInfo odd = hopper;
    odd.model.projection_alignment = 8;
    EXPECT_NE(row->unavailable_reason(odd).find("multiples of 16"), std::string::npos) << name;
#if !defined(ABLATE_HAVE_CUDA)
    EXPECT_EQ(why_unavailable(*row, hopper), "built without CUDA") << name;
#endif
  }
  EXPECT_FALSE(find_backend("dense_gemm", "reference")->changes_numerics);
  EXPECT_FALSE(find_backend("loss", "fused_cuda")->changes_numerics);
}

#if defined(ABLATE_HAVE_CUDA)
TEST(Fp8Cuda, QuantiseMatchesTheReferenceBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(9);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{80, 48}, {16, 1040}, {208, 144}, {64, 64}})
    for (const auto input : {torch::kBFloat16, torch::kFloat})
      for (const auto scaling : {Scaling::tensorwise, Scaling::rowwise})
        for (const auto dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2})
          for (const bool power_of_two : {false, true}) {
            auto x = random_normal(shape, gen, 3.0).to(torch::kCUDA, input);
            x[1].zero_();  // a row whose amax is 0
            const auto o = fp8_options(scaling, dtype, power_of_two);
            const auto got = quantize(x, o), want = quantize_reference(x, o);
            const auto label = ::testing::Message() << "shape " << shape[0] << "x" << shape[1] << " input " << input
                                                    << " rowwise " << (scaling == Scaling::rowwise) << " " << dtype
                                                    << " pow2 " << power_of_two;
            EXPECT_TRUE(same_bits(got.rows, want.rows)) << label;
            EXPECT_TRUE(same_bits(got.cols, want.cols)) << label;
            EXPECT_TRUE(same_bits(got.rows_inverse, want.rows_inverse)) << label;
            EXPECT_TRUE(same_bits(got.cols_inverse, want.cols_inverse)) << label;
          }
}

// Over several calls (a growing amax, so later calls saturate), the one pass's outputs and the history
// it leaves match the reference's bit for bit; 1024 x 1040 is 272 blocks, whichever finishes last rolls.
TEST(Fp8Cuda, DelayedQuantiseMatchesTheReferenceBitForBitOverCalls) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(10);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{80, 48}, {16, 1040}, {208, 144}, {1024, 1040}})
    for (const auto input : {torch::kBFloat16, torch::kFloat})
      for (const auto dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2})
        for (const bool power_of_two : {false, true}) {
          const auto o = fp8_options(Scaling::tensorwise, dtype, power_of_two);
          auto history = new_amax_history(torch::kCUDA), expected = new_amax_history(torch::kCUDA);
          for (int call = 0; call < 4; ++call) {
            auto x = random_normal(shape, gen, 1.0 + call).to(torch::kCUDA, input);
            if (call == 3) x[3][5] = std::numeric_limits<float>::infinity();
            const auto got = quantize_delayed(x, history, o), want = quantize_delayed_reference(x, expected, o);
            const auto label = ::testing::Message() << "shape " << shape[0] << "x" << shape[1] << " input " << input
                                                    << " " << dtype << " pow2 " << power_of_two << " call " << call;
            EXPECT_TRUE(same_bits(got.rows, want.rows)) << label;
            EXPECT_TRUE(same_bits(got.cols, want.cols)) << label;
            EXPECT_TRUE(same_bits(got.rows_inverse, want.rows_inverse)) << label;
            EXPECT_TRUE(same_bits(got.cols_inverse, want.cols_inverse)) << label;
            EXPECT_TRUE(same_bits(history, expected)) << label << ": " << history.cpu() << " vs " << expected.cpu();
          }
        }
}

// The pass reads and writes its history on the device only: captured once, each replay scales by the
// calls before it, as eager calls do.
TEST(Fp8Cuda, DelayedQuantiseReplaysInACudaGraphAsEagerCallsDo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(11);
  const auto o = fp8_options(Scaling::tensorwise);
  auto x = random_normal({128, 192}, gen).to(torch::kCUDA, torch::kBFloat16);
  auto history = new_amax_history(torch::kCUDA), expected = new_amax_history(torch::kCUDA);
  const auto side = c10::cuda::getStreamFromPool(false, 0);
  c10::cuda::CUDAStreamGuard on_side(side);
  quantize_delayed(x, history, o);  // allocations outside the capture
  quantize_delayed_reference(x, expected, o);
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  const auto captured = quantize_delayed(x, history, o);
  graph.capture_end();
  for (int replay = 0; replay < 3; ++replay) {
    x.copy_(random_normal({128, 192}, gen, 1.0 + replay));
    graph.replay();
    const auto want = quantize_delayed_reference(x, expected, o);
    side.synchronize();
    EXPECT_TRUE(same_bits(captured.rows, want.rows)) << replay;
    EXPECT_TRUE(same_bits(captured.rows_inverse, want.rows_inverse)) << replay;
    EXPECT_TRUE(same_bits(history, expected)) << replay;
  }
}

TEST(Fp8Cuda, QuantiseRefusesSizesFp8GemmsCannotTake) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  EXPECT_THROW(quantize(torch::ones({16, 20}, torch::kCUDA), fp8_options(Scaling::rowwise)), c10::Error);
  EXPECT_THROW(quantize(torch::ones({16, 16}), fp8_options(Scaling::rowwise)), c10::Error);  // on the CPU
}

// The backends on inputs the scaling must not turn into garbage: zeros stay zeros, an inf poisons every
// output its scale reaches (NaN: the loss turns non-finite and the run stops, never trains on it).
TEST(Fp8Cuda, DenseGemmOfZerosIsZeroAndOfAnInfIsNan) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(13);
  const auto w = random_normal({48, 64}, gen, 0.1).to(torch::kCUDA, torch::kFloat);
  for (const char* name : {"fp8_tensorwise", "fp8_rowwise"}) {
    const auto& gemm = implementations().dense_gemm.at(name);
    ablate::testing::Bf16Autocast autocast;
    const auto zeros = gemm(torch::zeros({2, 16, 64}, torch::dtype(torch::kBFloat16).device(torch::kCUDA)), w, {});
    EXPECT_TRUE(torch::equal(zeros.to(torch::kFloat), torch::zeros({2, 16, 48}, torch::kCUDA))) << name;
    auto x = random_normal({32, 64}, gen).to(torch::kCUDA, torch::kBFloat16);
    x[4][9] = std::numeric_limits<float>::infinity();
    const auto y = gemm(x, w, {}).to(torch::kFloat).cpu();
    EXPECT_TRUE(torch::isnan(y[4]).all().item<bool>()) << name << ": the row holding the inf";
    if (std::string(name) == "fp8_rowwise")
      EXPECT_EQ(torch::isnan(y).sum().item<int64_t>(), 48) << "rowwise: only that row";
    else
      EXPECT_TRUE(torch::isnan(y).all().item<bool>()) << "tensorwise: the one scale reaches every output";
  }
}

// fp8_delayed at one projection: its first call scales as tensorwise (current scaling) does, forward and
// backward (each operand enters its own amax before it casts); later calls take the earlier calls' scale,
// so an x four times larger saturates where tensorwise rescales, and another weight keeps its own history.
TEST(Fp8Cuda, DelayedDenseGemmStartsAsTensorwiseAndThenScalesByEarlierCalls) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(14);
  const auto& delayed = implementations().dense_gemm.at("fp8_delayed");
  const auto& tensorwise = implementations().dense_gemm.at("fp8_tensorwise");
  const auto w = random_normal({48, 64}, gen, 0.1).to(torch::kCUDA, torch::kFloat);
  const auto x = random_normal({32, 64}, gen).to(torch::kCUDA, torch::kBFloat16);
  const auto dy = random_normal({32, 48}, gen).to(torch::kCUDA, torch::kBFloat16);
  // {y, dx, dW} of one call. The histories are kept by the weight tensor itself, as a model's parameter
  // is passed every step (a detached copy would be a new projection).
  const auto call = [&](const DenseGemmFn& gemm, const Tensor& weight, const Tensor& input, double scale) {
    auto xi = (input * scale).detach().requires_grad_(true);
    Tensor y;
    {
      ablate::testing::Bf16Autocast autocast;
      y = gemm(xi, weight, {});
    }
    const auto grads = torch::autograd::grad({y}, {xi, weight}, {dy * scale});
    return std::vector<Tensor>{y.detach(), grads[0], grads[1]};
  };
  w.requires_grad_(true);
  const auto first = call(delayed, w, x, 1.0), current = call(tensorwise, w, x, 1.0);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(torch::equal(first[i], current[i])) << "output " << i;
  const auto again = call(delayed, w, x, 1.0);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(torch::equal(again[i], current[i])) << "same amax, output " << i;
  const auto larger = call(delayed, w, x, 4.0), rescaled = call(tensorwise, w, x, 4.0);
  EXPECT_FALSE(torch::equal(larger[0], rescaled[0])) << "the past scale saturates x's larger values";
  EXPECT_FALSE(torch::equal(larger[2], rescaled[2])) << "and dy's";
  const auto w2 = random_normal({48, 64}, gen, 0.1).to(torch::kCUDA, torch::kFloat).requires_grad_(true);
  const auto own = call(delayed, w2, x, 4.0), own_current = call(tensorwise, w2, x, 4.0);
  for (size_t i = 0; i < own.size(); ++i) EXPECT_TRUE(torch::equal(own[i], own_current[i])) << "new weight, output " << i;
}

// fp8_delayed_fast_accum is fp8_delayed with its gradients' GEMMs in fast accumulation. Each backend gets
// a weight of its own (the histories are kept by the weight), so both quantise the same operands with the
// same scales: the forward (fast in both) is the same bit for bit, while over long inner dimensions
// (dW sums 8192 tokens, dx 1024 output columns) the gradients differ, which shows the flag reaches the
// GEMMs, by no more than reduced-precision partial sums explain. Those keep ~14 mantissa bits and are
// folded once per 32-deep MMA: over K / 32 folds a random walk of 2^-14 errors is ~0.1 % of the sum at
// K = 8192, a one-signed truncation bias up to ~0.5 %; DeepSeek-V3 measured up to ~2 % at K = 4096 on
// real data. 0.05 of the largest gradient is far below what a wrong operand, scale or transpose gives
// (O(1)) and below the FP8 casts' own error (parity rows: 0.16).
TEST(Fp8Cuda, DelayedFastAccumDiffersFromDelayedOnlyInTheGradientsAccumulation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(16);
  const int64_t tokens = 8192, in = 256, out = 1024;
  const auto x = random_normal({tokens, in}, gen).to(torch::kCUDA, torch::kBFloat16);
  const auto dy = random_normal({tokens, out}, gen).to(torch::kCUDA, torch::kBFloat16);
  const auto w = random_normal({out, in}, gen, 1.0 / std::sqrt(double(in))).to(torch::kCUDA, torch::kFloat);
  const auto call = [&](const char* backend) {
    const auto weight = w.clone().requires_grad_(true);
    auto xi = x.detach().requires_grad_(true);
    Tensor y;
    {
      ablate::testing::Bf16Autocast autocast;
      y = implementations().dense_gemm.at(backend)(xi, weight, {});
    }
    const auto grads = torch::autograd::grad({y}, {xi, weight}, {dy});
    return std::vector<Tensor>{y.detach(), grads[0], grads[1]};
  };
  const auto promoted = call("fp8_delayed"), fast = call("fp8_delayed_fast_accum");
  EXPECT_TRUE(torch::equal(promoted[0], fast[0])) << "the forward: the same quantised operands, both fast";
  for (const size_t i : {size_t{1}, size_t{2}}) {
    const auto a = promoted[i].to(torch::kFloat), b = fast[i].to(torch::kFloat);
    EXPECT_FALSE(torch::equal(a, b)) << (i == 1 ? "dx" : "dW") << ": fast accumulation changes the sums";
    const double error = ((a - b).abs().max() / a.abs().max()).item<double>();
    RecordProperty(i == 1 ? "dx_relative_difference" : "dw_relative_difference", std::to_string(error));
    std::cout << (i == 1 ? "dx" : "dW") << " fast vs promoted accumulation: " << error << " of the largest\n";
    EXPECT_LE(error, 0.05) << (i == 1 ? "dx" : "dW");
  }
}

// An inf reaches delayed scaling's output as NaN in its row (not saturated), and the next call, whose
// scale has the inf in its history, is NaN throughout.
TEST(Fp8Cuda, DelayedDenseGemmTurnsAnInfToNanAndPoisonsTheNextCall) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(15);
  const auto& gemm = implementations().dense_gemm.at("fp8_delayed");
  const auto w = random_normal({48, 64}, gen, 0.1).to(torch::kCUDA, torch::kFloat);
  auto x = random_normal({32, 64}, gen).to(torch::kCUDA, torch::kBFloat16);
  ablate::testing::Bf16Autocast autocast;
  EXPECT_TRUE(torch::isfinite(gemm(x, w, {})).all().item<bool>());
  auto poisoned = x.clone();
  poisoned[4][9] = std::numeric_limits<float>::infinity();
  const auto y = gemm(poisoned, w, {}).to(torch::kFloat).cpu();
  EXPECT_TRUE(torch::isnan(y[4]).all().item<bool>()) << "the row holding the inf";
  EXPECT_EQ(torch::isnan(y).sum().item<int64_t>(), 48) << "only that row: the scale came from the past";
  EXPECT_TRUE(torch::isnan(gemm(x, w, {})).all().item<bool>()) << "the next call's scale holds the inf";
}

TEST(Fp8Cuda, DenseGemmOutsideBf16AutocastIsAnError) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const auto x = torch::ones({16, 32}, torch::kCUDA), w = torch::ones({16, 32}, torch::kCUDA);
  EXPECT_THROW(implementations().dense_gemm.at("fp8_rowwise")(x, w, {}), c10::Error);
}

// The FP8 LM head (loss fused_cuda_fp8_rowwise) as the model calls it: bf16 hidden, the fp32 master head
// weight, under bf16 autocast. Returns {loss, d hidden, d W}.
std::vector<Tensor> fp8_head(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const Tensor& mask,
                             int64_t chunk_rows) {
  auto h = hidden.detach().requires_grad_(true);
  auto w = weight.detach().requires_grad_(true);
  ablate::testing::Bf16Autocast autocast;
  auto loss = fused::linear_cross_entropy(h, w, targets, mask, fused::LossReduction::mean, chunk_rows,
                                          fused::HeadGemms::fp8_rowwise);
  loss.backward();
  return {loss.detach().cpu(), h.grad().to(torch::kFloat).cpu(), w.grad().cpu()};
}

struct HeadInputs {
  Tensor hidden, weight, targets, mask;
};

HeadInputs head_inputs(int64_t N, int64_t d, int64_t V, uint64_t seed) {
  auto gen = seeded_generator(seed);
  HeadInputs in;
  in.hidden = random_normal({N, d}, gen).to(torch::kCUDA, torch::kBFloat16);
  in.weight = random_normal({V, d}, gen, 0.5).to(torch::kCUDA, torch::kFloat);
  in.targets = torch::randint(V, {N}, gen, torch::kLong).to(torch::kCUDA);
  in.mask = (testing::random_uniform({N}, gen, 0, 1) > 0.2).to(torch::kCUDA, torch::kFloat);
  return in;
}

// Chunks split the rows: the logits, the loss and d hidden are quantised per row, so they are the same
// bits whatever the chunking; dW's operands are quantised along each chunk's rows (per column over the
// chunk), so it moves by FP8 rounding only (the parity bound's 0.16 of its scale), not by a missed chunk.
TEST(Fp8Head, SeveralChunksComputeWhatOneChunkDoes) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const auto in = head_inputs(96, 64, 160, 21);
  const auto one = fp8_head(in.hidden, in.weight, in.targets, in.mask, 0);
  const auto three = fp8_head(in.hidden, in.weight, in.targets, in.mask, 32);
  EXPECT_TRUE(torch::equal(one[0], three[0])) << one[0] << " vs " << three[0];
  EXPECT_TRUE(torch::equal(one[1], three[1])) << "d hidden";
  EXPECT_LE((one[2] - three[2]).abs().max().item<double>(), 0.16 * one[2].abs().max().item<double>()) << "dW";
  EXPECT_GT(three[2].abs().max().item<double>(), 0.0) << "dW of three chunks is not all zero";
  // A chunk size that is not a multiple of 16 is rounded down to one (the weight gradient's GEMM takes
  // each chunk along its rows).
  const auto odd = fp8_head(in.hidden, in.weight, in.targets, in.mask, 40);
  EXPECT_TRUE(torch::equal(one[1], odd[1]));
}

// Zeros stay zeros (a zero hidden state gives uniform logits, log V each), an inf poisons the loss.
TEST(Fp8Head, ZeroHiddenGivesLogVAndAnInfGivesNan) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto in = head_inputs(32, 48, 64, 22);
  in.mask.fill_(1.0);
  const auto zero = fp8_head(torch::zeros_like(in.hidden), in.weight, in.targets, in.mask, 0);
  EXPECT_NEAR(zero[0].item<double>(), std::log(64.0), 1e-5);
  in.hidden[3][7] = std::numeric_limits<float>::infinity();
  const auto poisoned = fp8_head(in.hidden, in.weight, in.targets, in.mask, 0);
  EXPECT_TRUE(std::isnan(poisoned[0].item<double>()));
}

TEST(Fp8Head, SizesFp8GemmsCannotTakeAreAnError) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const auto in = head_inputs(32, 48, 72, 23);  // V 72: not a multiple of 16
  try {
    fp8_head(in.hidden, in.weight, in.targets, in.mask, 0);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fused::linear_cross_entropy(in.hidden, in.weight, in.targets, in.mask, fused::LossReduction::none, 0,
                                           fused::HeadGemms::fp8_rowwise),
               c10::Error);
}
#endif

}  // namespace
}  // namespace ablate::kernels::fp8
