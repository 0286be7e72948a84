// tests/harness/compile_posture_test.cpp: whole-step CUDA graph capture is decided up front, with the
// reason recorded: not requested, no CUDA device, a chosen backend whose catalog row cannot be captured
// (the standard MoE dispatch's host sync in dropless mode); everything else is eligible (the runner
// then captures; tests/harness/profiling_gpu_test.cpp on a GPU).
// Run: build/tests/harness_tests --gtest_filter='CompilePosture*'
#include "harness/compile_posture.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "kernels/catalog.h"

namespace ablate::harness {
namespace {

model::ModelConfig with_pattern(const std::string& pattern, double capacity_factor = 0) {
  auto config = *model::named_config("tiny");
  config.pattern = pattern;
  config.moe.capacity_factor = capacity_factor;
  return config;
}

TEST(CompilePosture, NotRequestedAndNoDevice) {
  const std::map<std::string, std::string> chosen = {{"moe_dispatch", "reference"}};
  const auto off = decide_graph_capture(false, true, chosen, with_pattern("AE"));
  EXPECT_FALSE(off.requested);
  EXPECT_FALSE(off.eligible);
  EXPECT_FALSE(off.achieved);
  EXPECT_EQ(off.reason, "not requested");
  const auto cpu = decide_graph_capture(true, false, chosen, with_pattern("AE"));
  EXPECT_TRUE(cpu.requested);
  EXPECT_FALSE(cpu.eligible);
  EXPECT_FALSE(cpu.achieved);
  EXPECT_NE(cpu.reason.find("need a CUDA device"), std::string::npos) << cpu.reason;
}

TEST(CompilePosture, StandardDroplessMoeIsRefusedForItsHostSync) {
  if (kernels::catalog().empty()) GTEST_SKIP() << "a build without LibTorch has no backend rows";
  const std::map<std::string, std::string> chosen = {{"moe_dispatch", "reference"}};
  const auto p = decide_graph_capture(true, true, chosen, with_pattern("AEMEAEMR"));
  EXPECT_FALSE(p.eligible);
  EXPECT_NE(p.reason.find("moe_dispatch = reference"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("host sync"), std::string::npos) << p.reason;
  // The reason and the way out come from the catalog rows (kernels/catalog.h Capture).
  EXPECT_NE(p.reason.find("dropless MoE mode (model.moe.capacity_factor = 0)"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("choose moe_dispatch = grouped_mm or grouped_mm_fp8_rowwise, or set a capacity factor"), std::string::npos) << p.reason;
  // No E layer, or a capacity factor: nothing syncs, the run may capture (achieved only once it has).
  for (const auto& config : {with_pattern("AMR"), with_pattern("AE", 1.25)}) {
    const auto q = decide_graph_capture(true, true, chosen, config);
    EXPECT_TRUE(q.eligible) << q.reason;
    EXPECT_FALSE(q.achieved);
    EXPECT_EQ(q.reason.find("moe_dispatch"), std::string::npos) << q.reason;
  }
}

// Data parallel captures its collectives with the step in every sharding stage; dropless expert
// parallelism's host read of the token counts refuses it, saying how to capture; under a capacity
// factor the exchange has fixed sizes and is captured.
TEST(CompilePosture, DataParallelCapturesUnlessExpertsAreExchangedDropless) {
  EXPECT_EQ(graph_refusal_under_data_parallel(1, 0.0), "");
  EXPECT_EQ(graph_refusal_under_data_parallel(4, 1.25), "");
  const auto why = graph_refusal_under_data_parallel(4, 0.0);
  EXPECT_EQ(why.rfind("refused: distributed.expert_parallel = 4", 0), 0u) << why;
  EXPECT_NE(why.find("host sync"), std::string::npos) << why;
  EXPECT_NE(why.find("set model.moe.capacity_factor > 0"), std::string::npos) << why;
  EXPECT_NE(why.find("distributed.expert_parallel = 1 to capture"), std::string::npos) << why;
}

// Every chosen backend is a catalog row; one that is not is a bug of the caller, never eligible.
TEST(CompilePosture, AChosenBackendOutsideTheCatalogIsAnError) {
  const std::map<std::string, std::string> chosen = {{"moe_dispatch", "no_such_backend"}};
  EXPECT_THROW(decide_graph_capture(true, true, chosen, with_pattern("AE")), std::logic_error);
}

}  // namespace
}  // namespace ablate::harness
