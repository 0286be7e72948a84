// tests/kernels/fp8_experts_test.cpp: the FP8 expert GEMMs (moe_dispatch grouped_mm_fp8_rowwise) beyond the
// parity driver's rows against fp64 (tests/kernels/parity_test.cpp, `*Parity*moe_dispatch_grouped_mm_fp8*`):
// the quantisation layouts the expert GEMMs read (kernels/dense_gemm/fp8_quantize.h: stacked weights,
// token groups padded to 16 with a scale per group and column) and the backend's scaling edge cases.
// On the CPU: the reference layouts against the one-matrix reference already checked by hand
// (fp8_test.cpp), all-zero and empty groups, an outlier and an inf kept to their own group, and the
// catalog row unavailable with its reason. On a GPU: the CUDA kernels bit for bit against the references,
// and the backend on zeros, an empty expert, an inf, outside its posture, and inside a CUDA graph.
// Run: build/tests/kernels_tests --gtest_filter='Fp8Experts*'
#include <gtest/gtest.h>

#include <limits>

#include "kernels/catalog.h"
#include "kernels/dense_gemm/fp8_quantize.h"
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/fp8_checks.h"
#include "tests/kernels/tensor_checks.h"
#include "tests/model/bf16_autocast.h"

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ablate::kernels::fp8 {
namespace {

using testing::random_normal;
using testing::seeded_generator;
using torch::Tensor;
using testing::as_float;
using testing::same_bits;

QuantizeOptions rowwise(bool power_of_two = true, at::ScalarType dtype = at::kFloat8_e4m3fn) {
  return testing::fp8_options(Scaling::rowwise, dtype, power_of_two);
}

Tensor int32(std::vector<int> values) { return torch::tensor(values, torch::kInt); }

TEST(Fp8ExpertsReference, StackedMatricesAreEachQuantisedAsOneMatrix) {
  auto gen = seeded_generator(21);
  const auto top = random_normal({3, 16, 48}, gen, 2.0).to(torch::kFloat);
  const auto bottom = random_normal({3, 32, 48}, gen, 0.5).to(torch::kFloat);
  const auto q = quantize_stacked_reference(top, bottom, rowwise());
  ASSERT_EQ(q.rows.sizes(), (std::vector<int64_t>{3, 48, 48}));
  ASSERT_EQ(q.cols.sizes(), (std::vector<int64_t>{3, 48, 48}));
  ASSERT_EQ(q.rows_inverse.sizes(), (std::vector<int64_t>{3, 48}));
  ASSERT_EQ(q.cols_inverse.sizes(), (std::vector<int64_t>{3, 48}));
  for (int64_t b = 0; b < 3; ++b) {
    // Each expert's [top; bottom] on its own: its rows' scales, and its columns' over both parts.
    const auto one = quantize_reference(torch::cat({top[b], bottom[b]}), rowwise());
    EXPECT_TRUE(same_bits(q.rows[b], one.rows)) << b;
    EXPECT_TRUE(same_bits(q.cols[b], one.cols)) << b;
    EXPECT_TRUE(same_bits(q.rows_inverse[b], one.rows_inverse)) << b;
    EXPECT_TRUE(same_bits(q.cols_inverse[b], one.cols_inverse)) << b;
  }
  // Without a bottom stack: the top matrices alone.
  const auto alone = quantize_stacked_reference(top, Tensor(), rowwise());
  EXPECT_TRUE(same_bits(alone.rows[1], quantize_reference(top[1], rowwise()).rows));
}

TEST(Fp8ExpertsReference, EachGroupIsPaddedToAMultipleOf16AndAnEmptyOneTo16) {
  // Loads 3, 0, 37, 16 -> 16, 16, 48, 16.
  const auto padded = padded_group_ends(int32({3, 3, 40, 56}));
  EXPECT_TRUE(torch::equal(padded, int32({16, 32, 80, 96}))) << padded;
  EXPECT_EQ(padded.scalar_type(), torch::kInt);
  EXPECT_EQ(padded_rows(56, 4), 64 + 64);
  EXPECT_EQ(padded_rows(0, 2), 32);
  EXPECT_TRUE(torch::equal(padded_group_ends(int32({0})), int32({16})));
  EXPECT_THROW(padded_group_ends(torch::tensor({4, 8}, torch::kLong)), c10::Error);
}

// Tokens of 4 groups: group 0 of 5 rows, group 1 empty, group 2 all zeros (3 rows), group 3 of 20 rows.
struct Grouped {
  Tensor x, group_end, padded_end;
  int64_t rows_out;
};
Grouped grouped_tokens(at::Generator& gen, int64_t columns = 32) {
  auto x = random_normal({28, columns}, gen, 3.0).to(torch::kFloat);
  x.narrow(0, 5, 3).zero_();
  const auto group_end = int32({5, 5, 8, 28});
  return {x, group_end, padded_group_ends(group_end), padded_rows(28, 4)};
}

TEST(Fp8ExpertsReference, GroupedColumnsScalePerGroupAndColumnWithZerosBetweenGroups) {
  auto gen = seeded_generator(22);
  const auto in = grouped_tokens(gen);
  const auto q = quantize_grouped_reference(in.x, in.group_end, in.padded_end, in.rows_out, rowwise());
  // Rows: one scale per token row, as for any matrix.
  EXPECT_TRUE(same_bits(q.rows, quantize_reference(in.x, rowwise()).rows));
  ASSERT_EQ(q.cols.sizes(), (std::vector<int64_t>{32, in.rows_out}));
  ASSERT_EQ(q.cols_inverse.sizes(), (std::vector<int64_t>{4, 32}));
  // Padded starts 0, 16, 32, 48 (ends 16, 32, 48, 80).
  EXPECT_TRUE(torch::equal(in.padded_end, int32({16, 32, 48, 80})));
  const auto group0 = quantize_reference(in.x.narrow(0, 0, 5), rowwise());
  EXPECT_TRUE(same_bits(q.cols.narrow(1, 0, 5), group0.cols));
  EXPECT_TRUE(same_bits(q.cols_inverse[0], group0.cols_inverse));
  const auto group3 = quantize_reference(in.x.narrow(0, 8, 20), rowwise());
  EXPECT_TRUE(same_bits(q.cols.narrow(1, 48, 20), group3.cols));
  EXPECT_TRUE(same_bits(q.cols_inverse[3], group3.cols_inverse));
  // The empty group and the all-zero group: zeros with unit scales; padding zero everywhere.
  EXPECT_TRUE(torch::equal(q.cols_inverse[1], torch::ones({32})));
  EXPECT_TRUE(torch::equal(q.cols_inverse[2], torch::ones({32})));
  auto data = torch::zeros({in.rows_out}, torch::kBool);
  data.narrow(0, 0, 5).fill_(true);
  data.narrow(0, 48, 20).fill_(true);
  const auto outside = as_float(q.cols).index({torch::indexing::Slice(), torch::logical_not(data)});
  EXPECT_TRUE(torch::equal(outside, torch::zeros_like(outside)));
}

TEST(Fp8ExpertsReference, AnOutlierCostsOnlyItsOwnGroupsColumn) {
  auto gen = seeded_generator(23);
  auto in = grouped_tokens(gen);
  const auto clean = quantize_grouped_reference(in.x, in.group_end, in.padded_end, in.rows_out, rowwise());
  in.x[2][7] = 1e5f;  // group 0, column 7
  const auto q = quantize_grouped_reference(in.x, in.group_end, in.padded_end, in.rows_out, rowwise());
  // Group 3's columns and every other column of group 0 keep their scales and values.
  EXPECT_TRUE(same_bits(q.cols.narrow(1, 48, 20), clean.cols.narrow(1, 48, 20)));
  EXPECT_TRUE(same_bits(q.cols_inverse[3], clean.cols_inverse[3]));
  const auto others = torch::cat({torch::arange(0, 7), torch::arange(8, 32)});
  EXPECT_TRUE(same_bits(q.cols.narrow(1, 0, 5).index_select(0, others), clean.cols.narrow(1, 0, 5).index_select(0, others)));
  EXPECT_GT(q.cols_inverse[0][7].item<float>(), 100 * clean.cols_inverse[0][7].item<float>());
}

TEST(Fp8ExpertsReference, AnInfOrNanMakesItsRowAndItsGroupsColumnNan) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto gen = seeded_generator(24);
    auto in = grouped_tokens(gen);
    in.x[10][3] = bad;  // group 3, column 3
    const auto q = quantize_grouped_reference(in.x, in.group_end, in.padded_end, in.rows_out, rowwise());
    const auto rows = as_float(q.rows), cols = as_float(q.cols);
    EXPECT_TRUE(torch::isnan(rows[10]).all().item<bool>()) << bad;
    EXPECT_EQ(torch::isnan(rows).sum().item<int64_t>(), 32) << "only its row (" << bad << ")";
    EXPECT_TRUE(torch::isnan(cols[3].narrow(0, 48, 20)).all().item<bool>()) << bad;
    EXPECT_EQ(torch::isnan(cols).sum().item<int64_t>(), 20) << "only its group's column (" << bad << ")";
    EXPECT_TRUE(std::isnan(q.cols_inverse[3][3].item<float>())) << bad;
    EXPECT_EQ(torch::isnan(q.cols_inverse).sum().item<int64_t>(), 1) << bad;
  }
}

