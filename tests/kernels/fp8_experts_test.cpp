// tests/kernels/fp8_experts_test.cpp: the quantisation layouts FP8 expert GEMMs read
// (kernels/dense_gemm/fp8_quantize.h: stacked weights, token groups padded to 16 with a scale per group
// and column). On the CPU: the reference layouts against the one-matrix reference already checked by hand
// (fp8_test.cpp), all-zero and empty groups, an outlier and an inf kept to their own group. On a GPU: the
// CUDA kernels bit for bit against the references.
// Run: build/tests/kernels_tests --gtest_filter='Fp8Experts*'
#include <gtest/gtest.h>

#include <limits>

#include "kernels/dense_gemm/fp8_quantize.h"
#include "tests/kernels/tensor_checks.h"

namespace ablate::kernels::fp8 {
namespace {

using testing::random_normal;
using testing::seeded_generator;
using torch::Tensor;

QuantizeOptions rowwise(bool power_of_two = true, at::ScalarType dtype = at::kFloat8_e4m3fn) {
  QuantizeOptions o;
  o.scaling = Scaling::rowwise;
  o.dtype = dtype;
  o.power_of_two_scales = power_of_two;
  return o;
}

Tensor as_float(const Tensor& fp8) { return fp8.to(torch::kFloat); }

// Bit patterns (NaN compares equal to itself this way).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto as_int = [](const Tensor& t) {
    return t.element_size() == 1 ? t.cpu().contiguous().view(torch::kUInt8) : t.cpu().contiguous().view(torch::kInt32);
  };
  return torch::equal(as_int(a), as_int(b));
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

#endif

}  // namespace
}  // namespace ablate::kernels::fp8
