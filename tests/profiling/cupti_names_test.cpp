// tests/profiling/cupti_names_test.cpp: CUPTI's raw names as the tracer converts them (demangled kernels,
// API names without CUPTI's version suffix), and the demangled names of real kernels against what reads
// them downstream: the family rules of profiling/attribution.h and every kernel pattern of the catalog.
// Run: build/tests/profiling_tests --gtest_filter='CuptiNames*:DemangledKernels*'
#include "profiling/cupti_names.h"

#include <cxxabi.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "profiling/attribution.h"
#include "tests/profiling/cutlass_kernel_name.h"

namespace ablate::profiling {
namespace {

TEST(CuptiNames, MangledKernelNamesAreDemangled) {
  EXPECT_EQ(demangle_kernel_name("_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  EXPECT_EQ(demangle_kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_"),
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
            "(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)");
}

TEST(CuptiNames, OtherKernelNamesStayAsTheyAre) {
  // extern "C" and JIT-compiled kernels: no _Z prefix.
  EXPECT_EQ(demangle_kernel_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"), "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
  EXPECT_EQ(demangle_kernel_name("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"),
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0");
  EXPECT_EQ(demangle_kernel_name("f"), "f");  // __cxa_demangle alone would read a type: "float"
  EXPECT_EQ(demangle_kernel_name("_Znot_a_symbol("), "_Znot_a_symbol(");
  EXPECT_EQ(demangle_kernel_name(nullptr), "");
  const std::string huge = "_Z" + std::string(20'000, 'x');
  EXPECT_EQ(demangle_kernel_name(huge.c_str()), huge);
}

// A CUTLASS 3 GEMM kernel as CUPTI names it (tests/profiling/cutlass_kernel_name.h): libstdc++'s
// __cxa_demangle calls it invalid (its nesting passes the demangler's recursion limit), as it does every
// cutlass::device_kernel of torch's libtorch_cuda.so; libiberty's demangler without the limit reads it.
TEST(CuptiNames, DeeplyNestedCutlassKernelsAreDemangled) {
  const char* raw = samples::kCutlassGroupedGemmKernel;
  int status = 0;
  char* by_libstdcxx = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
  std::free(by_libstdcxx);
  EXPECT_EQ(status, -2) << "libstdc++ reads this name now: the libiberty fallback may no longer be needed";
  if (!deep_demangling_available()) GTEST_SKIP() << "built without libiberty (libiberty-dev): the name stays mangled";
  const std::string name = demangle_kernel_name(raw);
  const std::string head =
      "void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel::GemmUniversal<"
      "cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >, ";
  const std::string tail = "cute::Copy_Atom<cute::SM90_U32x4_STSM_N, cutlass::half_t>, void>, void, void> >::Params)";
  EXPECT_EQ(name.substr(0, head.size()), head);
  ASSERT_GE(name.size(), tail.size());
  EXPECT_EQ(name.substr(name.size() - tail.size()), tail);
}

TEST(CuptiNames, ApiNamesLoseTheCallbackVersionAsInKineto) {
  EXPECT_EQ(api_name_without_version("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(api_name_without_version("cudaLaunchKernelExC_v11060"), "cudaLaunchKernelExC");
  EXPECT_EQ(api_name_without_version("cudaMemcpyAsync_v3020"), "cudaMemcpyAsync");
  EXPECT_EQ(api_name_without_version("cudaMemsetAsync_v3020"), "cudaMemsetAsync");
  EXPECT_EQ(api_name_without_version("cudaLaunchKernel_ptsz_v7000"), "cudaLaunchKernel_ptsz");  // Kineto keeps _ptsz
  EXPECT_EQ(api_name_without_version("cudaMemcpy_ptds_v7000"), "cudaMemcpy_ptds");
  EXPECT_EQ(api_name_without_version("cudaSignalExternalSemaphoresAsync_v2_v11020"), "cudaSignalExternalSemaphoresAsync");
  EXPECT_EQ(api_name_without_version("cuMemcpyHtoDAsync_v2"), "cuMemcpyHtoDAsync");
  EXPECT_EQ(api_name_without_version("cuLaunchKernelEx"), "cuLaunchKernelEx");
  EXPECT_EQ(api_name_without_version("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(api_name_without_version("cudaGraphLaunch_v10000"), "cudaGraphLaunch");
  EXPECT_EQ(api_name_without_version("cuda_vX"), "cuda_vX");  // not digits
  EXPECT_EQ(api_name_without_version("cuda_v"), "cuda_v");
  EXPECT_EQ(api_name_without_version("_v2"), "_v2");  // nothing would be left
  EXPECT_EQ(api_name_without_version(""), "");
}

// Kernels as CUPTI names them, from an H100 run of this harness, the lead's nvcc build of kernels/<seam>/fused_cuda.cu
// (nm of the .cu objects), and the symbol tables of libtorch_cuda.so, libnccl and libcudnn. `backend` is
// the catalog row ("seam/backend") whose patterns should match, "" for none; `family` is what the name
// rules give when the kernel runs outside a seam.
struct Sample {
  const char* backend;
  const char* family;
  const char* raw;
  bool demangles = true;  // false: libstdc++'s demangler gives up on it; only libiberty's reads it
};
const std::vector<Sample>& samples() {
  static const std::vector<Sample> kSamples = {
      {"attention/sdpa_flash", "attention",
       "_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi96ELi128ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_"
       "tE19Flash_kernel_traitsILi96ELi128ELi64ELi4ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEvNS_16Flash_fwd_paramsE"},
      {"attention/sdpa_flash", "attention",
       "_ZN13pytorch_flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi96ELi64ELi128ELi8ELi2E"
       "Li4ELi4ELb1ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi96ELi64ELi128ELi8ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0EEEv"
       "NS_16Flash_bwd_paramsE"},
      {"attention/sdpa_efficient", "attention",
       "_Z40fmha_cutlassF_bf16_aligned_64x64_rf_sm80N22PyTorchMemEffAttention15AttentionKernelIN7cutlass10bfloat16_tENS1_"
       "4arch4Sm80ELb1ELi64ELi64ELi64ELb1ELb1EE6ParamsE"},
      {"attention/sdpa_efficient", "attention",
       "_Z42fmha_cutlassB_bf16_aligned_64x64_k128_sm80N22PyTorchMemEffAttention23AttentionBackwardKernelIN7cutlass4arch4Sm80E"
       "NS1_10bfloat16_tELb1ELb0ELb0ELi64ELi64ELi128ELb0EE6ParamsE"},
      {"attention/sdpa_cudnn", "attention",
       "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"},
      // "cudnn::fusion" only matches once demangled (mangled: 5cudnn6fusion).
      {"attention/sdpa_cudnn", "elementwise",
       "_ZN5cudnn6fusion41combineScaleBiasStats_1C11_general_kernelIfEEvi17cudnnTensorStructPKvS4_S4_S4_dS2_PvS5_"},
      {"rope/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused39_GLOBAL__N__89da4482_7_rope_cu_1cd8b363L15ablate_rope_fwdI13__nv_bfloat16Li1EEEvNS2_8Rows"
       "ViewIKT_EES8_S8_S8_PKfSA_PS6_SB_NS2_11RopeFwdArgsE"},
      {"rope/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused39_GLOBAL__N__89da4482_7_rope_cu_1cd8b363L15ablate_rope_bwdI13__nv_bfloat16Li1EEEvPKT_S7_PKf"
       "S9_PS5_SA_NS2_9RopeShapeE"},
      {"residual_norm/fused_cuda", "norm",
       "_ZN6ablate7kernels5fused49_GLOBAL__N__04bf2b77_16_residual_norm_cu_9f6e2667L24ablate_residual_norm_fwdI13__nv_bfloat"
       "16S4_Li1ELi32EEEvPKT_PKT0_PKvbPS5_PS8_Pflif"},
      {"residual_norm/fused_cuda", "norm",
       "_ZN6ablate7kernels5fused49_GLOBAL__N__04bf2b77_16_residual_norm_cu_9f6e2667L24ablate_residual_norm_bwdI13__nv_bfloat"
       "16S4_Li1ELi32EEEvPKT_PKT0_SA_PKvbPKfPS8_PS5_Pfli"},
      {"residual_norm/fused_cuda", "norm",
       "_ZN6ablate7kernels5fused49_GLOBAL__N__04bf2b77_16_residual_norm_cu_9f6e266723ablate_residual_norm_dwEPKfliPf"},
      // kernels/ssm_scan/fused_cuda.cu (nm of libablate_kernels.so, H100 build of 2026-11-25).
      {"ssm_scan/fused_cuda", "ssm_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__080be74b_13_fused_cuda_cu_4067bfe2L26ablate_ssm_scan_fwd_outputI13__nv_bfloat"
       "16S4_EEvNS2_6ParamsE"},
      {"ssm_scan/fused_cuda", "ssm_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__080be74b_13_fused_cuda_cu_4067bfe2L25ablate_ssm_scan_bwd_chunkI13__nv_bfloat16"
       "S4_EEvNS2_6ParamsE"},
      {"ssm_scan/fused_cuda", "ssm_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__080be74b_13_fused_cuda_cu_4067bfe230ablate_ssm_scan_fwd_state_passENS2_6Params"
       "E"},
      // kernels/dense_gemm/fp8_quantize.cu (nm of libablate_kernels.so, nvcc 13.0 sm_90a build on the dev
      // machine) and the FP8 GEMMs cuBLASLt ran for each recipe (an H200's profile, 2026-11-28).
      {"dense_gemm/fp8_rowwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_rowwise_amaxI13__nv_bfloat16Lb0EEEvNS2_8TileArgsIT_EE"},
      {"dense_gemm/fp8_rowwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_rowwise_castI13__nv_bfloat16Lb1ELb0EEEvNS2_8TileArgsIT_EE"},
      {"dense_gemm/fp8_rowwise", "gemm", "nvjet_sm90_qqtst_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"},
      {"dense_gemm/fp8_tensorwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "26ablate_fp8_tensorwise_amaxI13__nv_bfloat16EEvNS2_8TileArgsIT_EE"},
      {"dense_gemm/fp8_tensorwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "26ablate_fp8_tensorwise_castI13__nv_bfloat16Lb0EEEvNS2_8TileArgsIT_EE"},
      {"dense_gemm/fp8_delayed", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__884feefb_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_delayed_castI13__nv_bfloat16Lb1EEEvNS2_8TileArgsIT_EE"},
      // fp8_delayed_fast_accum runs fp8_delayed's quantisation (its GEMMs' accumulation mode is a flag).
      {"dense_gemm/fp8_delayed_fast_accum", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__884feefb_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_delayed_castI13__nv_bfloat16Lb1EEEvNS2_8TileArgsIT_EE"},
      // The tensorwise recipe's GEMMs: e4m3 x e4m3 forward, e4m3 x e5m2 for the gradients (an H200's profile).
      {"dense_gemm/fp8_tensorwise", "gemm", "nvjet_sm90_qqtst_256x128_128x4_1x2_h_bz_coopA_TNT"},
      {"dense_gemm/fp8_tensorwise", "gemm", "nvjet_sm90_qrtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT"},
      {"dense_gemm/fp8_tensorwise", "gemm", "nvjet_sm90_qqtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT"},
      // kernels/recurrent_scan/fused_cuda.cu (nm of libablate_kernels.so, H100 build of 2026-11-25).
      {"recurrent_scan/fused_cuda", "recurrent_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__ffd5440f_13_fused_cuda_cu_362e3128L21ablate_rglru_fwd_scanILi2E13__nv_bfloat1"
       "6S4_EEvNS2_8ScanArgsIT0_T1_EE"},
      {"recurrent_scan/fused_cuda", "recurrent_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__ffd5440f_13_fused_cuda_cu_362e3128L21ablate_rglru_bwd_scanILi2E13__nv_bfloat1"
       "6fEEvNS2_8ScanArgsIT0_T1_EE"},
      {"recurrent_scan/fused_cuda", "recurrent_scan",
       "_ZN6ablate7kernels5fused46_GLOBAL__N__ffd5440f_13_fused_cuda_cu_362e312818ablate_rglru_carryEPKfS4_S4_Pflllb"},
      // kernels/ssm_rotary/fused_cuda.cu (nm of the .cu object, nvcc 13.0 sm_90a build on the dev machine,
      // 2026-11-25): the kernel names say "rotary", so outside a seam they count as rope.
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused51_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_d01f589f_651221ablate_ssm_rotary_fwdEPK6float2S5_"
       "S5_S5_PKfPS3_S8_NS2_11RotaryShapeE"},
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused51_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_d01f589f_651221ablate_ssm_rotary_bwdEPK6float2S5_"
       "S5_S5_S5_S5_PKfPS3_S8_PfS8_S8_NS2_11RotaryShapeE"},
      // q, k (and their gradients) are fp32 or bf16 pairs: the kernels are templates.
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused52_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_fc8e3c36_3088721ablate_ssm_rotary_fwdI14__nv_bfloat1"
       "62EEvPK6float2S7_S7_S7_PKfPT_SB_NS2_11RotaryShapeE"},
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused52_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_fc8e3c36_3088721ablate_ssm_rotary_bwdI6float2EEvPKT_S"
       "7_PKS4_S9_S9_S9_PKfPS4_SC_PfSC_SC_NS2_11RotaryShapeE"},
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused52_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_2d790885_1847633ablate_ssm_rotary_time_chunk_sumsEPKfP"
       "fNS2_13TimeScanShapeE"},
      {"ssm_rotary/fused_cuda", "rope",
       "_ZN6ablate7kernels5fused52_GLOBAL__N__7b8dbb3e_13_fused_cuda_cu_2d790885_1847627ablate_ssm_rotary_time_scanILb1EEEvPKf"
       "S5_PfNS2_13TimeScanShapeE"},
      // kernels/causal_conv/fused_cuda.cu (nm of the .cu object, nvcc 13.0 sm_90a build on the dev machine,
      // 2026-11-25): no family rule names a convolution, so outside a seam it counts as elementwise.
      {"causal_conv/fused_cuda", "elementwise",
       "_ZN6ablate7kernels5fused51_GLOBAL__N__2cf9d627_13_fused_cuda_cu_b493217d_716022ablate_causal_conv_fwdILi4E13__nv_"
       "bfloat16ffEEvPKT0_PKT1_SA_PT2_NS2_9ConvShapeEb"},
      {"swiglu/fused_cuda", "elementwise",
       "_ZN6ablate7kernels5fused41_GLOBAL__N__6761dd42_9_swiglu_cu_b38752c4L17ablate_swiglu_fwdI13__nv_bfloat16Li1EEEvPKT_S7_"
       "PS5_l"},
      {"swiglu/fused_cuda", "elementwise",
       "_ZN6ablate7kernels5fused41_GLOBAL__N__6761dd42_9_swiglu_cu_b38752c4L17ablate_swiglu_bwdI13__nv_bfloat16Li1EEEvPKT_S7_"
       "S7_PS5_S8_l"},
      // Demangling drops the file name (linear_cross_entropy_cu) with the anonymous namespace: the
      // loss rule names ablate_lce itself.
      {"loss/fused_cuda", "loss",
       "_ZN6ablate7kernels5fused56_GLOBAL__N__92fc6e8d_23_linear_cross_entropy_cu_5e8d1a37L15ablate_lce_rowsI13__nv_bfloat16"
       "Li1ELb0EEEvPT_lPKlPKfSA_PfSB_SA_SA_"},
      {"loss/fused_cuda", "loss",
       "_ZN6ablate7kernels5fused56_GLOBAL__N__92fc6e8d_23_linear_cross_entropy_cu_5e8d1a37L16ablate_lce_scaleI13__nv_bfloat16"
       "Li1EEEvPT_lPKf"},
      // The FP8 head (loss fused_cuda_fp8_rowwise): the fused head's row kernel, the rowwise quantisation
      // (nm of libablate_kernels.so) and the FP8 GEMMs of its profile on an H200 (2026-11-28).
      {"loss/fused_cuda_fp8_rowwise", "loss",
       "_ZN6ablate7kernels5fused56_GLOBAL__N__92fc6e8d_23_linear_cross_entropy_cu_5e8d1a37L15ablate_lce_rowsI13__nv_bfloat16"
       "Li8ELb1EEEvPT_lPKlPKfSA_PfSB_SA_SA_"},
      {"loss/fused_cuda_fp8_rowwise", "loss",
       "_ZN6ablate7kernels5fused56_GLOBAL__N__92fc6e8d_23_linear_cross_entropy_cu_5e8d1a37L16ablate_lce_scaleI13__nv_bfloat16"
       "Li1EEEvPT_lPKf"},
      {"loss/fused_cuda_fp8_rowwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__884feefb_15_fp8_quantize_cu_77c993dfL23ablate_fp8_rowwise_castI13__nv_"
       "bfloat16Lb1EEEvPKT_llPKiS9_S9_fbPhPfSA_SB_"},
      {"loss/fused_cuda_fp8_rowwise", "gemm", "nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_ovscale_TNT"},
      {"loss/fused_cuda_fp8_rowwise", "gemm", "nvjet_sm90_qqsss_128x128_128x6_1x1_h_bz_coopA_algo2_ovscale_TNT"},
      // kernels/optimizer/fused_cuda.cu's multi-tensor AdamW, as nvcc 13.0 mangles it.
      {"optimizer/fused_cuda", "optimizer",
       "_ZN6ablate7kernels5fused52_GLOBAL__N__c62d182b_13_fused_cuda_cu_8a41e999_2412412ablate_adamwENS2_11AdamWLaunchENS2_"
       "12AdamWScalarsE"},
      {"optimizer/fused_adamw", "optimizer",
       "_ZN2at6native52_GLOBAL__N__c815dac0_19_fused_adamw_impl_cu_8b44fa2325multi_tensor_apply_kernelINS1_32FusedOptimizer"
       "TensorListMetadataILi4EEENS1_20FusedAdamMathFunctorIN3c108BFloat16ELi4ELNS0_9ADAM_MODEE1ELb0EEEJPKfdddddbSB_SB_EEEvT_"
       "T0_DpT1_"},
      // at::_grouped_mm's CUTLASS sm90 grouped GEMM (moe_dispatch grouped_mm on the H100, 2026-11-23).
      {"moe_dispatch/grouped_mm", "gemm", samples::kCutlassGroupedGemmKernel, false},
      // The fused passes around the experts' GEMMs (kernels/moe_dispatch/expert_kernels.cu; nm of
      // libablate_kernels.so, nvcc 13.0 sm_90a build on the dev machine, 2026-11-25): both grouped
      // backends run them, so they identify neither.
      {"", "moe_dispatch",
       "_ZN6ablate7kernels5fused50_GLOBAL__N__2b8fe76e_17_expert_kernels_cu_a3541e8920ablate_moe_sum_slotsI13__nv_bfloat16"
       "fLi8EEEvPKT_PKliPT0_ll"},
      {"", "moe_dispatch",
       "_ZN6ablate7kernels5fused50_GLOBAL__N__2b8fe76e_17_expert_kernels_cu_a3541e8921ablate_moe_swiglu_fwdI13__nv_bfloat16"
       "Li8EEEvPKT_PKfPS5_ll"},
      {"", "moe_dispatch",
       "_ZN6ablate7kernels5fused50_GLOBAL__N__2b8fe76e_17_expert_kernels_cu_a3541e8921ablate_moe_swiglu_bwdI13__nv_bfloat16"
       "Li8EEEvPKT_PKfS7_PS5_Pfll"},
      // kernels/copy_blocks.cu (nm of the .cu object, nvcc 13.0 sm_90a build on the dev machine,
      // 2026-11-30): the expert weights' casts inside moe_dispatch, the data-parallel gradient copies
      // outside any seam; by its name an element-wise pass.
      {"", "elementwise",
       "_ZN6ablate7kernels5fused47_GLOBAL__N__f13be484_14_copy_blocks_cu_0099657818ablate_copy_blocksIf13__nv_"
       "bfloat16Li8EEEvNS2_10CopyBlocksE"},
      // at::_scaled_grouped_mm's FP8 grouped GEMM (LibTorch 2.11's libtorch_cuda.so) and the token rows'
      // grouped quantisation (kernels/dense_gemm/fp8_quantize.cu, nm of libablate_kernels.so): the
      // experts' FP8 GEMMs of moe_dispatch grouped_mm_fp8_rowwise.
      {"moe_dispatch/grouped_mm_fp8_rowwise", "gemm", samples::kCutlassFp8GroupedGemmKernel, false},
      {"moe_dispatch/grouped_mm_fp8_rowwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_rowwise_amaxI13__nv_bfloat16Lb1EEEvNS2_8TileArgsIT_EE"},
      {"moe_dispatch/grouped_mm_fp8_rowwise", "elementwise",
       "_ZN6ablate7kernels3fp848_GLOBAL__N__4cb2fbef_15_fp8_quantize_cu_77c993dfL"
       "23ablate_fp8_rowwise_castI13__nv_bfloat16Lb1ELb1EEEvNS2_8TileArgsIT_EE"},
      // kernels/moe_router/fused_cuda.cu (cuobjdump -symbols of the .cu object, nvcc 13.0 sm_90a, 2026-11-25).
      {"moe_router/fused_cuda", "moe_dispatch",
       "_ZN6ablate7kernels5fused51_GLOBAL__N__17854b11_13_fused_cuda_cu_fe666192_670921ablate_moe_router_fwdI13__nv_"
       "bfloat16Li16ELb1EEEvPKT_PKfliiiPfSA_Pl"},
      {"moe_router/fused_cuda", "moe_dispatch",
       "_ZN6ablate7kernels5fused51_GLOBAL__N__17854b11_13_fused_cuda_cu_fe666192_670924ablate_moe_router_bwd_dxI13__nv_"
       "bfloat16Li16ELb1EEEvPKfS6_S6_PKlS6_S6_liiiPfPT_"},
      {"", "communication", "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"},
      {"", "gemm", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"},
      {"", "gemm",
       "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"},
      {"", "gemm", "_ZN7cutlass7Kernel2I51cutlass_80_tensorop_s1688gemm_128x64_32x3_tn_align1EEvNT_6ParamsE"},
      {"", "gemm",
       "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_PKT8_"
       "PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_SF_SF_SF_"},
      {"", "elementwise",
       "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_"},
      {"", "elementwise",
       "_ZN43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6320softmax_warp_forwardIfffLi4ELb0ELb0EEEvPT0_PKT_iiiPKbib"},
  };
  return kSamples;
}

TEST(DemangledKernels, FamilyRulesReadDemangledNames) {
  for (const auto& s : samples()) {
    const std::string name = demangle_kernel_name(s.raw);
    if (s.demangles || deep_demangling_available()) {
      EXPECT_NE(name.rfind("_Z", 0), 0u) << "not demangled: " << s.raw;
    } else {
      EXPECT_EQ(name, s.raw) << "a build without libiberty keeps CUPTI's name";
    }
    EXPECT_EQ(family_of_kernel_name(name), s.family) << name;
    // HTA tells communication kernels by the regex '^nccl.*Kernel' (hta/utils/utils.py): demangled, NCCL's match.
    if (std::string(s.family) == "communication") {
      EXPECT_EQ(name.rfind("ncclDevKernel", 0), 0u) << name;
    }
  }
}

// Every pattern of every catalog backend matches a demangled sample of that backend, and a backend's
// samples match no other backend of its seam, so observe_backends confirms the backend that ran.
TEST(DemangledKernels, EveryCatalogPatternMatchesItsBackendsDemangledKernels) {
  std::map<std::string, std::vector<std::string>> by_backend;
  for (const auto& s : samples())
    if (*s.backend != '\0') by_backend[s.backend].push_back(demangle_kernel_name(s.raw));
  for (const auto& row : kernels::catalog()) {
    if (row.kernel_patterns.empty()) continue;
    const std::string key = row.seam + "/" + row.name;
    const auto it = by_backend.find(key);
    ASSERT_NE(it, by_backend.end()) << key << " has kernel patterns but no kernel name sample here: add one";
    for (const auto& pattern : row.kernel_patterns) {
      bool matched = false;
      for (const auto& name : it->second) matched = matched || name.find(pattern) != std::string::npos;
      EXPECT_TRUE(matched) << key << ": pattern '" << pattern << "' matches none of its demangled kernels";
    }
    ActivityLog log;
    log.scopes[1] = {"forward", 0, "A", row.seam, row.name};
    uint32_t correlation = 1;
    for (const auto& name : it->second) {
      log.gpu.push_back({GpuActivity::Kind::kernel, name, correlation * 100, correlation * 100 + 50, 0, 7, correlation, 0});
      log.external_id[correlation++] = 1;
    }
    const auto observed = observe_backends(summarize(log), {{row.seam, row.name}}, kernels::catalog());
    ASSERT_EQ(observed.size(), 1u);
    EXPECT_EQ(observed[0].observed, row.name) << key << ": " << observed[0].note;
    EXPECT_EQ(observed[0].mismatch, false) << key << ": " << observed[0].note;
  }
}

}  // namespace
}  // namespace ablate::profiling
