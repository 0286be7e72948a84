// scripts/trace-sample.cpp: writes realistic per-rank traces through profiling/trace_writer.cpp without a
// GPU, for scripts/check-trace.py (Perfetto / Holistic Trace Analysis loadability). Two ranks, each with
// two training steps: kernels on two streams (compute 7, communication 13), an H2D memcpy, a memset,
// a sub-microsecond kernel, two kernels that overlap on one stream (programmatic dependent launch), runtime
// and driver launch calls with correlation ids, seam scopes (External id), one kernel whose launch record
// was dropped (no flow), a CUDA graph replay (eight kernels of one cudaGraphLaunch: two that overlap, then
// six sub-microsecond ones, each linked to the launch by a flow end), one idle gap.
// Names start as CUPTI gives them (API names from cuptiGetCallbackName with their _vNNNN suffix, mangled
// kernel names, taken from an H100 run, a CUTLASS 3 grouped GEMM's among them) and go
// through the conversion profiling/cupti_tracer.cpp applies (profiling/cupti_names.h), as on a GPU.
// Build and run: scripts/check-trace.sh (compiles this with the writer's sources, no CMake build needed); the
// CTest check_trace_sample runs the CMake-built tests/trace_sample the same way.
// Usage: trace-sample OUT_DIR  -> OUT_DIR/rank0.trace.json.gz, OUT_DIR/rank1.trace.json.gz
#include <cstdio>
#include <filesystem>
#include <string>

#include "profiling/cupti_names.h"
#include "profiling/trace_writer.h"
#include "tests/profiling/cutlass_kernel_name.h"

using namespace ablate::profiling;

