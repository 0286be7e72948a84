// tests/receipts/run_facts_test.cpp: the typed run facts (receipts/run_facts.h): every section
// survives a round trip through the store, receipts written before the types existed read back with
// their meaning (the capture outcome derived from the old flags), unknown keys are kept, and a value
// of the wrong type is refused with the key's path.
// Run: build/tests/receipts_tests --gtest_filter='RunFacts*'
#include "receipts/run_facts.h"

#include <gtest/gtest.h>

#include "receipts/errors.h"
#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using nlohmann::json;

RunFacts every_section() {
  RunFacts f;
  f.final_loss = 4.75;
  f.final_validation_loss = 4.875;
  f.final_validation_step = 40;
  f.first_step_ms = 812.5;
  f.warmup_steps = 4;
  f.steady_steps = 36;
  f.window_steps_excluded = 5;
  f.outlier_steps = {17, 33};
  f.tokens_per_step = 8192;
  f.start_step = 0;
  f.peak_memory_kind = "cuda allocator allocated peak";
  f.cuda_graphs = CaptureFacts{true, true, true, CaptureOutcome::captured, 3, 412.0, "captured at step 3"};
  f.moe = MoeFacts{4, 2, 1.25, 10, 1000, 0.01, 0.0123};
  DistributedFacts d;
  d.world_size = 2;
  d.backend = "nccl";
  d.launcher = "ablate launch";
  auto rank = [](int64_t r, double step_ms, double comm_ms, double collective_wait_ms, double reduce_scatter_ms) {
    RankFacts facts;  // by name: a positional RankFacts leaves its later members out
    facts.rank = r;
    facts.median_step_ms = step_ms;
    facts.median_comm_ms = comm_ms;
    facts.median_comm_wait_ms = 0.1;
    facts.collective_wait_ms = collective_wait_ms;
    facts.peak_memory_bytes = 1 << 30;
    facts.median_reduce_scatter_ms = reduce_scatter_ms;
    facts.median_all_gather_ms = 2.5;
    return facts;
  };
  d.per_rank = {rank(0, 38.1, 6.5, 0.0, 4.0), rank(1, 38.2, 20.5, 14.0, 18.0)};
  d.step_time_ratio = 1.002;
  d.straggler_rank = 0;
  d.straggler_wait_share = 0.367;
  d.comm_share = 0.35;
  d.comm_wait_share = 0.002;
  d.per_rank[0].exposed_comm_share = 0.021;
  d.per_rank[1].exposed_comm_share = 0.025;
  d.per_rank[1].peak_reserved_bytes = int64_t{70} << 30;
  d.per_rank[1].outside_allocator_bytes = int64_t{1} << 30;
  d.exposed_comm_share = 0.023;
  d.sharding = ShardingFacts{"gradients", 12, 150'000'000, 480, 600'000'000, 300'000'000, 100'000'000};
  d.sharding->reduce_dtype = "bf16";
  d.sharding->param_dtype = "bf16";
  f.distributed = d;
  ProfileFacts p;
  p.status = "ok";
  p.trace = "/tmp/run1_rank0.pt.trace.json.gz";
  p.records = 4540;
  p.backend_mismatches = {{"rope", "fused_cuda", "reference", "only reference kernels ran"}};
  p.window_start = 20;
  p.window_end = 25;
  p.overhead_pct = 1.5;
  f.profile = p;
  f.model = ModelFacts{"nam56r-small", {"--set model.d_model=2048"}, true, "AEMEAEMEAEMR", 2048, 12, 4096, 8,
                       1'800'000'000, 900'000'000, 1.1e10};
  PrecisionFacts precision;
  precision.dtype = "bf16-autocast";
  precision.flops_version = "v2";
  precision.mfu_peak_flops = 989.4e12;
  precision.mfu_peak_source = "NVIDIA H200 dense bf16";
  f.precision = precision;
  f.memory = MemoryFacts{int64_t{141} << 30, int64_t{74} << 30, int64_t{70} << 30, int64_t{1} << 30, int64_t{71} << 30,
                         true};
  f.data = {{"source", "synthetic"}};
  return f;
}

TEST(RunFacts, EverySectionSurvivesTheStore) {
  base::TempDir dir;
  auto store = Store::open(dir.file("r.db"));
  const auto id = store.begin_run(testing::sample_start("facts"));
  RunSummary s = testing::sample_summary();
  s.facts = every_section();
  store.finish_run(id, RunStatus::ok, "", s);
  const RunFacts back = store.get_run(id).summary.facts;
  EXPECT_EQ(to_json(back), to_json(every_section()));
  ASSERT_TRUE(back.cuda_graphs);
  EXPECT_EQ(back.cuda_graphs->outcome, CaptureOutcome::captured);
  ASSERT_TRUE(back.distributed);
  EXPECT_EQ(back.distributed->per_rank.at(1).collective_wait_ms, 14.0);
  ASSERT_TRUE(back.distributed->sharding);
  EXPECT_EQ(back.distributed->sharding->stage, "gradients");
  EXPECT_EQ(back.distributed->sharding->reduce_dtype, "bf16");
  EXPECT_EQ(back.distributed->sharding->param_dtype, "bf16");
  EXPECT_EQ(back.distributed->sharding->optimizer_state_bytes, 600'000'000);
  EXPECT_EQ(back.distributed->sharding->gradient_bytes, 300'000'000);
  EXPECT_EQ(back.distributed->per_rank.at(0).median_reduce_scatter_ms, 4.0);
  EXPECT_EQ(back.distributed->per_rank.at(1).exposed_comm_share, 0.025);
  EXPECT_EQ(back.distributed->exposed_comm_share, 0.023);
  EXPECT_FALSE(back.distributed->per_rank.at(0).median_all_reduce_ms.has_value());
  ASSERT_TRUE(back.model);
  EXPECT_TRUE(back.model->config_overridden);
  EXPECT_EQ(back.model->overrides, std::vector<std::string>{"--set model.d_model=2048"});
  ASSERT_TRUE(back.precision);
  EXPECT_EQ(back.precision->mfu_peak_flops, 989.4e12);
  ASSERT_TRUE(back.memory);
  EXPECT_EQ(back.memory->limit_bytes, int64_t{74} << 30);
  EXPECT_EQ(back.memory->needed_bytes, int64_t{71} << 30);
  EXPECT_TRUE(back.memory->expandable_segments);
  EXPECT_EQ(back.distributed->per_rank.at(1).outside_allocator_bytes, int64_t{1} << 30);
  EXPECT_FALSE(back.distributed->per_rank.at(0).peak_reserved_bytes.has_value());
}

// Sharding facts written before reduce_dtype was recorded: every reduction then was fp32.
TEST(RunFacts, ShardingWithoutAReductionDtypeReadsAsFp32) {
  const json j = json::parse(R"({"distributed": {"world_size": 2, "backend": "nccl", "per_rank": [],
    "sharding": {"stage": "optimizer", "buckets": 20}}})");
  const RunFacts f = run_facts_from_json(j);
  ASSERT_TRUE(f.distributed && f.distributed->sharding);
  EXPECT_EQ(f.distributed->sharding->reduce_dtype, "fp32");
  EXPECT_EQ(f.distributed->sharding->param_dtype, "fp32");
  EXPECT_EQ(f.distributed->sharding->buckets, 20);
}