TEST(Fp8ExpertsCatalog, TheRowChangesNumericsAndNeedsABf16HopperRunWithWidthsOf16) {
  const auto* row = find_backend("moe_dispatch", "grouped_mm_fp8_rowwise");
  ASSERT_NE(row, nullptr);
  EXPECT_TRUE(row->changes_numerics && row->fp8_gemms);
  EXPECT_EQ(row->fallback, "grouped_mm");
  EXPECT_EQ(row->capture, Capture::always) << "no host read: captured as grouped_mm is";
  DeviceInfo hopper{.cuda = true, .sm_major = 9, .sm_minor = 0, .dtype = "bf16", .model = {}};
  hopper.model.experts = 16;
  hopper.model.expert_alignment = 256;  // nam56r-small: gcd(1024, 768)
  EXPECT_EQ(row->unavailable_reason(hopper), "");
  EXPECT_EQ(row->unavailable_reason(DeviceInfo{}), "needs a CUDA device");
  DeviceInfo ampere = hopper;
  ampere.sm_major = 8;
  EXPECT_NE(row->unavailable_reason(ampere).find("compute capability"), std::string::npos);
  DeviceInfo fp32 = hopper;
  fp32.dtype = "fp32";
  EXPECT_NE(row->unavailable_reason(fp32).find("train.dtype = \"bf16\""), std::string::npos);
  DeviceInfo odd = hopper;
  odd.model.expert_alignment = 8;
  EXPECT_NE(row->unavailable_reason(odd).find("multiples of 16"), std::string::npos);
  EXPECT_NE(row->unavailable_reason(odd).find("moe_dispatch = \"grouped_mm\""), std::string::npos);
#if defined(ABLATE_HAVE_CUDA)
  EXPECT_EQ(why_unavailable(*row, DeviceInfo{}), "needs a CUDA device");
#else
  EXPECT_EQ(why_unavailable(*row, hopper), "built without CUDA");
#endif
  // On this machine's CPU the run falls back to the bf16 grouped GEMMs, saying why.
  Resolution r;
  std::string error;
  DeviceInfo cpu;
  cpu.dtype = "bf16";
  ASSERT_TRUE(resolve("moe_dispatch", "grouped_mm_fp8_rowwise", cpu, false, r, error)) << error;
  EXPECT_EQ(r.chosen, "grouped_mm");
  EXPECT_NE(r.reason.find("grouped_mm_fp8_rowwise unavailable"), std::string::npos) << r.reason;
}

