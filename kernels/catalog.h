// kernels/catalog.h: the kernel catalog as plain data (docs/architecture.md "Kernel catalog"). A seam is
// one place in the model whose implementation can vary; each backend row names its role, its fallback,
// the CUPTI kernel-name patterns that identify it and whether a whole-step CUDA graph can capture it.
// Availability needs a device description only, so the spec parser, `ablate catalog`, the profiler and
// the receipts use the catalog without LibTorch: it is its own plain library (ablate_catalog).
// The rows are listed per seam in kernels/<seam>/catalog.cpp (plain C++, kernels/catalog_rows.h);
// each backend's function registers itself under its row's name from the backend's own file
// (kernels/registry.h, LibTorch).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ablate::kernels {

enum class Role { keep, borderline, experimental, vendor, reference };
const char* role_name(Role r);

// Whether a backend's calls can be captured in a whole-step CUDA graph (harness/compile_posture.h):
// `always`; `never`; `not_when_dropless`: not in dropless MoE mode (E layers with
// model.moe.capacity_factor = 0), where it syncs with the host. A host sync cannot be captured.
enum class Capture { always, never, not_when_dropless };
const char* capture_name(Capture c);

// How a seam's chosen backend enters a run's lane key (harness/lane.h), declared per seam in
// kernels/seam_list.h: `always`, or `off_reference` (only when the seam is off its reference).
enum class LaneKey { always, off_reference };

// The model's shapes that some fused kernels are limited to, filled by the runner from the experiment's
// model (only for the block kinds its pattern has), so that a shape a kernel cannot take is decided when
// the backends resolve, before the first step: an error under strict, else a fallback with the reason
// recorded; never a failure in the middle of a run. 0 = not known (`ablate catalog`, the parity driver,
// whose calls check their own shapes): not checked.
struct ModelDims {
  int64_t experts = 0;       // E blocks: experts (moe_router)
  int64_t ssm_heads = 0;     // M blocks: heads H (ssm_rotary, ssm_scan)
  int64_t ssm_head_dim = 0;  // M blocks: head dim P
  int64_t ssm_state = 0;     // M blocks: state N (the rotary turns N / 4 pairs)
  int64_t ssm_chunk = 0;     // M blocks: scan chunk L
  int64_t conv_width = 0;    // R blocks: causal_conv taps K
  // Dense GEMMs (the blocks' projections, dense_gemm; the LM head, loss): the gcd of their widths (N, K
  // of each weight; the head's vocabulary and d) and of a micro-batch's tokens (batch x T, the weight
  // gradient's inner dimension). FP8 GEMMs (cuBLASLt) need every leading dimension a multiple of 16.
  int64_t projection_alignment = 0;
  // E blocks: the greatest common divisor of d_model and the expert FFN width f, the expert GEMMs' N and K
  // (moe_dispatch). FP8 grouped GEMMs need both multiples of 16.
  int64_t expert_alignment = 0;
};

// What availability checks may look at: filled from the live device, the run dtype and the model's
// shapes by the runner.
struct DeviceInfo {
  bool cuda = false;
  int sm_major = 0, sm_minor = 0;   // compute capability when cuda
  std::string dtype = "fp32";       // "fp32" | "bf16"
  ModelDims model;
};

