// harness/compile_posture.cpp: see compile_posture.h. The order of the checks is the order a reader
// would fix them in: device first, then host syncs inside the step.
// Tests: tests/harness/compile_posture_test.cpp.
#include "harness/compile_posture.h"

namespace ablate::harness {

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
  const bool has_moe = model.pattern.find('E') != std::string::npos;
  const auto moe = chosen.find("moe_dispatch");
  if (has_moe && moe != chosen.end() && moe->second == "reference" && model.moe.capacity_factor == 0) {
    p.reason =
        "refused: seam moe_dispatch = reference (standard path, dropless: model.moe.capacity_factor = 0) reads the "
        "largest expert load on the host in every E layer, and a host sync cannot be captured; the step ran eager "
        "(choose moe_dispatch = grouped_mm, which is dropless without a sync, or a capacity factor to capture)";
    return p;
  }
  p.eligible = true;
  p.outcome = CaptureOutcome::not_reached;
  p.reason = "eligible: the step is captured after the eager warm-up steps";
  return p;
}

}  // namespace ablate::harness
