// tests/profiling/attribution_test.cpp: the record -> receipt pipeline on synthetic CUPTI-like logs:
// family rules, scope/step attribution through correlation and external ids, per-step sums, the
// temporal breakdown with the exposed communication, and the observed-backend check against the real
// kernel catalog.
// Run: build/tests/profiling_tests --gtest_filter='Attribution*:Families*:Breakdown*:ObservedBackends*'
#include "profiling/attribution.h"

#include <gtest/gtest.h>

#include <numeric>

namespace ablate::profiling {
namespace {

using Kind = GpuActivity::Kind;

// A log builder: launches on thread 1 at host time `at`, running on the GPU from `start` to `end`.
struct LogBuilder {
  ActivityLog log;
  uint32_t next_correlation = 100;

  uint64_t scope(LaunchScope s) {
    const uint64_t id = log.scopes.size() + 1;
    log.scopes[id] = std::move(s);
    return id;
  }
  uint32_t launch(Kind kind, std::string name, uint64_t at, uint64_t start, uint64_t end, uint64_t external = 0,
                  uint32_t stream = 7) {
    const uint32_t c = next_correlation++;
    log.api.push_back({kind == Kind::kernel ? "cudaLaunchKernel" : "cudaMemcpyAsync", false, at, at + 2, 42, 1, c});
    log.gpu.push_back({kind, std::move(name), start, end, 0, stream, c, kind == Kind::kernel ? 0u : 4096u});
    if (external != 0) log.external_id[c] = external;
    return c;
  }
};

TEST(Families, NameRulesAndPrecedence) {
  EXPECT_EQ(family_of_kernel_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"), "gemm");
  EXPECT_EQ(family_of_kernel_name("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT"), "gemm");
  EXPECT_EQ(family_of_kernel_name("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm>"), "gemm");
  EXPECT_EQ(family_of_kernel_name("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>"), "attention");
  EXPECT_EQ(family_of_kernel_name("fmha_cutlassF_bf16_aligned_64x64_rf_sm80"), "attention");  // CUTLASS, but attention
  EXPECT_EQ(family_of_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "communication");
  EXPECT_EQ(family_of_kernel_name("void at::native::(anonymous)::cunn_SoftMaxForward<4, float>"), "elementwise");
  EXPECT_EQ(family_of_kernel_name("void at::native::nll_loss_forward_reduce_cuda_kernel_2d<float>"), "loss");
  EXPECT_EQ(family_of_kernel_name("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>"), "optimizer");
  EXPECT_EQ(family_of_kernel_name("ablate_residual_norm_fwd<__nv_bfloat16>"), "norm");
  EXPECT_EQ(family_of_kernel_name("void at::native::vectorized_elementwise_kernel<4, AddFunctor>"), "elementwise");

  const GpuActivity gemm{Kind::kernel, "nvjet_tst_128x256", 0, 1, 0, 7, 1, 0};
  const LaunchScope moe{"forward", 2, "E", "moe_dispatch", "reference"};
  const LaunchScope optimizer{"optimizer", -1, "", "", ""};
  EXPECT_EQ(classify(gemm, nullptr), "gemm");
  EXPECT_EQ(classify(gemm, &moe), "moe_dispatch");  // the seam decides inside a seam
  EXPECT_EQ(classify(gemm, &optimizer), "optimizer");
  const GpuActivity nccl{Kind::kernel, "ncclDevKernel_AllReduce", 0, 1, 0, 7, 1, 0};
  EXPECT_EQ(classify(nccl, &moe), "communication");  // communication wherever it runs
  EXPECT_EQ(classify({Kind::memcpy, "Memcpy HtoD", 0, 1, 0, 7, 1, 64}, &moe), "memcpy");
  EXPECT_EQ(classify({Kind::memset, "Memset", 0, 1, 0, 7, 1, 64}, nullptr), "memset");
  for (const auto& f : {"gemm", "attention", "ssm_scan", "recurrent_scan", "moe_dispatch", "norm", "rope", "loss",
                        "optimizer", "elementwise", "communication", "memcpy", "memset"})
    EXPECT_NE(std::find(families().begin(), families().end(), f), families().end()) << f;
}

TEST(Attribution, ScopesStepsAndSums) {
  LogBuilder b;
  const auto attn = b.scope({"forward", 0, "A", "attention", "sdpa_flash"});
  const auto attn_bwd = b.scope({"backward", 0, "A", "attention", "sdpa_flash"});
  const auto layer = b.scope({"forward", 0, "A", "", ""});
  b.log.steps = {{20, 1000, 2000}, {21, 2000, 3000}};
  // step 20
  b.launch(Kind::memcpy, "Memcpy HtoD", 1010, 1100, 1150);
  b.launch(Kind::kernel, "nvjet_tst_gemm", 1020, 1150, 1250, layer);
  b.launch(Kind::kernel, "flash_fwd_kernel", 1030, 1250, 1400, attn);
  b.launch(Kind::kernel, "flash_bwd_dq_dk_dv_loop_kernel", 1040, 1400, 1700, attn_bwd);
  // step 21: the same kernels, one launched without a host record (dropped API record)
  b.launch(Kind::kernel, "flash_fwd_kernel", 2030, 2250, 2400, attn);
  b.log.gpu.push_back({Kind::kernel, "vectorized_elementwise_kernel", 2500, 2600, 0, 7, 999, 0});

  const auto attributed = attribute(b.log);
  ASSERT_EQ(attributed.size(), 6u);
  EXPECT_EQ(attributed[0].scope, nullptr);
  EXPECT_EQ(attributed[0].family, "memcpy");
  EXPECT_EQ(attributed[1].scope->layer, 0);
  EXPECT_EQ(attributed[1].family, "gemm");       // outside a seam: by name
  EXPECT_EQ(attributed[2].family, "attention");  // by seam
  EXPECT_EQ(attributed[3].scope->phase, "backward");
  EXPECT_EQ(attributed[2].step, 20);
  EXPECT_EQ(attributed[4].step, 21);
  EXPECT_EQ(attributed[5].step, 21);  // no launch record: the last step begun before it started

  const auto s = summarize(b.log);
  EXPECT_EQ(s.records, 6);
  int64_t family_ns = 0, seam_ns = 0;
  for (const auto& t : s.time) (t.dimension == "family" ? family_ns : seam_ns) += t.total_ns;
  const int64_t all_ns = 50 + 100 + 150 + 300 + 150 + 100;
  EXPECT_EQ(family_ns, all_ns);  // each activity counted once per dimension
  EXPECT_EQ(seam_ns, all_ns);
  auto time_of = [&](int64_t step, const std::string& dim, const std::string& key) {
    for (const auto& t : s.time)
      if (t.step == step && t.dimension == dim && t.key == key) return t.total_ns;
    return int64_t{-1};
  };
  EXPECT_EQ(time_of(20, "family", "attention"), 450);
  EXPECT_EQ(time_of(21, "family", "attention"), 150);
  EXPECT_EQ(time_of(20, "seam", ""), 150);  // memcpy + gemm outside the seams
  EXPECT_EQ(time_of(21, "family", "elementwise"), 100);

  const auto flash = std::find_if(s.kernels.begin(), s.kernels.end(), [](const KernelTotal& k) { return k.name == "flash_fwd_kernel"; });
  ASSERT_NE(flash, s.kernels.end());
  EXPECT_EQ(flash->calls, 2);
  EXPECT_EQ(flash->total_ns, 300);
  EXPECT_EQ(flash->seam, "attention");
  const auto unscoped = std::find_if(s.attribution.begin(), s.attribution.end(),
                                     [](const AttributionTotal& a) { return a.name == "Memcpy HtoD"; });
  ASSERT_NE(unscoped, s.attribution.end());
  EXPECT_EQ(unscoped->scope.phase, "unscoped");
  EXPECT_EQ(unscoped->scope.layer, -1);
}

// A replayed CUDA graph: one cudaGraphLaunch, every node's kernel carries its correlation; the scope
// comes from the node's capture-time tag, and an untagged node falls back to the launch's scope.
TEST(Attribution, GraphReplayKernelsTakeTheirNodesScope) {
  LogBuilder b;
  const auto attn = b.scope({"forward", 0, "A", "attention", "sdpa_flash"});
  const auto adam = b.scope({"optimizer", -1, "", "optimizer", "fused_adamw"});
  const auto step = b.scope({"step", -1, "", "", ""});
  b.log.steps = {{30, 1000, 5000}};
  const uint32_t c = 500;
  b.log.api.push_back({"cudaGraphLaunch", false, 1010, 1020, 42, 1, c});
  b.log.external_id[c] = step;
  b.log.gpu.push_back({Kind::kernel, "flash_fwd_kernel", 1100, 1300, 0, 7, c, 0, /*graph_node=*/71});
  b.log.gpu.push_back({Kind::kernel, "multi_tensor_apply_kernel<FusedAdamMathFunctor>", 1300, 1400, 0, 7, c, 0, 72});
  b.log.gpu.push_back({Kind::kernel, "vectorized_elementwise_kernel", 1400, 1450, 0, 7, c, 0, 73});  // untagged
  b.log.graph_node_scope = {{71, attn}, {72, adam}};

  const auto attributed = attribute(b.log);
  ASSERT_EQ(attributed.size(), 3u);
  ASSERT_NE(attributed[0].scope, nullptr);
  EXPECT_EQ(attributed[0].scope->seam, "attention");
  EXPECT_EQ(attributed[0].family, "attention");
  ASSERT_NE(attributed[1].scope, nullptr);
  EXPECT_EQ(attributed[1].scope->seam, "optimizer");
  EXPECT_EQ(attributed[1].family, "optimizer");
  ASSERT_NE(attributed[2].scope, nullptr);
  EXPECT_EQ(attributed[2].scope->phase, "step");  // the graph launch's own scope
  for (const auto& a : attributed) EXPECT_EQ(a.step, 30);
  EXPECT_EQ(external_id_of(b.log, b.log.gpu[0]), attn);
  EXPECT_EQ(external_id_of(b.log, b.log.gpu[2]), step);
}

TEST(Breakdown, UnionOfIntervalsNotSums) {
  std::vector<GpuActivity> gpu = {
      {Kind::kernel, "a", 100, 200, 0, 7, 1, 0},
      {Kind::kernel, "b", 150, 250, 0, 8, 2, 0},   // overlaps a on another stream
      {Kind::memcpy, "Memcpy HtoD", 240, 300, 0, 9, 3, 64},  // 10 ns under b
      {Kind::memset, "Memset", 400, 450, 0, 7, 4, 64},
  };
  const auto b = temporal_breakdown(gpu);
  EXPECT_EQ(b.window_ns, 350u);
  EXPECT_EQ(b.compute_ns, 150u);     // [100, 250)
  EXPECT_EQ(b.non_compute_ns, 100u); // [250, 300) + [400, 450)
  EXPECT_EQ(b.idle_ns, 100u);        // [300, 400)
  EXPECT_EQ(b.busy_sum_ns, 100u + 100u + 60u + 50u);
  EXPECT_EQ(temporal_breakdown({}).window_ns, 0u);
}

// Communication kernels (NCCL, by name) on the GPU's timeline: their union, and the part of it no other
// kernel, memcpy or memset ran beside.
GpuActivity nccl(uint64_t start, uint64_t end, uint32_t stream = 20) {
  return {Kind::kernel, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", start, end, 0,
          stream, 0, 0};
}
GpuActivity compute(uint64_t start, uint64_t end) { return {Kind::kernel, "nvjet_sm90_tst_128x256", start, end, 0, 7, 0, 0}; }

TEST(Breakdown, ACollectiveUnderComputeIsNotExposed) {
  const auto b = temporal_breakdown({compute(0, 1000), nccl(200, 700)});
  EXPECT_EQ(b.communication_ns, 500u);
  EXPECT_EQ(b.exposed_communication_ns, 0u);
  EXPECT_EQ(b.compute_ns, 1000u);  // communication kernels stay in compute
  EXPECT_EQ(b.idle_ns, 0u);
}

TEST(Breakdown, ACollectiveAloneIsExposedWhole) {
  const auto b = temporal_breakdown({compute(0, 100), nccl(300, 800), compute(900, 1000)});
  EXPECT_EQ(b.communication_ns, 500u);
  EXPECT_EQ(b.exposed_communication_ns, 500u);
  EXPECT_EQ(b.compute_ns, 700u);
  EXPECT_EQ(b.idle_ns, 300u);  // [100, 300) + [800, 900): idle is not exposed communication
  EXPECT_EQ(b.window_ns, b.compute_ns + b.non_compute_ns + b.idle_ns);
}

TEST(Breakdown, APartlyOverlappedCollectiveExposesTheRest) {
  // Compute [0, 400) and [600, 700); the collective [300, 1000): hidden [300, 400) and [600, 700).
  const auto b = temporal_breakdown({compute(0, 400), nccl(300, 1000), compute(600, 700)});
  EXPECT_EQ(b.communication_ns, 700u);
  EXPECT_EQ(b.exposed_communication_ns, 500u);  // [400, 600) + [700, 1000)
}

TEST(Breakdown, OverlappingCollectivesOnTwoStreamsCountOnce) {
  // Two streams' collectives overlap in [300, 500): the union is 600 ns, the sum 800.
  const auto b = temporal_breakdown({nccl(100, 500, 20), nccl(300, 700, 21), compute(600, 800)});
  EXPECT_EQ(b.communication_ns, 600u);
  EXPECT_EQ(b.exposed_communication_ns, 500u);  // [100, 600)
  EXPECT_EQ(b.busy_sum_ns, 400u + 400u + 200u);
}

TEST(Breakdown, ACopyBesideACollectiveHidesIt) {
  const auto b = temporal_breakdown(
      {nccl(0, 1000), {Kind::memcpy, "Memcpy DtoH", 100, 400, 0, 9, 0, 4096}, {Kind::memset, "Memset", 900, 950, 0, 9, 0, 64}});
  EXPECT_EQ(b.communication_ns, 1000u);
  EXPECT_EQ(b.exposed_communication_ns, 650u);  // [0, 100) + [400, 900) + [950, 1000)
  EXPECT_EQ(b.non_compute_ns, 0u);              // the copies lie under a kernel
}

TEST(Breakdown, WithoutCollectivesNoTimeIsCommunication) {
  const auto b = temporal_breakdown({compute(0, 100), {Kind::memcpy, "Memcpy HtoD", 100, 200, 0, 9, 0, 64}});
  EXPECT_EQ(b.communication_ns, 0u);
  EXPECT_EQ(b.exposed_communication_ns, 0u);
}

// By collective kind (NCCL's kernel names): each kind's union and its part with no compute or copy beside
// it; two kinds alone together are exposed for both (the total counts the segment once).
GpuActivity collective(const char* name, uint64_t start, uint64_t end, uint32_t stream = 20) {
  return {Kind::kernel, name, start, end, 0, stream, 0, 0};
}

TEST(Breakdown, CollectiveKindsByNcclNameEachWithItsExposedPart) {
  EXPECT_EQ(collective_of_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Collective::all_reduce);
  EXPECT_EQ(collective_of_kernel_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"), Collective::reduce_scatter);
  EXPECT_EQ(collective_of_kernel_name("ncclDevKernel_AllGather_RING_LL"), Collective::all_gather);
  EXPECT_EQ(collective_of_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), Collective::all_to_all);
  EXPECT_EQ(collective_of_kernel_name("ncclDevKernel_Broadcast_RING_LL"), Collective::other);
  // compute [0, 400) and [700, 800); all-gather [100, 600) on one stream, all-to-all [500, 900) on another,
  // reduce-scatter [950, 1000) alone.
  const auto b = temporal_breakdown({compute(0, 400), compute(700, 800),
                                     collective("ncclDevKernel_AllGather_RING_LL", 100, 600, 20),
                                     collective("ncclDevKernel_SendRecv", 500, 900, 21),
                                     collective("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 950, 1000, 22)});
  EXPECT_EQ(b.of(Collective::all_gather), 500u);
  EXPECT_EQ(b.exposed(Collective::all_gather), 200u);  // [400, 600)
  EXPECT_EQ(b.of(Collective::all_to_all), 400u);
  EXPECT_EQ(b.exposed(Collective::all_to_all), 300u);  // [500, 700) + [800, 900)
  EXPECT_EQ(b.of(Collective::reduce_scatter), 50u);
  EXPECT_EQ(b.exposed(Collective::reduce_scatter), 50u);
  EXPECT_EQ(b.of(Collective::all_reduce), 0u);
  // The totals count the overlap [500, 600) once: [100, 900) + [950, 1000), and exposed [400, 700) +
  // [800, 900) + [950, 1000), where the kinds' exposed parts add up to 550.
  EXPECT_EQ(b.communication_ns, 850u);
  EXPECT_EQ(b.exposed_communication_ns, 450u);
}

// The seams' kernels against the real catalog's patterns.
class ObservedBackendsTest : public ::testing::Test {
 protected:
  ProfileSummary with_seam_kernels(const std::string& seam, const std::string& backend,
                                   const std::vector<std::string>& names) {
    LogBuilder b;
    const auto id = b.scope({"forward", 0, "A", seam, backend});
    uint64_t t = 1000;
    for (const auto& n : names) b.launch(Kind::kernel, n, t, t + 10, t + 20, id), t += 100;
    return summarize(b.log);
  }
  const ObservedBackend& only(const std::vector<ObservedBackend>& all) {
    EXPECT_EQ(all.size(), 1u);
    return all.front();
  }
};

TEST_F(ObservedBackendsTest, ChosenBackendsKernelsConfirmIt) {
  const auto obs = observe_backends(with_seam_kernels("attention", "sdpa_flash", {"flash_fwd_kernel", "flash_bwd_kernel"}),
                                    {{"attention", "sdpa_flash"}}, kernels::catalog());
  const auto& o = only(obs);
  EXPECT_EQ(o.observed, "sdpa_flash");
  EXPECT_EQ(o.mismatch, false);
  ASSERT_EQ(o.evidence.size(), 2u);
  EXPECT_EQ(o.evidence[0].matches, "sdpa_flash");
}

TEST_F(ObservedBackendsTest, FusedChosenButReferenceKernelsRanIsAMismatch) {
  const auto obs = observe_backends(
      with_seam_kernels("residual_norm", "fused_cuda", {"vectorized_elementwise_kernel<4, AddFunctor>", "reduce_kernel"}),
      {{"residual_norm", "fused_cuda"}}, kernels::catalog());
  const auto& o = only(obs);
  EXPECT_EQ(o.observed, "reference");
  EXPECT_EQ(o.mismatch, true);
  EXPECT_EQ(o.evidence.size(), 2u);
  EXPECT_EQ(o.evidence[0].matches, "");
}

TEST_F(ObservedBackendsTest, AnotherBackendsKernelsAreAMismatchEvenBesideTheChosenOnes) {
  const auto obs = observe_backends(with_seam_kernels("attention", "sdpa_flash", {"flash_fwd_kernel", "fmha_cutlassB_bf16"}),
                                    {{"attention", "sdpa_flash"}}, kernels::catalog());
  const auto& o = only(obs);
  EXPECT_EQ(o.mismatch, true);
  EXPECT_EQ(o.observed, "sdpa_efficient,sdpa_flash");
}

TEST_F(ObservedBackendsTest, ReferenceConfirmedWhenNoFastPatternRuns) {
  const auto obs = observe_backends(with_seam_kernels("attention", "reference", {"nvjet_gemm", "softmax_warp_forward"}),
                                    {{"attention", "reference"}}, kernels::catalog());
  EXPECT_EQ(only(obs).observed, "reference");
  EXPECT_EQ(only(obs).mismatch, false);
}

TEST_F(ObservedBackendsTest, UnexercisedAndPatternlessSeamsAreUndecided) {
  const auto idle = observe_backends(with_seam_kernels("attention", "reference", {"flash_fwd_kernel"}),
                                     {{"ssm_scan", "reference"}}, kernels::catalog());
  EXPECT_FALSE(only(idle).observed.has_value());
  EXPECT_FALSE(only(idle).mismatch.has_value());
  const auto chunked = observe_backends(with_seam_kernels("loss", "chunked", {"nvjet_gemm"}), {{"loss", "chunked"}},
                                        kernels::catalog());
  EXPECT_EQ(only(chunked).observed, "chunked");
  EXPECT_FALSE(only(chunked).mismatch.has_value());
  EXPECT_NE(only(chunked).note.find("no kernel-name patterns"), std::string::npos);
}

// Precision observed, not assumed: the kernel names of cuBLASLt's GEMMs on an H200 (2026-11-28,
// experiments/results/2026-11-28-h200-fp8/fp8_probe.py): nvjet_sm90_tst_* for bf16, nvjet_sm90_qqtst_* for FP8 inputs.
TEST_F(ObservedBackendsTest, AnFp8BackendWhoseGemmsRanInBf16IsAMismatch) {
  const std::string fp8_gemm = "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT";
  const std::string bf16_gemm = "nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_TNN";
  const std::string quantise = "void ablate::kernels::fp8::ablate_fp8_rowwise_cast<__nv_bfloat16, true>(...)";
  const auto fp8 = observe_backends(with_seam_kernels("dense_gemm", "fp8_rowwise", {quantise, fp8_gemm}),
                                    {{"dense_gemm", "fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(fp8).observed, "fp8_rowwise");
  EXPECT_EQ(only(fp8).mismatch, false) << only(fp8).note;
  // The quantisation ran (its pattern matches) but the GEMM was bf16: requested is not observed.
  const auto fell_back = observe_backends(with_seam_kernels("dense_gemm", "fp8_rowwise", {quantise, bf16_gemm}),
                                          {{"dense_gemm", "fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(fell_back).mismatch, true);
  EXPECT_NE(only(fell_back).note.find("bf16 or wider ran where FP8 was requested: " + bf16_gemm), std::string::npos)
      << only(fell_back).note;
  // And the reverse: the reference's GEMMs must not be FP8 ones.
  const auto reverse = observe_backends(with_seam_kernels("dense_gemm", "reference", {fp8_gemm}),
                                        {{"dense_gemm", "reference"}}, kernels::catalog());
  EXPECT_EQ(only(reverse).mismatch, true);
  EXPECT_NE(only(reverse).note.find("FP8 GEMM kernels ran"), std::string::npos) << only(reverse).note;
  const auto bf16 = observe_backends(with_seam_kernels("dense_gemm", "reference", {bf16_gemm}),
                                     {{"dense_gemm", "reference"}}, kernels::catalog());
  EXPECT_EQ(only(bf16).mismatch, false) << only(bf16).note;
}

// The experts' grouped GEMMs (moe_dispatch), demangled and shortened: at::_grouped_mm's bf16 CUTLASS kernel
// and at::_scaled_grouped_mm's FP8 one (tests/profiling/cutlass_kernel_name.h has them whole), the
// argument-preparing kernel each launches first, a quantisation pass and a fused pass both backends run.
const std::string kBf16Grouped =
    "void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel::GemmUniversal<"
    "cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >, ... cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<"
    "...> ...> >(...)";
const std::string kFp8Grouped =
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<"
    "int, int, int> >, ... cutlass::float_e4m3_t, ... cute::SM90::GMMA::MMA_64x256x32_F32E4M3E4M3_SS_TN<...> ...> >(...)";
const std::string kFp8Prepare =
    "void at::cuda::detail::prepare_grouped_gemm_data<cutlass::float_e4m3_t, cutlass::float_e4m3_t, "
    "cutlass::bfloat16_t, float, ...>(...)";
const std::string kBf16Prepare =
    "void at::cuda::detail::prepare_grouped_gemm_data<cutlass::bfloat16_t, cutlass::bfloat16_t, cutlass::bfloat16_t, "
    "float, ...>(...)";
const std::string kQuantise =
    "void ablate::kernels::fp8::(anonymous namespace)::ablate_fp8_rowwise_cast<__nv_bfloat16, true, true>(...)";
const std::string kSharedPass = "void ablate::kernels::fused::(anonymous namespace)::ablate_moe_swiglu_fwd<__nv_bfloat16, 8>(...)";

TEST_F(ObservedBackendsTest, TheExpertGemmsPrecisionTellsTheGroupedBackendsApart) {
  const auto fp8 = observe_backends(
      with_seam_kernels("moe_dispatch", "grouped_mm_fp8_rowwise", {kQuantise, kSharedPass, kFp8Prepare, kFp8Grouped}),
      {{"moe_dispatch", "grouped_mm_fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(fp8).observed, "grouped_mm_fp8_rowwise");
  EXPECT_EQ(only(fp8).mismatch, false) << only(fp8).note;
  const auto bf16 = observe_backends(with_seam_kernels("moe_dispatch", "grouped_mm", {kSharedPass, kBf16Prepare, kBf16Grouped}),
                                     {{"moe_dispatch", "grouped_mm"}}, kernels::catalog());
  EXPECT_EQ(only(bf16).observed, "grouped_mm");
  EXPECT_EQ(only(bf16).mismatch, false) << only(bf16).note;
  // FP8 experts requested, bf16 grouped GEMMs ran: the other backend's kernel, and the wrong precision.
  const auto wrong = observe_backends(
      with_seam_kernels("moe_dispatch", "grouped_mm_fp8_rowwise", {kQuantise, kSharedPass, kBf16Prepare, kBf16Grouped}),
      {{"moe_dispatch", "grouped_mm_fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(wrong).mismatch, true);
  EXPECT_NE(only(wrong).note.find("precision: GEMM kernels in bf16 or wider ran where FP8 was requested"),
            std::string::npos)
      << only(wrong).note;
}

// Backends that share a pass: the FP8 head (loss fused_cuda_fp8_rowwise) runs the bf16 fused head's row
// kernel, which both rows' patterns name; its FP8 quantisation and GEMMs tell the two apart. Kernel names
// of the profiled FP8 head on an H200 (2026-11-28, experiments/results/2026-11-28-h200-fp8-head/).
TEST_F(ObservedBackendsTest, AKernelTheChosenBackendSharesWithAnotherIsTheChosenOnes) {
  const std::string rows = "void ablate::kernels::fused::ablate_lce_rows<__nv_bfloat16, 8, true>(...)";
  const std::string quantise = "void ablate::kernels::fp8::ablate_fp8_rowwise_cast<__nv_bfloat16, true>(...)";
  const std::string fp8_gemm = "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_ovscale_TNT";
  const std::string bf16_gemm = "nvjet_sm90_tst_192x192_64x4_1x2_h_bz_coopB_TNN";
  const auto fp8 = observe_backends(with_seam_kernels("loss", "fused_cuda_fp8_rowwise", {rows, quantise, fp8_gemm}),
                                    {{"loss", "fused_cuda_fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(fp8).observed, "fused_cuda_fp8_rowwise");
  EXPECT_EQ(only(fp8).mismatch, false) << only(fp8).note;
  EXPECT_EQ(only(fp8).evidence.size(), 3u);
  // The bf16 fused head chosen, the FP8 one's kernels ran: another backend's, and GEMMs in FP8.
  const auto other = observe_backends(with_seam_kernels("loss", "fused_cuda", {rows, quantise, fp8_gemm}),
                                      {{"loss", "fused_cuda"}}, kernels::catalog());
  EXPECT_EQ(only(other).mismatch, true);
  EXPECT_EQ(only(other).observed, "fused_cuda,fused_cuda_fp8_rowwise");
  // The FP8 head chosen, the bf16 one ran (its row kernel is the FP8 head's too): the GEMMs' precision says so.
  const auto bf16 = observe_backends(with_seam_kernels("loss", "fused_cuda_fp8_rowwise", {rows, bf16_gemm}),
                                     {{"loss", "fused_cuda_fp8_rowwise"}}, kernels::catalog());
  EXPECT_EQ(only(bf16).mismatch, true);
  EXPECT_NE(only(bf16).note.find("where FP8 was requested"), std::string::npos) << only(bf16).note;
}

TEST(KernelPrecision, Fp8GemmsAreToldByTheirNames) {
  EXPECT_TRUE(is_fp8_gemm_kernel("nvjet_sm90_qqtst_192x192_128x4_1x2_h_bz_coopB_TNN"));
  // e4m3 x e5m2: the tensorwise recipe's gradient GEMMs (a profiled H200 run, 2026-11-28).
  EXPECT_TRUE(is_fp8_gemm_kernel("nvjet_sm90_qrtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT"));
  EXPECT_TRUE(is_fp8_gemm_kernel("nvjet_sm90_qqsss_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"));
  EXPECT_FALSE(is_fp8_gemm_kernel("nvjet_sm90_sss_128x128_64x6_1x2_h_bz_NTT"));
  EXPECT_FALSE(is_fp8_gemm_kernel("nvjet_sm90_hsh_64x8_64x16_4x1_v_bz_TNN"));
  EXPECT_TRUE(is_fp8_gemm_kernel(
      "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalI...MMA_64x256x32_F32E4M3E4M3_SS_TN..."));
  EXPECT_FALSE(is_fp8_gemm_kernel("nvjet_sm90_tst_128x128_64x6_1x2_h_bz_splitK_NTT"));
  EXPECT_FALSE(is_fp8_gemm_kernel("ablate_fp8_tensorwise_cast"));  // not a GEMM
  // The experts' grouped GEMMs (at::_scaled_grouped_mm, at::_grouped_mm) and their argument kernels.
  EXPECT_TRUE(is_fp8_gemm_kernel(kFp8Grouped));
  EXPECT_TRUE(is_fp8_gemm_kernel(kFp8Prepare));
  EXPECT_FALSE(is_fp8_gemm_kernel(kBf16Grouped));
  EXPECT_FALSE(is_fp8_gemm_kernel(kBf16Prepare));
  EXPECT_FALSE(is_fp8_gemm_kernel(kQuantise));
}

}  // namespace
}  // namespace ablate::profiling
