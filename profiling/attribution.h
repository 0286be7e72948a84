// profiling/attribution.h: from a rank's ActivityLog to what the receipt stores: each GPU activity's
// family, launch scope (phase, layer, block, seam, backend) and step; per-kernel totals; GPU time per
// step by family and by seam; the window's temporal breakdown (compute / non-compute / idle, and the
// communication nothing else ran beside); and the observed backend of every seam checked against the
// kernel catalog's name patterns.
// Plain C++ (no CUPTI, no LibTorch): tests build synthetic logs.
// Tests: tests/profiling/attribution_test.cpp (profiling_tests).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "profiling/activity.h"

namespace ablate::profiling {

// The kernel families of the receipts, in report order.
const std::vector<std::string>& families();

// The family a seam's kernels belong to ("" for an unknown seam or "" itself).
std::string family_of_seam(const std::string& seam);
// Kernel-name rules for work launched outside a seam (cutlass/cublas/gemm/nvjet -> gemm,
// flash/fmha -> attention, nccl -> communication, ...); "elementwise" when no rule matches.
std::string family_of_kernel_name(const std::string& name);
// Whether a kernel is a GEMM (by family_of_kernel_name) whose name says its inputs are FP8 (cuBLASLt's
// "nvjet_..._qq...", CUTLASS's e4m3/e5m2); the project's FP8 quantisation kernels (ablate_fp8_*) are not GEMMs.
bool is_fp8_gemm_kernel(const std::string& name);
// The family of one activity: memcpy/memset by kind, NCCL kernels are communication wherever they
// ran, then the seam's family, then the optimizer phase, then the name rules.
std::string classify(const GpuActivity& activity, const LaunchScope* scope);

struct AttributedActivity {
  const GpuActivity* activity = nullptr;
  const LaunchScope* scope = nullptr;  // null: launched outside every scope
  int64_t step = -1;                   // -1: outside every step span
  std::string family;
};
// Every GPU activity of `log` with its scope (through correlation -> external id), step (the step
// span holding its launch call, else the last span that began before it started) and family.
std::vector<AttributedActivity> attribute(const ActivityLog& log);

// GPU time of the window [first activity start, last activity end]: compute = union of kernel
// intervals (communication kernels included), non_compute = union of memcpy/memset intervals not
// covered by a kernel, idle = the rest, so window = compute + non_compute + idle.
// busy_sum_ns is the plain sum of all durations (equal to compute + non_compute when nothing overlaps).
// communication_ns: union of the communication-family kernels (family_of_kernel_name: NCCL), a part of
// compute; exposed_communication_ns: the part of it when no other kernel, memcpy or memset ran: the
// communication this GPU hid behind nothing, on its critical path as the GPU saw it.
// By collective kind (collective_of_kernel_name): each kind's union, and the part of it with no other
// kernel, memcpy or memset beside it (another kind may run there: the kinds' exposed parts can add up to
// more than exposed_communication_ns).
// Computed in one sweep over the activities' edges, O(n log n).
enum class Collective { all_reduce, reduce_scatter, all_gather, all_to_all, other };
constexpr int kCollectiveKindCount = 5;
// A communication kernel's kind by NCCL's name: ...AllReduce..., ...ReduceScatter..., ...AllGather...,
// ...SendRecv... (NCCL runs an all-to-all as grouped sends and receives; ablate sends nothing else
// point to point), anything else (broadcast, reduce) other.
Collective collective_of_kernel_name(const std::string& name);
struct TemporalBreakdown {
  uint64_t window_ns = 0, compute_ns = 0, non_compute_ns = 0, idle_ns = 0, busy_sum_ns = 0;
  uint64_t communication_ns = 0, exposed_communication_ns = 0;
  uint64_t collective_ns[kCollectiveKindCount] = {}, exposed_collective_ns[kCollectiveKindCount] = {};  // by Collective
  uint64_t of(Collective c) const { return collective_ns[static_cast<int>(c)]; }
  uint64_t exposed(Collective c) const { return exposed_collective_ns[static_cast<int>(c)]; }
};
TemporalBreakdown temporal_breakdown(const std::vector<GpuActivity>& gpu);

struct KernelTotal {  // one row of the `kernels` table
  std::string name, family, seam;  // family/seam: of the launch site with the most time
  int64_t calls = 0, total_ns = 0;
};
struct AttributionTotal {  // one row of `kernel_attribution`
  std::string name;
  LaunchScope scope;  // phase "unscoped" for launches outside every scope
  std::string family;
  int64_t calls = 0, total_ns = 0;
};
struct StepTime {  // one row of `profile_time`
  int64_t step = 0;
  std::string dimension;  // family | seam
  std::string key;
  int64_t calls = 0, total_ns = 0;
};
struct ProfileSummary {
  std::vector<KernelTotal> kernels;
  std::vector<AttributionTotal> attribution;
  std::vector<StepTime> time;
  TemporalBreakdown breakdown;
  int64_t records = 0;
};
ProfileSummary summarize(const ActivityLog& log);

// What the kernels inside one seam say about its backend.
struct BackendEvidence {
  std::string kernel;
  std::string matches;  // comma-separated catalog backends of the seam whose patterns match; "" none
  int64_t calls = 0, total_ns = 0;
};
struct ObservedBackend {
  std::string seam, chosen;
  std::optional<std::string> observed;  // null: the seam ran no kernel in the window
  std::optional<bool> mismatch;         // null: cannot be decided from kernel names
  std::string note;                     // why, in words
  std::vector<BackendEvidence> evidence;
};
// A seam's kernels must match the chosen backend's catalog patterns, and none may match only another
// backend's (a kernel both name, a shared pass, is the chosen one's). A chosen
// backend without patterns (the reference) is confirmed when no other backend's patterns match. And the
// seam's GEMM kernels must run in the chosen backend's precision (catalog fp8_gemms): an FP8 backend
// whose GEMMs ran in bf16, or another whose GEMMs ran in FP8, is a mismatch whatever the patterns say.
std::vector<ObservedBackend> observe_backends(const ProfileSummary& summary,
                                              const std::map<std::string, std::string>& chosen,
                                              const std::vector<kernels::BackendInfo>& catalog);

}  // namespace ablate::profiling
