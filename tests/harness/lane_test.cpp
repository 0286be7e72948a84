// tests/harness/lane_test.cpp: a run's lane (harness/lane.h) is stored in every receipt, and trends and
// gates compare the runs of one lane across versions, so the same configuration must keep its lane
// string. The expected lanes below were computed by the lane code as it was before the lane-key facts
// moved into kernels/seam_list.h (late seams listed in the runner): a change here splits stored lanes.
// Run: build/tests/harness_tests --gtest_filter='Lane*'
#include "harness/lane.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ablate::harness {
namespace {

// Resolutions in seam order, every seam on its reference unless `chosen` names another backend.
std::vector<kernels::Resolution> resolutions(const std::map<std::string, std::string>& chosen = {}) {
  std::vector<kernels::Resolution> out;
  for (const auto& seam : kernels::seams()) {
    const auto it = chosen.find(seam);
    const std::string backend = it == chosen.end() ? "reference" : it->second;
    out.push_back({.seam = seam, .requested = backend, .chosen = backend, .reason = "requested backend is available"});
  }
  return out;
}

ExperimentSpec experiment(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return parse_spec_file(std::string(ABLATE_SOURCE_DIR) + "/experiments/" + name + ".toml", overrides);
}

// The fast lane's seams off their reference; the late seams (optimizer, ssm_rotary, causal_conv,
// moe_router) still on theirs.
const std::map<std::string, std::string> kFastEarlySeams = {{"attention", "sdpa_flash"},
                                                            {"residual_norm", "fused_cuda"},
                                                            {"ssm_scan", "fused_cuda"},
                                                            {"moe_dispatch", "grouped_mm"},
                                                            {"loss", "fused_cuda"}};

// experiments/tiny.toml: the spec parses in every build (a build without LibTorch knows no backend a
// spec could name); the lane's backends come from the resolutions given here.
TEST(Lane, StaysTheSameStringForTheSameConfiguration) {
  EXPECT_EQ(lane_of(experiment("tiny"), resolutions(), "cpu"), "tiny:1efa8daa:1xcpu:ffc50673");
  EXPECT_EQ(lane_of(experiment("tiny"), resolutions(kFastEarlySeams), "cuda"), "tiny:1efa8daa:1xcuda:6981e888");
  auto all_fast = kFastEarlySeams;
  for (const char* late : {"optimizer", "ssm_rotary", "causal_conv", "moe_router"}) all_fast[late] = "fused_cuda";
  EXPECT_EQ(lane_of(experiment("tiny", {"distributed.nproc=2", "model.moe.capacity_factor=1.25"}), resolutions(all_fast),
                    "cuda"),
            "tiny:0fd7f52f:2xcuda:7c25000f");
}

// A late seam on its reference leaves the key as if the seam did not exist; off it, it joins the key.
TEST(Lane, LateSeamsJoinTheKeyOnlyOffTheirReference) {
  const auto spec = experiment("tiny");
  const std::string all_reference = lane_of(spec, resolutions(), "cpu");
  for (const auto& seam : kernels::seams()) {
    const bool late = kernels::lane_key_of(seam) == kernels::LaneKey::off_reference;
    EXPECT_EQ(in_lane_key({.seam = seam, .requested = "reference", .chosen = "reference", .reason = ""}), !late) << seam;
    EXPECT_TRUE(in_lane_key({.seam = seam, .requested = "x", .chosen = "x", .reason = ""})) << seam;
    EXPECT_NE(lane_of(spec, resolutions({{seam, "x"}}), "cpu"), all_reference) << seam;
  }
  EXPECT_THROW(in_lane_key({.seam = "no_such_seam", .requested = "reference", .chosen = "reference", .reason = ""}),
               std::invalid_argument);
}

}  // namespace
}  // namespace ablate::harness
