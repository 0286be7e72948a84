// harness/compile_posture.cpp: see compile_posture.h. The order of the checks is the order a reader
// would fix them in: device first, then host syncs inside the step.
// Tests: tests/harness/compile_posture_test.cpp.
#include "harness/compile_posture.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <vector>

#include "kernels/catalog.h"

namespace ablate::harness {
namespace {

// How to make a run with `row` capturable: another backend of its seam that always captures, or
// (where only dropless MoE prevents it) a capacity factor.
std::string capture_advice(const kernels::BackendInfo& row) {
  std::vector<std::string> backends, options;
  for (const auto& other : kernels::catalog())
    if (other.seam == row.seam && other.capture == kernels::Capture::always) backends.push_back(other.name);
  if (!backends.empty()) options.push_back(fmt::format("choose {} = {}", row.seam, fmt::join(backends, " or ")));
  if (row.capture == kernels::Capture::not_when_dropless) options.push_back("set a capacity factor");
  return fmt::format("to capture, {}", fmt::join(options, ", or "));
}

}  // namespace

receipts::CaptureFacts decide_graph_capture(bool requested, bool cuda_device,
                                            const std::map<std::string, std::string>& chosen,
                                            const model::ModelConfig& model) {
  using receipts::CaptureOutcome;
  receipts::CaptureFacts p;
  p.requested = requested;
  if (!requested) {
    p.outcome = CaptureOutcome::not_requested;
    p.reason = "not requested";
    return p;
  }
  p.outcome = CaptureOutcome::refused;
  if (!cuda_device) {
    p.reason = "refused: CUDA graphs need a CUDA device (the run is on the CPU); the step ran eager";
    return p;
  }
  // Every chosen backend's catalog row says whether its calls can be captured (kernels/catalog.h Capture).
  const bool dropless_moe = model.pattern.find('E') != std::string::npos && model.moe.capacity_factor == 0;
  std::vector<std::string> blockers;
  for (const auto& [seam, backend] : chosen) {
    const auto* row = kernels::find_backend(seam, backend);
    if (row == nullptr)
      throw std::logic_error("decide_graph_capture: chosen backend " + seam + "/" + backend + " is not in the catalog");
    if (const std::string why = kernels::why_not_capturable(*row, dropless_moe); !why.empty())
      blockers.push_back("seam " + seam + " = " + backend + " " + why + " (" + capture_advice(*row) + ")");
  }
  if (!blockers.empty()) {
    p.reason = fmt::format("refused: {}; the step ran eager", fmt::join(blockers, "; "));
    return p;
  }
  p.eligible = true;
  p.outcome = CaptureOutcome::not_reached;
  p.reason = "eligible: the step is captured after the eager warm-up steps";
  return p;
}

std::string graph_refusal_under_data_parallel(int64_t expert_parallel, double capacity_factor) {
  if (expert_parallel <= 1 || capacity_factor > 0) return "";
  return fmt::format(
      "refused: distributed.expert_parallel = {} without a capacity (model.moe.capacity_factor = 0, dropless) "
      "reads each E layer's token counts on the host to size its all-to-all (a host sync inside the step); the "
      "step runs eager (set model.moe.capacity_factor > 0, whose exchange sends every expert a fixed capacity of "
      "rows, or distributed.expert_parallel = 1 to capture)",
      expert_parallel);
}

}  // namespace ablate::harness
