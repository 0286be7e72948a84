// tests/kernels/fp8_test.cpp: FP8 quantisation (kernels/dense_gemm/fp8_quantize.h) and the edge cases of
// the FP8 backends (dense_gemm's, the LM head's loss fused_cuda_fp8_rowwise); their parity against fp64
// is the parity driver's (tests/kernels/parity_test.cpp, `*Parity*dense_gemm*`, `*Parity*loss*`). On the CPU: the reference quantisation's
// arithmetic on hand-checked values, an all-zero tensor, an outlier, inf and NaN, and the catalog's FP8
// rows unavailable with their reason. On a GPU: the CUDA kernels bit for bit against the reference, and
// the backends on zeros and non-finite inputs.
// Run: build/tests/kernels_tests --gtest_filter='Fp8*'
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/dense_gemm/fp8_quantize.h"
#include "kernels/registry.h"
#if defined(ABLATE_HAVE_CUDA)
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

TEST(Fp8Catalog, TheFp8RowsChangeNumericsAndNeedABf16RunOnHopperWithAlignedWidths) {
  const std::vector<std::tuple<const char*, const char*, const char*>> rows = {
      {"dense_gemm", "fp8_tensorwise", "reference"},
      {"dense_gemm", "fp8_rowwise", "reference"},
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