#if defined(ABLATE_HAVE_CUDA)
TEST(Fp8ExpertsCuda, StackedQuantiseMatchesTheReferenceBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(25);
  struct Shape {
    int64_t batches, top, bottom, columns;
  };
  for (const auto& s : std::vector<Shape>{{1, 16, 0, 64}, {3, 48, 48, 80}, {2, 80, 0, 144}, {4, 32, 16, 1040}})
    for (const auto input : {torch::kBFloat16, torch::kFloat})
      for (const auto dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2})
        for (const bool power_of_two : {false, true}) {
          const auto top = random_normal({s.batches, s.top, s.columns}, gen, 3.0).to(torch::kCUDA, input);
          const auto bottom = s.bottom == 0 ? Tensor()
                                            : random_normal({s.batches, s.bottom, s.columns}, gen, 0.1).to(torch::kCUDA, input);
          top[0][1].zero_();  // a row whose amax is 0
          const auto o = rowwise(power_of_two, dtype);
          const auto got = quantize_stacked(top, bottom, o), want = quantize_stacked_reference(top, bottom, o);
          const auto label = ::testing::Message() << s.batches << "x(" << s.top << "+" << s.bottom << ")x" << s.columns
                                                  << " " << input << " " << dtype << " pow2 " << power_of_two;
          EXPECT_TRUE(same_bits(got.rows, want.rows)) << label;
          EXPECT_TRUE(same_bits(got.cols, want.cols)) << label;
          EXPECT_TRUE(same_bits(got.rows_inverse, want.rows_inverse)) << label;
          EXPECT_TRUE(same_bits(got.cols_inverse, want.cols_inverse)) << label;
        }
  EXPECT_THROW(quantize_stacked(torch::ones({2, 20, 16}, torch::kCUDA), Tensor(), rowwise()), c10::Error);
}