namespace {

ActivityLog rank_log(int rank) {
  ActivityLog log;
  const uint64_t t0 = 1'700'000'000'000'000'000ull + static_cast<uint64_t>(rank) * 3'000;  // CUPTI ns clock
  const uint32_t pid = 4242 + static_cast<uint32_t>(rank), tid = 17, dev = static_cast<uint32_t>(rank);
  uint32_t corr = 100;
  log.scopes[1] = {"forward", 0, "A", "attention", "sdpa_flash"};
  log.scopes[2] = {"forward", 0, "A", "mlp", "fused"};
  log.scopes[3] = {"backward", 0, "A", "attention", "sdpa_flash"};
  log.scopes[4] = {"optimizer", -1, "", "", ""};
  uint64_t t = t0, step_begin = t0;
  // launch: host API call [t, t+5us) (one every 6 us), GPU work on `stream` from `at` ns after the step's
  // start, running `dur` ns.
  auto launch = [&](const char* api, bool driver, GpuActivity::Kind kind, const char* name, uint32_t stream,
                    uint64_t at, uint64_t dur, uint64_t ext, uint64_t bytes = 0, bool drop_api = false) {
    const uint32_t c = corr++;
    if (!drop_api) log.api.push_back({api_name_without_version(api), driver, t, t + 5'000, pid, tid, c});
    log.gpu.push_back({kind, kind == GpuActivity::Kind::kernel ? demangle_kernel_name(name) : name, step_begin + at,
                       step_begin + at + dur, dev, stream, c, bytes});
    if (ext != 0) log.external_id[c] = ext;
    t += 6'000;
  };
  // Kernel names as CUPTI reports them (mangled), taken from an H100 run of this harness.
  const char* k_flash_fwd =
      "_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi96ELi128ELi64ELi4ELb0ELb0EN7cutlass10bfloat16_"
      "tE19Flash_kernel_traitsILi96ELi128ELi64ELi4ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEvNS_16Flash_fwd_paramsE";
  const char* k_flash_bwd =
      "_ZN13pytorch_flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi96ELi64ELi128ELi8ELi2E"
      "Li4ELi4ELb1ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi96ELi64ELi128ELi8ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0EEEv"
      "NS_16Flash_bwd_paramsE";
  const char* k_split_k_reduce =
      "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0EfffLb1ELb0ELb0ELb0EEEvNS_18cublasSplitKParamsIT4_EEPKT2_PKT8_"
      "PT7_PT3_PKS2_SF_PKT9_S6_PSG_PvlPS2_PiSL_SL_SF_SF_SF_SF_SF_";
  const char* k_add = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEEviT0_T1_";
  const char* k_mean = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_";
  const char* k_nccl = "_Z40ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE";
  const char* k_adam =
      "_ZN2at6native52_GLOBAL__N__c815dac0_19_fused_adamw_impl_cu_8b44fa2325multi_tensor_apply_kernelINS1_32FusedOptimizer"
      "TensorListMetadataILi4EEENS1_20FusedAdamMathFunctorIN3c108BFloat16ELi4ELNS0_9ADAM_MODEE1ELb0EEEJPKfdddddbSB_SB_EEEvT_"
      "T0_DpT1_";
  const char* k_cutlass = samples::kCutlassGroupedGemmKernel;
  const char* k_fill = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";
  using K = GpuActivity::Kind;
  for (int step = 0; step < 2; ++step) {
    step_begin = t;
    launch("cudaMemcpyAsync_v3020", false, K::memcpy, "Memcpy HtoD", 7, 2'000, 40'000, 0, 8u << 20);
    launch("cudaMemsetAsync_v3020", false, K::memset, "Memset", 7, 44'000, 3'000, 0, 1u << 16);
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_flash_fwd, 7, 50'000, 120'000, 1);
    // cuBLAS split-K GEMM (driver launch) and its reduce, which starts 1 us before the GEMM ends:
    // programmatic dependent launch overlaps kernels on one stream (seen in real traces).
    launch("cuLaunchKernelEx", true, K::kernel, "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_splitK_NTT", 7, 170'000, 40'000, 2);
    launch("cudaLaunchKernelExC_v11060", false, K::kernel, k_split_k_reduce, 7, 209'000, 4'000, 2);
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_add, 7, 214'000, 15'000, 2);
    // A 0.7 us kernel inside one microsecond (at 260.1 us): HTA rounds ts up and ts+dur down.
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_mean, 7, 260'100, 700, 2);
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_flash_bwd, 7, 270'000, 200'000, 3);
    // Gradient all-reduce on the communication stream, overlapping the backward kernel.
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_nccl, 13, 300'000, 150'000, 3);
    // A CUTLASS 3 grouped GEMM (the experts' backward), nested deeper than libstdc++'s demangler goes.
    launch("cudaLaunchKernelExC_v11060", false, K::kernel, k_cutlass, 7, 471'000, 8'000, 0);
    // Optimizer kernel whose launch record was dropped: no flow for it.
    launch("cudaLaunchKernel_v7000", false, K::kernel, k_fill, 7, 480'000, 30'000, 4, 0, /*drop_api=*/true);
    // A CUDA graph replay: one cudaGraphLaunch runs its captured kernels with its correlation, each
    // attributed through its graph node's capture-time scope: the optimizer kernel, one that overlaps it
    // (PDL inside the graph), then a tail of sub-microsecond kernels back to back or a fraction of a
    // microsecond apart, as a replayed step's elementwise tail runs.
    const uint32_t graph = corr++;
    log.api.push_back({api_name_without_version("cudaGraphLaunch_v10000"), false, t, t + 5'000, pid, tid, graph});
    uint64_t node = 9001;
    auto replayed = [&](const char* name, uint64_t at, uint64_t dur) {
      log.gpu.push_back({K::kernel, demangle_kernel_name(name), step_begin + at, step_begin + at + dur, dev, 7, graph, 0, node});
      log.graph_node_scope[node++] = 4;
    };
    replayed(k_adam, 515'000, 30'000);
    replayed(k_add, 544'000, 6'000);
    for (uint64_t i = 0, at = 550'150; i < 6; ++i) {
      const uint64_t dur = 400 + 90 * i;
      replayed(i % 2 == 0 ? k_mean : k_fill, at, dur);
      at += dur + 120 * (i % 3);
    }
    t = step_begin + 600'000;  // ~50 us idle gap before the next step
    log.steps.push_back({step, step_begin, t});
  }
  return log;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::filesystem::create_directories(argv[1]);
  for (int rank = 0; rank < 2; ++rank) {
    TraceMeta meta;
    meta.rank = rank;
    meta.world_size = 2;
    meta.trace_name = "ablate sample rank " + std::to_string(rank);
    meta.device_properties = nlohmann::json::array(
        {{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}, {"totalGlobalMem", 85'045'526'528ull},
          {"computeMajor", 9}, {"computeMinor", 0}, {"numSms", 132}},
         {{"id", 1}, {"name", "NVIDIA H100 80GB HBM3"}, {"totalGlobalMem", 85'045'526'528ull},
          {"computeMajor", 9}, {"computeMinor", 0}, {"numSms", 132}}});
    const auto path = write_trace_file(chrome_trace(rank_log(rank), meta),
                                       (std::filesystem::path(argv[1]) / ("rank" + std::to_string(rank) + ".trace")).string());
    std::printf("%s\n", path.c_str());
  }
  return 0;
}