// A summary as receipts held it before the facts were typed (schema v4 stores, 2026-11): the flat
// keys and the cuda_graphs flags without an outcome.
TEST(RunFacts, OlderReceiptsReadWithTheirMeaning) {
  const json old = json::parse(R"({
    "final_loss": 4.7, "first_step_ms": 900.0, "warmup_steps": 4, "steady_steps": 56, "outlier_steps": [],
    "parameters": 290000000, "active_parameters": 200000000, "training_flops_per_token": 1.7e9,
    "tokens_per_step": 8192, "distributed": null, "moe": {"e_layers": 4, "top_k": 2, "capacity_factor": 0,
    "dropped_slots": 0, "routed_slots": 100, "drop_rate": 0.0, "final_aux_loss": null},
    "resumed_from": "", "start_step": 0, "data": {"source": "corpus"}, "peak_memory_kind": "process RSS",
    "profile": {"status": "disabled", "reason": "[profile] enabled = false"},
    "cuda_graphs": {"requested": true, "eligible": true, "achieved": false, "capture_step": null,
                    "reason": "capture failed at step 3: operation not permitted when stream is capturing; the run went on eager"}})");
  const RunFacts f = run_facts_from_json(old);
  ASSERT_TRUE(f.cuda_graphs);
  EXPECT_EQ(f.cuda_graphs->outcome, CaptureOutcome::failed);
  EXPECT_FALSE(f.distributed);
  ASSERT_TRUE(f.moe);
  EXPECT_EQ(f.moe->drop_rate, 0.0);
  EXPECT_FALSE(f.moe->final_aux_loss);
  EXPECT_FALSE(f.model);
  EXPECT_FALSE(f.memory);  // no cap and no GPU memory facts were recorded then
  EXPECT_EQ(f.parameters, 290000000);
  ASSERT_TRUE(f.profile);
  EXPECT_EQ(f.profile->status, "disabled");
  EXPECT_TRUE(f.unknown.empty()) << f.unknown.dump();

  json refused = old;
  refused["cuda_graphs"] = {{"requested", true}, {"eligible", false}, {"achieved", false}, {"reason", "refused: CPU"}};
  EXPECT_EQ(run_facts_from_json(refused).cuda_graphs->outcome, CaptureOutcome::refused);
  json short_run = old;
  short_run["cuda_graphs"]["reason"] = "eligible, but the run ended before its capture step 3";
  EXPECT_EQ(run_facts_from_json(short_run).cuda_graphs->outcome, CaptureOutcome::not_reached);
}

