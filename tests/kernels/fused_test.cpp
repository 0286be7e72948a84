// tests/kernels/fused_test.cpp: properties of the fused CUDA kernels (kernels/<seam>/fused_cuda.cu) that the table-driven
// parity test does not see: dw of residual_norm is bitwise reproducible (two-stage reduction, no
// atomics) over enough rows that every block strides over many of them, and it matches the fp64
// reference there; rows that are not 16-byte aligned take the element-wise path and agree with the
// vectorised one; rope reads the strided views the model's projections produce; the fused linear
// cross-entropy honours a per-row upstream gradient, chunk boundaries and autocast, and refuses a second
// backward. Skip (with the reason) without CUDA.
// Run: build/tests/kernels_tests --gtest_filter='FusedCuda*'
#include <gtest/gtest.h>

#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/tensor_checks.h"

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/autocast_mode.h>

#include "kernels/loss/fused_cuda.h"
#endif

namespace ablate::kernels {
namespace {

using testing::random_normal;
using testing::relative_error;
using testing::seeded_generator;
using torch::Tensor;

// The fused_cuda implementation of a seam, or a skip reason.
#define SKIP_UNLESS_FUSED_CUDA()                                                    \
  do {                                                                              \
    if (!has_implementation("residual_norm", "fused_cuda"))                         \
      GTEST_SKIP() << "fused_cuda unavailable: built without CUDA";                 \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "fused_cuda needs a CUDA device"; \
    const auto dev = describe_device(torch::Device(torch::kCUDA, 0), torch::kFloat); \
    if (const auto why = why_unavailable(*find_backend("residual_norm", "fused_cuda"), dev); !why.empty()) \
      GTEST_SKIP() << "fused_cuda unavailable: " << why;                            \
  } while (0)

// Gradients of <y, gy> + <s, gs> with respect to (x, residual, weight).
std::vector<Tensor> residual_norm_grads(const ResidualNormFn& fn, const Tensor& x, const Tensor& r, const Tensor& w,
                                        const Tensor& gy, const Tensor& gs) {
  const auto leaves = std::vector<Tensor>{x.detach().requires_grad_(true), r.detach().requires_grad_(true),
                                          w.detach().requires_grad_(true)};
  auto [y, s] = fn(leaves[0], leaves[1], leaves[2], 1e-6);
  return torch::autograd::grad({y, s}, leaves, {gy.to(y.scalar_type()), gs.to(s.scalar_type())});
}

TEST(FusedCuda, ResidualNormWeightGradientIsBitwiseReproducibleAndMatchesTheReference) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(11);
  // 65536 rows of nam56r-small's width: more rows than the backward grid has blocks, so each block
  // accumulates many rows before its partial is written.
  const int64_t rows = 65536, d = 1024;
  const auto x = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto r = random_normal({rows, d}, gen, 2.0, torch::kFloat, cuda);
  const auto w = (1.0 + random_normal({d}, gen, 0.3)).to(cuda, torch::kFloat);
  const auto gy = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto gs = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto& fused = implementations().residual_norm.at("fused_cuda");
  const auto first = residual_norm_grads(fused, x, r, w, gy, gs);
  const auto second = residual_norm_grads(fused, x, r, w, gy, gs);
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(torch::equal(first[i], second[i])) << "gradient " << i;
  const auto want = residual_norm_grads(implementations().residual_norm.at("reference"), x.to(torch::kDouble), r.to(torch::kDouble),
                                        w.to(torch::kDouble), gy.to(torch::kDouble), gs.to(torch::kDouble));
  // dw sums 65536 products per column in fp32 (per-thread runs of 16 rows, then 16 slices):
  // relative error ~ 1e-6 expected; 2e-5 leaves room without hiding a wrong sum (which is O(1)).
  EXPECT_LE(relative_error(first[2], want[2]), 2e-5);
  EXPECT_LE(relative_error(first[1], want[1]), 5e-6);
  EXPECT_LE(relative_error(first[0], want[0]), 5e-6);
}

TEST(FusedCuda, UnalignedRowsTakeTheElementwisePathAndAgreeWithTheVectorisedOne) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(12);
  const int64_t rows = 37, d = 1024;
  // One fp32 element in: contiguous rows whose start is 4 bytes past a 16-byte boundary.
  auto shifted = [&](const Tensor& t) {
    auto buffer = torch::empty({t.numel() + 1}, t.options());
    auto view = buffer.narrow(0, 1, t.numel()).view(t.sizes());
    view.copy_(t);
    return view;
  };
  const auto x = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto r = random_normal({rows, d}, gen, 2.0, torch::kFloat, cuda);
  const auto w = (1.0 + random_normal({d}, gen, 0.3)).to(cuda, torch::kFloat);
  const auto gy = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  const auto gs = random_normal({rows, d}, gen, 1.0, torch::kFloat, cuda);
  ASSERT_NE(reinterpret_cast<std::uintptr_t>(shifted(x).data_ptr()) % 16, 0u);
  const auto& fused = implementations().residual_norm.at("fused_cuda");
  const auto [y_vec, s_vec] = fused(x, r, w, 1e-6);
  const auto [y_el, s_el] = fused(shifted(x), shifted(r), w, 1e-6);
  EXPECT_LE(relative_error(y_el, y_vec), 1e-6);
  EXPECT_TRUE(torch::equal(s_el, s_vec));  // one fp32 add either way
  const auto g_vec = residual_norm_grads(fused, x, r, w, gy, gs);
  const auto g_el = residual_norm_grads(fused, shifted(x), shifted(r), w, shifted(gy), shifted(gs));
  for (size_t i = 0; i < g_vec.size(); ++i) EXPECT_LE(relative_error(g_el[i], g_vec[i]), 1e-5) << "gradient " << i;
  const auto& swiglu = implementations().swiglu.at("fused_cuda");
  EXPECT_LE(relative_error(swiglu(shifted(x), shifted(r)), swiglu(x, r)), 1e-6);
}

