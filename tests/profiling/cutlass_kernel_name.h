// tests/profiling/cutlass_kernel_name.h: the CUTLASS 3 grouped GEMM kernels of at::_grouped_mm as CUPTI
// names it (moe_dispatch grouped_mm on the H100, 2026-11-23) and of at::_scaled_grouped_mm (FP8), nested
// deeper than libstdc++'s demangler goes. Used by tests/profiling/cupti_names_test.cpp and, the first, by
// scripts/trace-sample.cpp, whose trace check-trace.py reads.
#pragma once

namespace ablate::profiling::samples {

inline constexpr const char* kCutlassGroupedGemmKernel =
    "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalINS5_17Gr"
    "oupProblemShapeIN4cute5tupleIJiiiEEEEENS5_10collective13CollectiveMmaINS5_39MainloopSm90ArrayTmaGmmaWarpSpecia"
    "lizedILi4ENSA_IJNS9_1CILi2EEENSG_ILi1EEESI_EEENS5_43KernelPtrArrayTmaWarpSpecializedCooperativeEEENSA_IJNSG_IL"
    "i128EEENSG_ILi256EEENSG_ILi64EEEEEENS_10bfloat16_tEPNSA_IJSI_lNSG_ILi0EEEEEESQ_ST_NS9_8TiledMMAINS9_8MMA_AtomI"
    "JNS9_4SM904GMMA28MMA_64x256x16_F32BF16BF16_SSILNSX_5MajorE1ELSZ_1ELNSX_7ScaleInE1ELS10_1EEEEEENS9_6LayoutISJ_N"
    "SA_IJSI_SR_SR_EEEEENSA_IJNS9_10UnderscoreES16_S16_EEEEENS9_13SM90_TMA_LOADENS9_14ComposedLayoutINS9_7SwizzleIL"
    "i3ELi4ELi3EEENS9_18smem_ptr_flag_bitsILi16EEENS13_INSA_IJSO_NSG_ILi8EEEEEENSA_IJSI_SO_EEEEEEEvNS9_8identityENS"
    "9_23SM90_TMA_LOAD_MULTICASTES1J_vS1K_EENS_8epilogue10collective18CollectiveEpilogueINS1N_30Sm90PtrArrayTmaWarp"
    "SpecializedILi4ELi2ELi16ELb0ELb0ELi2EEEJSP_NSA_IJSM_NSG_ILi32EEEEEEvPNSA_IJlSI_SR_EEESQ_S1V_NS1N_6fusion15Fusi"
    "onCallbacksIS1R_NS1W_17LinearCombinationISQ_fSQ_fLNS_15FloatRoundStyleE2EEESP_S1T_JEEES19_NS1A_INS1B_ILi2ELi4E"
    "Li3EEES1E_NS13_INSA_IJS1F_S1S_EEENSA_IJS1S_SI_EEEEEEENS9_17SM75_U32x4_LDSM_NENS9_14SM90_TMA_STOREES26_NS9_17SM"
    "90_U32x4_STSM_NENS9_9Copy_AtomIJS29_NS_6half_tEEEEvEEEvvEEEEEEvNT_6ParamsE";

// The FP8 grouped GEMM of at::_scaled_grouped_mm (moe_dispatch grouped_mm_fp8_rowwise's forward: row-wise
// scales, fast accumulation, 128 x 256 x 64 tiles), as LibTorch 2.11.0+cu130's libtorch_cuda.so names it
// (its kernel's host stub, nm): the GMMA atom MMA_64x256x32_F32E4M3E4M3 where the bf16 one above has
// F32BF16BF16, and no enable_3x_kernel_for_sm9x wrapper.
inline constexpr const char* kCutlassFp8GroupedGemmKernel =
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_17GroupProblemShapeIN4cute5tupleIJiiiEEEEENS1_10"
    "collective13CollectiveMmaINS1_39MainloopSm90ArrayTmaGmmaWarpSpecializedILi8ENS6_IJNS5_1CILi2EEESD_NSC_ILi1EEEE"
    "EENS1_55KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccumEEENS6_IJNSC_ILi128EEENSC_ILi256EEENSC_ILi64EEE"
    "EEENS_12float_e4m3_tEPNS6_IJlSE_NSC_ILi0EEEEEESM_SP_NS5_8TiledMMAINS5_8MMA_AtomIJNS5_4SM904GMMA31MMA_64x256x32"
    "_F32E4M3E4M3_SS_TNILNST_7ScaleInE1ELSV_1EEEEEENS5_6LayoutINS6_IJSD_SE_SE_EEENS6_IJSE_SN_SN_EEEEENS6_IJNS5_10Un"
    "derscoreES12_S12_EEEEENS5_23SM90_TMA_LOAD_MULTICASTENS5_14ComposedLayoutINS5_7SwizzleILi2ELi4ELi3EEENS5_18smem"
    "_ptr_flag_bitsILi8EEENSY_INS6_IJNSC_ILi8EEESK_EEENS6_IJSK_SE_EEEEEEEvNS5_8identityES15_S1F_vS1G_EENS_8epilogue"
    "10collective18CollectiveEpilogueINS1I_30Sm90PtrArrayTmaWarpSpecializedILi4ELi2ELi16ELb1ELb0ELi2EEEJSL_NS6_IJSI"
    "_NSC_ILi32EEEEEENS_10bfloat16_tESP_S1P_SP_NS1I_6fusion15Sm90TreeVisitorINS1Q_11Sm90ComputeINS1I_6thread8Identi"
    "tyES1P_fLNS_15FloatRoundStyleE2EvEEJNS1R_INS1S_INS_10multipliesEffLS1V_2EvEEJNS1Q_16Sm90RowBroadcastILi0ESL_Pf"
    "fNS6_IJSN_SE_SN_EEELi4ELb1EEENS1R_IS1Y_JNS1Q_16Sm90ColBroadcastILi0ESL_S20_fS10_Li4ELb1EEENS1Q_12Sm90AccFetchE"
    "EEEEEEEEENS5_13SM90_TMA_LOADENS16_IS18_NS19_ILi16EEENSY_INS6_IJS1B_S1N_EEENS6_IJS1N_SE_EEEEEEENS5_17SM75_U32x4"
    "_LDSM_NENS5_14SM90_TMA_STOREES2E_NS5_17SM90_U32x4_STSM_NENS5_9Copy_AtomIJS2H_NS_6half_tEEEEvEEEvvEEEEvNT_6Para"
    "msE";

}  // namespace ablate::profiling::samples
