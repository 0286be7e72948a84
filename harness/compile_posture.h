// harness/compile_posture.h: whether a run may capture its whole training step in a CUDA graph, decided
// up front from what the run will execute (device, chosen backends, model config) rather than by
// crashing mid-capture: a seam that synchronises with the host (the standard MoE dispatch in dropless
// mode reads the largest expert load) makes capture impossible, and that is a recorded fact.
// Plain C++ (no LibTorch). Tests: tests/harness/compile_posture_test.cpp.
#pragma once
#include <map>
#include <string>

#include "model/config.h"

namespace ablate::harness {

struct GraphCapturePosture {
  bool requested = false;
  bool achieved = false;
  std::string reason;  // why not achieved (or "not requested")
};

// `chosen`: seam -> chosen backend of the run's Dispatcher.
GraphCapturePosture decide_graph_capture(bool requested, bool cuda_device,
                                         const std::map<std::string, std::string>& chosen,
                                         const model::ModelConfig& model);

}  // namespace ablate::harness