TEST(FusedCuda, RopeReadsStridedProjectionViewsAndMatchesTheReference) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(13);
  // nam56r-small's head layout: q [B,T,H,dn+dr] and [c_kv ; k_r] rows, the parts taken as narrows (the
  // vectorised path on strided views), in bf16 as under autocast.
  const int64_t B = 2, T = 33, H = 16, dn = 64, dr = 32, kv_lora = 256;
  const auto q = random_normal({B, T, H, dn + dr}, gen, 1.0, torch::kBFloat16, cuda).requires_grad_(true);
  const auto kv_down = random_normal({B, T, kv_lora + dr}, gen, 1.0, torch::kBFloat16, cuda).requires_grad_(true);
  const auto kv = random_normal({B, T, H, dn + 64}, gen, 1.0, torch::kBFloat16, cuda).requires_grad_(true);
  const auto angle = random_normal({T, dr / 2}, gen, 3.0, torch::kFloat, cuda);
  const auto gq = random_normal({B, T, H, dn + dr}, gen, 1.0, torch::kDouble, cuda);
  const auto gk = random_normal({B, T, H, dn + dr}, gen, 1.0, torch::kDouble, cuda);
  auto run = [&](const RopeFn& fn, torch::ScalarType dtype) {
    const auto leaves = std::vector<Tensor>{q.detach().to(dtype).requires_grad_(true),
                                            kv_down.detach().to(dtype).requires_grad_(true),
                                            kv.detach().to(dtype).requires_grad_(true)};
    const auto k_rope = leaves[1].narrow(-1, kv_lora, dr).unsqueeze(2);
    auto [q_full, k_full] = fn(leaves[0].narrow(-1, 0, dn), leaves[0].narrow(-1, dn, dr),
                               leaves[2].narrow(-1, 0, dn), k_rope, angle.cos(), angle.sin());
    auto grads = torch::autograd::grad({q_full, k_full}, leaves, {gq.to(dtype), gk.to(dtype)});
    grads.insert(grads.begin(), {q_full, k_full});
    return grads;  // q, k, dq, d(kv_down), d(kv)
  };
  const auto got = run(implementations().rope.at("fused_cuda"), torch::kBFloat16);
  const auto want = run(implementations().rope.at("reference"), torch::kDouble);
  // bf16 inputs are exact in fp64; the fused kernel rounds each output once after fp32 arithmetic, and
  // d(k_rope) sums 16 heads first: 1 bf16 rounding (4e-3) relative, 1e-2 with the fp32 sum.
  const char* names[] = {"q", "k", "dq", "d kv_down", "d kv"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LE(relative_error(got[i], want[i]), 1e-2) << names[i];
  EXPECT_TRUE(got[0].is_contiguous() && got[1].is_contiguous());
}

#if defined(ABLATE_HAVE_CUDA)
// fp64 per-row cross-entropy (masked rows 0) of hidden @ weight^T, for the expected gradients.
Tensor per_row_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets, const Tensor& mask) {
  const auto logits = torch::matmul(hidden, weight.t());
  const auto ce = torch::logsumexp(logits, 1) - logits.gather(1, targets.unsqueeze(1)).squeeze(1);
  return ce * mask.to(ce.scalar_type());
}