TEST(Fp8ExpertsCuda, GroupedQuantiseMatchesTheReferenceBitForBit) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto gen = seeded_generator(26);
  struct Case {
    std::vector<int> ends;  // group ends; the last is S
    int64_t columns;
  };
  // Groups across tile rows (64) and within one, empty groups first, between and last, one row, no row.
  for (const auto& c : std::vector<Case>{{{5, 5, 8, 28}, 32},
                                         {{0, 70, 71, 200}, 80},
                                         {{1}, 16},
                                         {{0, 0, 0}, 48},
                                         {{64, 128, 130, 130}, 144},
                                         {{17, 300, 301, 333, 700}, 1040}})
    for (const auto input : {torch::kBFloat16, torch::kFloat})
      for (const bool power_of_two : {false, true})
        for (const auto& [rows, cols] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
          const int64_t S = c.ends.back(), G = static_cast<int64_t>(c.ends.size());
          auto x = random_normal({S, c.columns}, gen, 3.0).to(torch::kCUDA, input);
          if (S > 2) x[1].zero_();
          const auto group_end = int32(c.ends).to(torch::kCUDA);
          const auto padded_end = padded_group_ends(group_end);
          auto o = rowwise(power_of_two);
          o.rows = rows;
          o.cols = cols;
          const auto got = quantize_grouped(x, group_end, padded_end, padded_rows(S, G), o);
          const auto want = quantize_grouped_reference(x, group_end, padded_end, padded_rows(S, G), o);
          const auto label = ::testing::Message() << "S " << S << " G " << G << " C " << c.columns << " " << input
                                                  << " pow2 " << power_of_two << " rows " << rows << " cols " << cols;
          EXPECT_TRUE(same_bits(got.rows, want.rows)) << label;
          EXPECT_TRUE(same_bits(got.cols, want.cols)) << label;
          EXPECT_TRUE(same_bits(got.rows_inverse, want.rows_inverse)) << label;
          EXPECT_TRUE(same_bits(got.cols_inverse, want.cols_inverse)) << label;
        }
  const auto ends = int32({8}).to(torch::kCUDA);
  EXPECT_THROW(quantize_grouped(torch::ones({8, 16}, torch::kCUDA), ends, padded_group_ends(ends), 16, rowwise()),
               c10::Error);  // 16 columns cannot hold 8 rows plus a group's padding
}

