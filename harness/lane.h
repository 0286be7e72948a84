// harness/lane.h: a run's lane, the key under which the receipts compare runs (trends, gates): the
// model (name and hash), the topology (processes x device kind) and the chosen backends. Stored in every
// receipt, so a lane must stay the same string for the same configuration across versions.
// Plain C++ (no LibTorch). Tests: tests/harness/lane_test.cpp.
#pragma once
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "spec/spec.h"

namespace ablate::harness {

// Whether a seam's resolution enters the lane key: its seam's LaneKey (kernels/seam_list.h) is
// always, or the seam is off its reference.
bool in_lane_key(const kernels::Resolution& r);

// "<model>:<model hash, 8>:<nproc>x<device kind>:<hash of the keyed backends, 8>"; `backends`: the run's
// resolutions in seam order (kernels::Dispatcher::resolutions()).
std::string lane_of(const ExperimentSpec& spec, const std::vector<kernels::Resolution>& backends,
                    const std::string& device_kind);

}  // namespace ablate::harness
