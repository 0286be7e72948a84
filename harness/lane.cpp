// harness/lane.cpp: see lane.h.
// Tests: tests/harness/lane_test.cpp.
#include "harness/lane.h"

#include <fmt/format.h>

#include "base/sha256.h"

namespace ablate::harness {

bool in_lane_key(const kernels::Resolution& r) {
  return kernels::lane_key_of(r.seam) == kernels::LaneKey::always || r.chosen != "reference";
}

std::string lane_of(const ExperimentSpec& spec, const std::vector<kernels::Resolution>& backends,
                    const std::string& device_kind) {
  std::string keyed;
  for (const auto& r : backends)
    if (in_lane_key(r)) keyed += r.seam + "=" + r.chosen + ";";
  return fmt::format("{}:{}:{}x{}:{}", spec.model.name, model_hash(spec).substr(0, 8), spec.distributed.nproc, device_kind,
                     base::sha256_hex(keyed).substr(0, 8));
}

}  // namespace ablate::harness