// The backend at a small shape: T tokens, d 64, E 4 experts, k 2, f 48, under bf16 autocast with fp32
// master weights, as the model trains.
struct Experts {
  Tensor x, top_idx, top_w, w1, w3, w2;
};
Experts experts(at::Generator& gen, int64_t T, const Tensor& top_idx) {
  constexpr int64_t d = 64, E = 4, f = 48;
  const auto cuda = torch::kCUDA;
  Experts e;
  e.x = random_normal({T, d}, gen).to(cuda, torch::kFloat).requires_grad_(true);
  e.top_idx = top_idx.to(cuda);
  e.top_w = torch::full({T, top_idx.size(1)}, 1.0 / double(top_idx.size(1)), torch::TensorOptions(cuda));
  e.w1 = random_normal({E, f, d}, gen, 0.125).to(cuda, torch::kFloat).requires_grad_(true);
  e.w3 = random_normal({E, f, d}, gen, 0.125).to(cuda, torch::kFloat).requires_grad_(true);
  e.w2 = random_normal({E, d, f}, gen, 0.14).to(cuda, torch::kFloat).requires_grad_(true);
  return e;
}
// y, then the gradients {dx, dw1, dw3, dw2} of sum(y * g).
std::vector<Tensor> run(const Experts& e, const std::string& backend, const Tensor& g) {
  ablate::testing::Bf16Autocast autocast;
  const auto y = implementations().moe_dispatch.at(backend)(e.x, e.top_idx, e.top_w, e.w1, e.w3, e.w2, 0.0, nullptr, nullptr);
  auto grads = torch::autograd::grad({(y.to(torch::kFloat) * g).sum()}, {e.x, e.w1, e.w3, e.w2});
  grads.insert(grads.begin(), y.to(torch::kFloat));
  return grads;
}
bool available() {
  return torch::cuda::is_available() && has_implementation("moe_dispatch", "grouped_mm_fp8_rowwise") &&
         why_unavailable(*find_backend("moe_dispatch", "grouped_mm_fp8_rowwise"),
                         describe_device(torch::Device(torch::kCUDA, 0), torch::kBFloat16))
             .empty();
}

TEST(Fp8ExpertsCuda, ZerosGiveZerosAndAnEmptyExpertAZeroWeightGradient) {
  if (!available()) GTEST_SKIP() << "needs a Hopper GPU";
  auto gen = seeded_generator(27);
  // Every token on experts 0 and 2: experts 1 and 3 get no rows.
  const int64_t T = 40;
  const auto top_idx = torch::stack({torch::zeros({T}, torch::kLong), torch::full({T}, 2, torch::kLong)}, 1);
  auto e = experts(gen, T, top_idx);
  const auto g = random_normal({T, 64}, gen).to(torch::kCUDA, torch::kFloat);
  const auto out = run(e, "grouped_mm_fp8_rowwise", g);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(torch::isfinite(out[i]).all().item<bool>()) << "output " << i;
  for (const int64_t empty : {1, 3})
    for (size_t i = 2; i < out.size(); ++i)
      EXPECT_TRUE(torch::equal(out[i][empty], torch::zeros_like(out[i][empty]))) << "expert " << empty << " grad " << i;
  // Close to the bf16 grouped GEMMs (the parity driver bounds it against fp64).
  const auto bf16 = run(e, "grouped_mm", g);
  EXPECT_LE(testing::relative_error(out[0], bf16[0]), 0.2);
  // All-zero tokens: zero outputs and input gradients (every scale 1, nothing to round).
  {
    torch::NoGradGuard no_grad;
    e.x.zero_();
  }
  const auto zeros = run(e, "grouped_mm_fp8_rowwise", g);
  EXPECT_TRUE(torch::equal(zeros[0], torch::zeros_like(zeros[0])));
  EXPECT_TRUE(torch::equal(zeros[2], torch::zeros_like(zeros[2]))) << "dw1 of zero tokens";
}