TEST(RunFacts, UnknownKeysAreKept) {
  json j = to_json(every_section());
  j["written_by_a_newer_version"] = {{"x", 1}};
  const RunFacts f = run_facts_from_json(j);
  EXPECT_EQ(f.unknown, json({{"written_by_a_newer_version", {{"x", 1}}}}));
  EXPECT_EQ(to_json(f), j);
}

TEST(RunFacts, AWrongTypeIsRefusedWithItsPath) {
  json j = to_json(every_section());
  j["distributed"]["per_rank"][1]["median_step_ms"] = "fast";
  try {
    run_facts_from_json(j, "run 7 summary_json");
    FAIL() << "a string where a number belongs was accepted";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("run 7 summary_json.distributed.per_rank[1].median_step_ms: expected a number"),
              std::string::npos)
        << e.what();
  }
  json contradiction = to_json(every_section());
  contradiction["cuda_graphs"]["achieved"] = false;  // outcome says captured
  EXPECT_THROW(run_facts_from_json(contradiction), StoreError);
  json bad_outcome = to_json(every_section());
  bad_outcome["cuda_graphs"]["outcome"] = "maybe";
  EXPECT_THROW(run_facts_from_json(bad_outcome), StoreError);
}

TEST(RunFacts, NothingRecordedStoresNoSummaryJson) {
  base::TempDir dir;
  auto store = Store::open(dir.file("r.db"));
  const auto id = store.begin_run(testing::sample_start("empty"));
  store.finish_run(id, RunStatus::failed, "boom", RunSummary{});
  EXPECT_TRUE(store.query("SELECT summary_json FROM runs WHERE id = ?", {id})[0]["summary_json"].is_null());
  EXPECT_TRUE(RunFacts{}.empty());
  RunFacts one;
  one.final_loss = 1.0;
  EXPECT_FALSE(one.empty());
}

}  // namespace
}  // namespace ablate::receipts