struct BackendInfo {
  std::string seam;
  std::string name;                 // e.g. "reference", "sdpa_flash", "fused_cuda"
  Role role = Role::reference;
  std::string fallback;             // backend used when this one is unavailable ("" for the reference)
  std::vector<std::string> kernel_patterns;  // substrings of kernel names (demangled: profiling/cupti_names.h) that identify it
  std::string description;
  // "" when available on `dev`, else why not (e.g. "needs a CUDA device").
  std::string (*unavailable_reason)(const DeviceInfo& dev) = nullptr;
  Capture capture = Capture::always;
  std::string capture_reason;  // what prevents capture, when `capture` is not always
  // Its kernels are CUDA sources: a build without a CUDA compiler lists the row but does not build it.
  bool needs_nvcc = false;
  // It changes the numerics beyond reduction order: it computes in a lower precision than its
  // reference or approximates (FP8 GEMMs, approximate functions). Such a backend earns KEEP only by
  // convergence as well as speed: its validation loss over several seeds (report/gate.h). False: the
  // reference's math with another reduction order or fused intermediates, held to its parity test.
  bool changes_numerics = false;
  // Its GEMMs run in FP8 (e4m3/e5m2 inputs): the profiler checks the precision of every GEMM kernel that
  // ran inside the seam against this (profiling/attribution.h observe_backends): an FP8 backend whose
  // GEMMs ran in bf16, or another backend whose GEMMs ran in FP8, is a mismatch.
  bool fp8_gemms = false;
  // Set by catalog(): non-empty when this build has no implementation of the row (no LibTorch, or a CUDA
  // backend without a CUDA compiler): the row stays listed, so specs stay valid everywhere, and is
  // unavailable for this reason.
  std::string not_built;
};

// Why `row` cannot run on `dev` ("" when it can): not built, else its availability check.
std::string why_unavailable(const BackendInfo& row, const DeviceInfo& dev);
// Why a whole-step CUDA graph cannot capture `row`'s calls ("" when it can), the condition first;
// `dropless_moe`: the model has E layers and model.moe.capacity_factor = 0.
std::string why_not_capturable(const BackendInfo& row, bool dropless_moe);

// Availability checks that backends share (each returns "" when the backend can run on `dev`).
namespace availability {
std::string always(const DeviceInfo& dev);
std::string needs_cuda(const DeviceInfo& dev);
std::string needs_compute_capability(const DeviceInfo& dev, int major, int minor);
std::string needs_half_precision(const DeviceInfo& dev);
// Our own CUDA kernels: built for sm_90a (Hopper), fp32 and bf16 tensors.
std::string hopper_fp32_or_bf16(const DeviceInfo& dev);
// "" when `value` is unknown (0) or at most `limit`; else what exceeds which limit and how to run it,
// e.g. dims_at_most(dev.model.conv_width, 4, "model.recurrent.conv_width", "taps", "causal_conv").
std::string dims_at_most(int64_t value, int64_t limit, const char* field, const char* unit, const char* seam);
}  // namespace availability

// All seams, in model order (kernels/seam_list.h), the training step's optimizer last.
const std::vector<std::string>& seams();
// How `seam` enters a run's lane key; throws std::invalid_argument for an unknown seam.
LaneKey lane_key_of(const std::string& seam);
// Every backend row of every seam (the table `ablate catalog` prints): seams in seams() order, each
// seam's rows in the order of its kernels/<seam>/catalog.cpp, the reference first. Checked once, on
// first use (checked_seam_rows); a malformed row is a std::logic_error.
const std::vector<BackendInfo>& catalog();

// What this build compiled: LibTorch (any backend at all) and a CUDA compiler (rows with needs_nvcc).
struct BuildFacts {
  bool libtorch = false;
  bool cuda = false;
};
BuildFacts this_build();
// One seam's rows as catalog() keeps them: the seam set, not_built filled from `build` ("built without
// LibTorch", "built without CUDA"). Refuses (std::logic_error, naming the seam and row) a row without a
// name, a description or an availability check, a row naming another seam, a name listed twice, a
// reference that is not first or not the only row with role reference and no fallback, and a capture
// reason given when the row is always capturable or missing when it is not.
std::vector<BackendInfo> checked_seam_rows(const std::string& seam, std::vector<BackendInfo> rows,
                                           const BuildFacts& build);
const BackendInfo* find_backend(const std::string& seam, const std::string& name);
std::vector<std::string> backend_names(const std::string& seam);

// The resolution of one seam for one run: requested (from the spec), chosen, and why.
struct Resolution {
  std::string seam, requested, chosen, reason;
};
// Walks the fallback chain from `requested` to the first available backend. With `strict` an
// unavailable requested backend is an error: returns false and sets `error`.
bool resolve(const std::string& seam, const std::string& requested, const DeviceInfo& dev, bool strict,
             Resolution& out, std::string& error);

}  // namespace ablate::kernels
