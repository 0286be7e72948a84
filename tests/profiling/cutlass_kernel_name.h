// tests/profiling/cutlass_kernel_name.h: a CUTLASS 3 GEMM kernel's name as CUPTI reports it (torch 2.11's
// libtorch_cuda.so, its sm90 cooperative GEMM), nested deeper than libstdc++'s demangler goes. Used by
// tests/profiling/cupti_names_test.cpp and by scripts/trace-sample.cpp, whose trace check-trace.py reads.
#pragma once

namespace ablate::profiling::samples {

inline constexpr const char* kCutlass3GemmKernel =
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS1_10collective13CollectiveMmaI"
    "NS1_34MainloopSm90TmaGmmaWarpSpecializedILi4ENS5_IJNS4_1CILi2EEENSA_ILi1EEESC_EEENS1_35KernelTmaWarpSpecialize"
    "dCooperativeEEENS5_IJNSA_ILi128EEENSA_ILi256EEENSA_ILi64EEEEEENS_10bfloat16_tENS5_IJlSC_lEEESK_SL_NS4_8TiledMM"
    "AINS4_8MMA_AtomIJNS4_4SM904GMMA28MMA_64x256x16_F32BF16BF16_SSILNSP_5MajorE0ELSR_0ELNSP_7ScaleInE1ELSS_1EEEEEEN"
    "S4_6LayoutISD_NS5_IJSC_NSA_ILi0EEESW_EEEEENS5_IJNS4_10UnderscoreESZ_SZ_EEEEENS4_13SM90_TMA_LOADENS4_14Composed"
    "LayoutINS4_7SwizzleILi3ELi4ELi3EEENS4_18smem_ptr_flag_bitsILi16EEENSV_INS5_IJNSA_ILi8EEESI_EEENS5_IJSI_SC_EEEE"
    "EEEvNS4_8identityENS4_23SM90_TMA_LOAD_MULTICASTES1C_vS1D_EENS_8epilogue10collective18CollectiveEpilogueINS1G_2"
    "2Sm90TmaWarpSpecializedILi4ELi2ELi16ELb1ELb0EEEJSJ_NS5_IJSG_NSA_ILi32EEEEEESK_SL_SK_SL_NS1G_6fusion15FusionCal"
    "lbacksIS1K_NS1N_17LinearCombinationISK_fSK_fLNS_15FloatRoundStyleE2EEESJ_S1M_JEEES12_NS13_INS14_ILi2ELi4ELi3EE"
    "ES17_NSV_INS5_IJS18_S1L_EEENS5_IJS1L_SC_EEEEEEENS4_17SM75_U32x4_LDSM_NENS4_14SM90_TMA_STOREES1X_NS4_17SM90_U32"
    "x4_STSM_NENS4_9Copy_AtomIJS20_NS_6half_tEEEEvEEENS1_29PersistentAsyncInputSchedulerISE_vEEvEEEEvNT_6ParamsE";

}  // namespace ablate::profiling::samples