// An inf in one token reaches what its scales reach: that token's output row, and the weight gradients
// of the experts it went to; every other token's output and the other experts stay finite.
TEST(Fp8ExpertsCuda, AnInfInATokenIsNanInItsOutputAndItsExpertsGradientsOnly) {
  if (!available()) GTEST_SKIP() << "needs a Hopper GPU";
  auto gen = seeded_generator(28);
  const int64_t T = 48;
  const auto top_idx = torch::stack({torch::arange(T, torch::kLong).remainder(2), torch::full({T}, 2, torch::kLong)}, 1);
  auto e = experts(gen, T, top_idx);
  {
    torch::NoGradGuard no_grad;
    e.x[5][9] = std::numeric_limits<float>::infinity();  // token 5: experts 1 and 2
  }
  const auto out = run(e, "grouped_mm_fp8_rowwise", random_normal({T, 64}, gen).to(torch::kCUDA, torch::kFloat));
  const auto y = out[0].cpu();
  EXPECT_TRUE(torch::isnan(y[5]).all().item<bool>());
  EXPECT_EQ(torch::isnan(y).sum().item<int64_t>(), 64) << "only token 5's row";
  const auto dw1 = out[2].cpu();
  EXPECT_TRUE(torch::isnan(dw1[1]).any().item<bool>());
  EXPECT_TRUE(torch::isnan(dw1[2]).any().item<bool>());
  EXPECT_TRUE(torch::isfinite(dw1[0]).all().item<bool>()) << "expert 0 never saw token 5";
  EXPECT_TRUE(torch::equal(dw1[3], torch::zeros_like(dw1[3]))) << "expert 3 saw no token";
}

TEST(Fp8ExpertsCuda, OutsideBf16OrWithWidthsNotOf16IsAnError) {
  if (!available()) GTEST_SKIP() << "needs a Hopper GPU";
  const auto& fn = implementations().moe_dispatch.at("grouped_mm_fp8_rowwise");
  const auto cuda = torch::TensorOptions(torch::kCUDA);
  const auto idx = torch::zeros({16, 1}, cuda.dtype(torch::kLong)), w = torch::ones({16, 1}, cuda);
  // fp32 x without autocast: fp32 GEMMs were asked for.
  EXPECT_THROW(fn(torch::ones({16, 32}, cuda), idx, w, torch::ones({2, 16, 32}, cuda), torch::ones({2, 16, 32}, cuda),
                  torch::ones({2, 32, 16}, cuda), 0.0, nullptr, nullptr),
               c10::Error);
  ablate::testing::Bf16Autocast autocast;
  EXPECT_THROW(fn(torch::ones({16, 24}, cuda), idx, w, torch::ones({2, 16, 24}, cuda), torch::ones({2, 16, 24}, cuda),
                  torch::ones({2, 24, 16}, cuda), 0.0, nullptr, nullptr),
               c10::Error);  // d 24
}

// Forward and backward capture into a CUDA graph (no host read, no data-dependent shape) and replay to the
// eager result, bit for bit, also after new inputs are written into the same storage.
TEST(Fp8ExpertsCuda, ForwardAndBackwardCaptureInACudaGraph) {
  if (!available()) GTEST_SKIP() << "needs a Hopper GPU";
  auto gen = seeded_generator(29);
  const int64_t T = 96;
  auto e = experts(gen, T, torch::stack({torch::arange(T, torch::kLong).remainder(4),
                                         torch::arange(T, torch::kLong).add(1).remainder(3)}, 1));
  const auto g = random_normal({T, 64}, gen).to(torch::kCUDA, torch::kFloat);
  const auto side = c10::cuda::getStreamFromPool(false, 0);
  c10::cuda::CUDAStreamGuard on_side(side);
  for (int i = 0; i < 3; ++i) run(e, "grouped_mm_fp8_rowwise", g);  // workspaces and pools outside the capture
  side.synchronize();
  at::autocast::set_autocast_cache_enabled(false);
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  const auto captured = run(e, "grouped_mm_fp8_rowwise", g);
  graph.capture_end();
  at::autocast::set_autocast_cache_enabled(true);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      torch::NoGradGuard no_grad;
      e.x.mul_(0.5);
      e.w2.mul_(2.0);
    }
    graph.replay();
    const auto eager = run(e, "grouped_mm_fp8_rowwise", g);
    side.synchronize();
    for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(torch::equal(captured[i], eager[i])) << i << " round " << round;
  }
}
#endif

}  // namespace
}  // namespace ablate::kernels::fp8