TEST(FusedCudaLoss, PerRowUpstreamGradientIsHonouredNotJustItsFirstElement) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(14);
  const int64_t N = 67, d = 40, V = 1000;
  const auto hidden = random_normal({N, d}, gen, 1.0, torch::kDouble, cuda);
  const auto weight = random_normal({V, d}, gen, 0.5, torch::kDouble, cuda);
  const auto targets = torch::randint(V, {N}, gen, torch::kLong).to(cuda);
  auto mask = (testing::random_uniform({N}, gen, 0, 1) > 0.3).to(cuda, torch::kFloat);
  // A different upstream gradient per row, including negative ones and one far from the others.
  auto row_grad = testing::random_uniform({N}, gen, -2.0, 3.0).to(cuda);
  row_grad[5] = 40.0;
  const auto h = hidden.to(torch::kFloat).requires_grad_(true), w = weight.to(torch::kFloat).requires_grad_(true);
  // chunk_rows 16: several chunks and a partial last one.
  const auto loss = fused::linear_cross_entropy(h, w, targets, mask, fused::LossReduction::none, 16);
  const auto got = torch::autograd::grad({loss}, {h, w}, {row_grad.to(torch::kFloat)});

  const auto h64 = hidden.clone().requires_grad_(true), w64 = weight.clone().requires_grad_(true);
  const auto want_loss = per_row_cross_entropy(h64, w64, targets, mask);
  const auto want = torch::autograd::grad({want_loss}, {h64, w64}, {row_grad});
  // fp32: logits from a K = 40 GEMM and a 1000-term log-sum-exp: ~1e-6 relative; bound 5e-6 as in parity.
  EXPECT_LE(relative_error(loss, want_loss), 5e-6);
  EXPECT_LE(relative_error(got[0], want[0]), 5e-6);
  EXPECT_LE(relative_error(got[1], want[1]), 5e-6);
  // The bug this guards against: every row scaled by row_grad[0]. Its gradients differ from the right
  // ones by O(1), so the bound above cannot pass for it.
  const auto h_bug = hidden.clone().requires_grad_(true), w_bug = weight.clone().requires_grad_(true);
  const auto bug = torch::autograd::grad({per_row_cross_entropy(h_bug, w_bug, targets, mask)}, {h_bug, w_bug},
                                         {row_grad[0].expand({N}).contiguous()});
  EXPECT_GT(relative_error(bug[1], want[1]), 0.1);
}

TEST(FusedCudaLoss, MeanOverManyChunksUnderAutocastMatchesTheFullLogits) {
  SKIP_UNLESS_FUSED_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  auto gen = seeded_generator(15);
  const int64_t N = 300, d = 64, V = 2048;
  const auto hidden = random_normal({N, d}, gen, 1.0, torch::kDouble, cuda);
  const auto weight = random_normal({V, d}, gen, 0.3, torch::kDouble, cuda);
  const auto targets = torch::randint(V, {N}, gen, torch::kLong).to(cuda);
  const auto mask = (testing::random_uniform({N}, gen, 0, 1) > 0.2).to(cuda, torch::kUInt8);
  const double upstream = 3.7;  // not 1: backward must scale by it, in fp32
  // The model's mix: bf16 hidden, fp32 head weight, autocast on (GEMMs in bf16).
  const auto h = hidden.to(torch::kBFloat16).requires_grad_(true), w = weight.to(torch::kFloat).requires_grad_(true);
  Tensor loss;
  {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);  // the CUDA default is fp16
    loss = fused::linear_cross_entropy(h, w, targets, mask, fused::LossReduction::mean, 64);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
  }
  const auto got = torch::autograd::grad({loss * upstream}, {h, w});
  EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(got[1].scalar_type(), torch::kFloat);
  const auto h64 = h.detach().to(torch::kDouble).requires_grad_(true);
  const auto w64 = w.detach().to(torch::kDouble).requires_grad_(true);
  const auto want_loss = implementations().loss.at("reference")(h64, w64, targets, mask);
  const auto want = torch::autograd::grad({want_loss * upstream}, {h64, w64});
  // bf16 GEMM operands (8-bit mantissa, 4e-3) and bf16 logits: 2e-2 as the parity test's bf16 bound.
  EXPECT_LE(relative_error(loss, want_loss), 2e-2);
  EXPECT_LE(relative_error(got[0], want[0]), 3e-2);
  EXPECT_LE(relative_error(got[1], want[1]), 3e-2);
  // A second backward through the same graph is refused with a message, not wrong numbers.
  const auto h2 = hidden.to(torch::kFloat).requires_grad_(true);
  const auto loss2 = fused::linear_cross_entropy(h2, weight.to(torch::kFloat), targets, mask,
                                                 fused::LossReduction::mean);
  torch::autograd::grad({loss2}, {h2}, {}, /*retain_graph=*/true);
  EXPECT_THROW(torch::autograd::grad({loss2}, {h2}), c10::Error);
}
#endif

}  // namespace
}  // namespace ablate::kernels
