// harness/compile_posture.h: whether a run may capture its whole training step in a CUDA graph, decided
// up front from what the run will execute (device, chosen backends, model config) rather than by
// crashing mid-capture: a seam that synchronises with the host (the standard MoE dispatch in dropless
// mode reads the largest expert load) makes capture impossible, and that is a recorded fact. An
// eligible run then tries (harness/train/step_graph.h); a capture that still fails falls back to eager
// with the failure as the reason.
// Plain C++ (no LibTorch). Tests: tests/harness/compile_posture_test.cpp.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "model/config.h"
#include "receipts/run_facts.h"

namespace ablate::harness {

// Eager steps on the capture stream before the capture: lazy initialisation (cuBLAS handles and
// workspaces, cuDNN autotuning, first-launch module loading) must not happen inside the graph.
inline constexpr int64_t kGraphWarmupEagerSteps = 3;

// The decision up front: outcome not_requested or refused (with the reason), or eligible (outcome
// not_reached until the step executor captures: captured or failed, with how or why).
// `chosen`: seam -> chosen backend of the run's Dispatcher.
receipts::CaptureFacts decide_graph_capture(bool requested, bool cuda_device,
                                         const std::map<std::string, std::string>& chosen,
                                         const model::ModelConfig& model);

// Under data parallel the whole step is captured with its collectives (NCCL kernels replay from the
// graph: the gradient all-reduces or reduce-scatters, the parameter all-gathers, the stats' mean), for
// every sharding stage. "" when the layout allows it, else the reason a capture is refused: dropless
// expert parallelism reads each E layer's token counts on the host to size its all-to-all (under a
// capacity factor its all-to-alls have fixed sizes: kernels/moe_dispatch/expert_exchange.h).
std::string graph_refusal_under_data_parallel(int64_t expert_parallel, double capacity_factor);

}  // namespace ablate::harness
