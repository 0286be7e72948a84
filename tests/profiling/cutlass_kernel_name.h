// tests/profiling/cutlass_kernel_name.h: the CUTLASS 3 grouped GEMM kernel of at::_grouped_mm as CUPTI names
// it (moe_dispatch grouped_mm on the H100, 2026-11-23), nested deeper than libstdc++'s demangler goes. Used
// by tests/profiling/cupti_names_test.cpp and by scripts/trace-sample.cpp, whose trace check-trace.py reads.
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

}  // namespace ablate::profiling::samples
