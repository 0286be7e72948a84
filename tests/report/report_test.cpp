// tests/report/report_test.cpp: report::build_report and its renderings on a fixture store: the golden
// Markdown (tests/report/golden/report_fixture.md; regenerate with ABLATE_UPDATE_GOLDEN=1 after a
// deliberate change and review the diff), failed runs listed but never counted, unreliable cells, HTML
// escaping of user-controlled names, plots through gnuplot, and a missing gnuplot.
// Build and run: cmake --build build --target report_tests && build/tests/report_tests --gtest_filter='Report*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "report/plots.h"
#include "report/report.h"
#include "report/run_view.h"
#include "report/selection.h"
#include "tests/report/fixture_store.h"

namespace ablate::report {
namespace {

using receipts::testing::ScopedEnv;
using testing::FixtureRun;
using testing::FixtureStore;

const std::string kGolden = std::string(ABLATE_SOURCE_DIR) + "/tests/report/golden/report_fixture.md";

FixtureRun detailed(std::string name, std::string backend, double final_loss) {
  FixtureRun run;
  run.name = std::move(name);
  run.backend = std::move(backend);
  run.final_loss = final_loss;
  run.losses = {4.0, 3.5, final_loss};
  run.goodput = {{"startup", 1.5}, {"productive", 9.0}, {"other", 0.5}};
  return run;
}

// Two cells by name: "reference" (4 ok runs) and "flash" (3 ok, 1 failed; traced; one fallback).
void build_fixture(FixtureStore& f) {
  f.add_group("ab", {100, 101, 99, 100.5}, detailed("reference", "reference", 3.0));
  FixtureRun flash = detailed("flash", "sdpa_flash", 3.01);
  flash.kernels = {{"flash_fwd_kernel", "attention", "attention", 0, 10, 4'000'000},
                   {"sm90_gemm", "gemm", "", 0, 40, 6'000'000}};
  flash.backends = {{"attention", "sdpa_flash", "sdpa_flash", std::string("sdpa_flash"), "", false},
                    {"loss", "chunked", "reference", std::nullopt, "chunked unavailable here", std::nullopt}};
  f.add_group("ab", {80, 81, 79}, flash);
  flash.status = receipts::RunStatus::failed;
  f.add("ab", flash);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Report, MarkdownMatchesTheGoldenFile) {
  FixtureStore f;
  build_fixture(f);
  ScopedEnv no_gnuplot("ABLATE_GNUPLOT", "/nonexistent/gnuplot");
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  const auto plots = make_plots(report);
  const std::string markdown = render_markdown(to_document(report, plots.plots, plots.note));
  if (std::getenv("ABLATE_UPDATE_GOLDEN")) std::ofstream(kGolden) << markdown;
  const std::string golden = read(kGolden);
  if (markdown != golden) {
    const std::string actual = std::string(ABLATE_BINARY_DIR) + "/report_fixture.actual.md";
    std::ofstream(actual) << markdown;
    FAIL() << "Markdown differs from " << kGolden << "; got " << actual << " (diff them; ABLATE_UPDATE_GOLDEN=1 "
           << "rewrites the golden file after a deliberate change)";
  }
}

// What a cell's runs needed of a GPU (facts.memory): the most any ok run needed, and the allocator cap
// they ran under; a run that failed out of memory under the cap is not evidence and is listed under Runs.
TEST(Report, MemorySectionShowsWhatTheRunsNeededOfAGpuAndTheirCap) {
  constexpr std::int64_t GiB = std::int64_t{1} << 30;
  FixtureStore f;
  FixtureRun capped;
  capped.name = "full";
  for (const std::int64_t reserved : {70, 72, 71}) {
    capped.memory = {{"device_bytes", 141 * GiB}, {"limit_bytes", 77 * GiB}, {"peak_reserved_bytes", reserved * GiB},
                     {"outside_allocator_bytes", GiB}, {"needed_bytes", (reserved + 1) * GiB}};
    f.add("mem", capped);
  }
  FixtureRun unsharded = capped;
  unsharded.name = "none";
  unsharded.status = receipts::RunStatus::failed;
  f.add("mem", unsharded);
  FixtureRun uncapped;
  uncapped.name = "cpu";
  f.add("mem", uncapped);

  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:mem"));
  ASSERT_EQ(report.cells.size(), 3u);
  EXPECT_EQ(report.cells[0].gpu_needed_bytes, 73 * GiB);
  EXPECT_EQ(report.cells[0].memory_limit_bytes, 77 * GiB);
  EXPECT_FALSE(report.cells[1].gpu_needed_bytes.has_value());  // its one run failed: no evidence
  EXPECT_FALSE(report.cells[2].gpu_needed_bytes.has_value());  // recorded no memory facts
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("| full | 1.000 GiB | - | - | - | - | 73.000 GiB | 77.000 GiB |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("Allocator cap: train.memory\\_limit\\_gib"), std::string::npos) << markdown;
  EXPECT_EQ(to_json(report)["cells"][0]["gpu_needed_bytes"], 73 * GiB);
}

// Data parallel cells: tokens/s per GPU against the 1-GPU cell, communication share (null on Gloo),
// exposed communication share (none without a profile window) and straggler wait as medians of the
// runs' facts.distributed; a report without a
// multi-GPU cell has no Scaling section.
TEST(Report, ScalingSectionForDataParallelCells) {
  FixtureStore f;
  FixtureRun one;
  one.name = "dp1";
  f.add_group("dp", {100, 100, 100}, one);  // 1000 tokens a step: 10000 tokens/s
  FixtureRun two;
  two.name = "dp2";
  two.step_ms = 105;
  two.tokens_per_s = 2000 / 0.105;  // the job's 2000 tokens a step at 105 ms: 9523.8 per GPU
  for (const double share : {0.08, 0.10, 0.12}) {
    two.distributed = {{"world_size", 2}, {"backend", "nccl"}, {"comm_share", share}, {"comm_wait_share", 0.01},
                       {"exposed_comm_share", share / 4},
                       {"exposed_by_collective", {{"all_gather", share / 5}, {"all_to_all", share / 8}, {"all_reduce", nullptr}}},
                       {"straggler_ratio", 1.0 + share / 5}, {"straggler_wait_share", share / 2},
                       {"sharding", {{"stage", "optimizer"}, {"param_dtype", "bf16"}}},
                       {"per_rank", {{{"rank", 0}, {"median_reduce_scatter_ms", 50 * share}, {"median_all_gather_ms", 2.5}},
                                     {{"rank", 1}, {"median_reduce_scatter_ms", 99.0}}}}};
    f.add("dp", two);
  }
  FixtureRun gloo = two;
  gloo.name = "gloo2";
  gloo.distributed = {{"world_size", 2}, {"backend", "gloo"}, {"comm_share", nullptr}, {"comm_wait_share", 0.2},
                      {"straggler_ratio", 1.5}};
  f.add_group("dp", {105, 105, 105}, gloo);

  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:dp"));
  ASSERT_TRUE(report.has_multi_gpu);
  EXPECT_EQ(report.scaling_reference, "dp1");
  ASSERT_EQ(report.cells.size(), 3u);
  const auto& dp1 = report.cells[0].scaling;
  EXPECT_EQ(dp1.world_size, 1);
  EXPECT_DOUBLE_EQ(*dp1.efficiency, 1.0);
  EXPECT_FALSE(dp1.comm_share.has_value());
  ASSERT_EQ(report.cells[1].name, "dp2");  // groups in the order of their oldest run
  const auto& dp2 = report.cells[1].scaling;
  EXPECT_EQ(dp2.world_size, 2);
  EXPECT_NEAR(*dp2.tokens_per_s_per_gpu, 9523.81, 0.01);
  EXPECT_NEAR(*dp2.efficiency, 0.952381, 1e-6);
  EXPECT_DOUBLE_EQ(*dp2.comm_share, 0.10);
  EXPECT_DOUBLE_EQ(*dp2.exposed_comm_share, 0.025);
  EXPECT_FALSE(report.cells[2].scaling.exposed_comm_share.has_value());  // gloo2: no profile window
  // By kind, each its own median; a kind no run measured stays unknown.
  EXPECT_DOUBLE_EQ(*dp2.exposed_by_collective.all_gather, 0.02);
  EXPECT_DOUBLE_EQ(*dp2.exposed_by_collective.all_to_all, 0.0125);
  EXPECT_FALSE(dp2.exposed_by_collective.all_reduce.has_value());
  EXPECT_FALSE(dp2.exposed_by_collective.reduce_scatter.has_value());
  EXPECT_DOUBLE_EQ(*dp2.straggler_ratio, 1.02);
  EXPECT_DOUBLE_EQ(*dp2.straggler_wait_share, 0.05);
  EXPECT_EQ(dp2.sharding, "optimizer, weights bf16");  // reduce_dtype absent: fp32, not named
  EXPECT_DOUBLE_EQ(*dp2.reduce_scatter_ms, 5.0);  // rank 0's, median over the runs
  EXPECT_FALSE(dp2.all_reduce_ms.has_value());

  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("## Scaling"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| dp2 | 2 | 19048 | 9524 | 95.2 % | 10.0 % | 1.0 % | 2.5 % | AG 2.0 %, A2A 1.2 % | 5.0 % | "
                          "optimizer, weights bf16 | RS 5.00, AG 2.50 |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| gloo2 | 2 | 19048 | 9524 | 95.2 % | - | 20.0 % | - | - | - | - | - |"), std::string::npos) << markdown;
  EXPECT_DOUBLE_EQ(to_json(report)["cells"][1]["scaling"]["exposed_by_collective"]["all_gather"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(to_json(report)["cells"][1]["scaling"]["exposed_comm_share"].get<double>(), 0.025);
  EXPECT_TRUE(to_json(report)["cells"][2]["scaling"]["exposed_comm_share"].is_null());
  EXPECT_EQ(to_json(report)["cells"][0]["scaling"]["efficiency_vs_1_gpu"], 1.0);
  EXPECT_EQ(to_json(report)["scaling_reference"], "dp1");

  // Runs of one cell at different world sizes are flagged, not silently averaged.
  FixtureRun mixed = one;
  mixed.name = "dp2";
  f.add("dp", mixed);
  const auto flagged = build_report(f.store(), select_grouped(f.store(), "tag:dp"));
  EXPECT_TRUE(flagged.cells[1].scaling.mixed_world);
  EXPECT_FALSE(flagged.cells[1].scaling.world_size.has_value());
  EXPECT_NE(render_markdown(to_document(flagged, {}, "")).find("Cell dp2 mixes runs of different world sizes"),
            std::string::npos);

  FixtureStore single;
  build_fixture(single);
  const auto plain = build_report(single.store(), select_grouped(single.store(), "tag:ab"));
  EXPECT_FALSE(plain.has_multi_gpu);
  EXPECT_EQ(render_markdown(to_document(plain, {}, "")).find("## Scaling"), std::string::npos);
}

// A capacity-factor ablation: the Loss section gains the MoE drop rate and final aux loss (medians of
// facts.moe) when a cell has them; cells without (no E blocks) show "-".
TEST(Report, MoeRouterColumnsInTheLossSection) {
  FixtureStore f;
  FixtureRun dropless = detailed("dropless", "reference", 3.0);
  dropless.moe = {{"drop_rate", 0.0}, {"final_aux_loss", 1.02}};
  f.add_group("moe", {100, 100, 100}, dropless);
  FixtureRun capped = detailed("capacity-1.0", "reference", 3.1);
  for (const double rate : {0.04, 0.05, 0.06}) {
    capped.moe = {{"drop_rate", rate}, {"final_aux_loss", 1.10}};
    f.add("moe", capped);
  }
  f.add_group("moe", {100, 100, 100}, detailed("dense", "reference", 3.2));
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:moe"));
  ASSERT_EQ(report.cells.size(), 3u);
  EXPECT_DOUBLE_EQ(*report.cells[1].moe_drop_rate, 0.05);
  EXPECT_FALSE(report.cells[2].moe_drop_rate.has_value());
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  // The loss over the last 10 steps (here all 3: 4.0, 3.5, 3.1) is what the gate judges.
  EXPECT_NEAR(*report.cells[1].tail_loss, (4.0 + 3.5 + 3.1) / 3, 1e-12);
  EXPECT_NE(markdown.find("| capacity-1.0 | 3 | 4.0000 (step 0) | 3.1000 (step 2) | 3.5333 | 5.00 % | 1.1000 |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| dense | 3 | 4.0000 (step 0) | 3.2000 (step 2) | 3.5667 | - | - |"), std::string::npos)
      << markdown;
  EXPECT_EQ(to_json(report)["cells"][0]["moe"]["median_final_aux_loss"], 1.02);
  EXPECT_TRUE(to_json(report)["cells"][2]["moe"].is_null());
}

// Expert parallel at a capacity, the experts run the kept slots alone while MFU counts every routed
// slot: the summary says so for a cell that dropped slots, and not for the same drops on one process
// (which computes them at weight 0) nor for an expert-parallel cell that dropped none.
TEST(Report, ExpertParallelCellsAtACapacityQualifyTheirMfu) {
  FixtureStore f;
  const auto moe = [](double rate) {
    return nlohmann::json{{"e_layers", 2}, {"top_k", 2}, {"capacity_factor", 1.25}, {"dropped_slots", rate > 0 ? 10 : 0},
                          {"routed_slots", 100}, {"drop_rate", rate}};
  };
  const nlohmann::json ep2 = {{"world_size", 2}, {"backend", "nccl"}, {"sharding", {{"stage", "optimizer"}, {"expert_parallel", 2}}}};
  FixtureRun one = detailed("one-process", "reference", 3.0);
  one.moe = moe(0.1);
  f.add_group("ep", {100, 100, 100}, one);
  FixtureRun spread = detailed("ep2", "reference", 3.0);
  spread.moe = moe(0.1);
  spread.distributed = ep2;
  f.add_group("ep", {90, 90, 90}, spread);
  FixtureRun balanced = detailed("ep2-no-drops", "reference", 3.0);
  balanced.moe = moe(0.0);
  balanced.distributed = ep2;
  f.add_group("ep", {95, 95, 95}, balanced);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ep"));
  ASSERT_EQ(report.cells.size(), 3u);
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("Cell ep2: MFU counts the model's FLOPs for every routed slot, and 10.00 % of them were "
                          "dropped; expert parallel at a capacity, their expert FLOPs were not computed"),
            std::string::npos)
      << markdown;
  EXPECT_EQ(markdown.find("Cell one-process: MFU counts"), std::string::npos) << markdown;
  EXPECT_EQ(markdown.find("Cell ep2-no-drops: MFU counts"), std::string::npos) << markdown;
}

// Held-out evaluations: the median per evaluation step over a cell's ok runs, drawn and tabled beside
// the training loss; a cell without evaluations shows "-"; a report without any has no such column.
TEST(Report, ValidationCurvesFromHeldOutEvaluations) {
  FixtureStore f;
  FixtureRun evaluated = detailed("fp8", "reference", 3.0);
  for (const double last : {2.9, 3.1, 3.0}) {
    evaluated.evaluations = {{50, 3.6, 4096, 0.2}, {100, last, 4096, 0.2}};
    f.add("val", evaluated);
  }
  f.add_group("val", {100, 100, 100}, detailed("bf16", "reference", 3.0));
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:val"));
  ASSERT_EQ(report.cells.size(), 2u);
  const size_t fp8 = report.cells[0].name == "fp8" ? 0 : 1;
  const auto& curve = report.cells[fp8].validation_curve;
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_EQ(curve[1].step, 100);
  EXPECT_DOUBLE_EQ(curve[1].loss, 3.0);  // the median of 2.9, 3.1, 3.0
  EXPECT_TRUE(report.cells[1 - fp8].validation_curve.empty());
  EXPECT_EQ(to_json(report)["cells"][fp8]["validation_curve"][0], nlohmann::json({50, 3.6}));
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("| validation loss (last evaluation) |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| 3.0000 (step 100) |"), std::string::npos) << markdown;
  // The curve as a table: a row per evaluation step, a column per cell ("-" where a cell has none).
  const std::string bf16_first = report.cells[0].name == "bf16" ? "| step | bf16 | fp8 |" : "| step | fp8 | bf16 |";
  EXPECT_NE(markdown.find(bf16_first), std::string::npos) << markdown;
  EXPECT_NE(markdown.find(fp8 == 1 ? "| 50 | - | 3.6000 |" : "| 50 | 3.6000 | - |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find(fp8 == 1 ? "| 100 | - | 3.0000 |" : "| 100 | 3.0000 | - |"), std::string::npos) << markdown;
  const auto plain = build_report(f.store(), select_grouped(f.store(), "name:bf16"));
  EXPECT_EQ(render_markdown(to_document(plain, {}, "")).find("validation loss"), std::string::npos);
}

// A cell whose runs ran different specs (a --set run joining a cell by name) is never pooled: it is
// split by spec, each part labelled with the keys that differ, and a note says so. Seeds, which a
// matrix varies per repeat, do not split.
TEST(Report, CellsOfDifferentSpecsAreSplitAndLabelled) {
  FixtureStore f;
  FixtureRun small;
  small.name = "tiny";
  for (const std::int64_t seed : {1, 2, 3}) {
    small.seed = seed;
    small.step_ms = 60 + static_cast<double>(seed);
    f.add("mixed", small);
  }
  FixtureRun wide = small;
  wide.train_steps = 200;
  const auto wide_id = f.add_group("mixed", {3600}, wide)[0];
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:mixed"));
  ASSERT_EQ(report.cells.size(), 2u);
  EXPECT_EQ(report.cells[0].name, "tiny [train.steps=100]");
  EXPECT_EQ(report.cells[0].side.evidence.size(), 3u);
  EXPECT_DOUBLE_EQ(*report.cells[0].side.median_step_ms, 62);
  EXPECT_EQ(report.cells[1].name, "tiny [train.steps=200]");
  EXPECT_EQ(report.cells[1].side.evidence_ids(), std::vector<std::int64_t>{wide_id});
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0], fmt::format("Cell tiny holds runs of 2 different specs (they differ in train.steps): "
                                         "reported as 2 cells, never pooled: tiny [train.steps=100] (run(s) 1, 2, 3); "
                                         "tiny [train.steps=200] (run(s) {}).",
                                         wide_id));
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("| tiny \\[train.steps=200\\] | 1 |"), std::string::npos) << markdown;  // [ ] escaped
}

// A cell whose runs changed the named configuration with --set says so, with the shape it really
// trained; receipts older than the model facts say "not recorded".
TEST(Report, ModelSectionShowsTheShapeAndMarksOverriddenConfigs) {
  FixtureStore f;
  FixtureRun big;
  big.name = "big";
  big.model = {{"config", "nam56r-small"},  {"overrides", {"model.d_model=2048"}}, {"config_overridden", true},
               {"pattern", "AEMEAEMEAEMR"}, {"d_model", 2048},                      {"layers", 12},
               {"seq_len", 4096},           {"batch_size", 8},                      {"parameters", 1820000000}};
  f.add_group("m", {100, 101, 102}, big);
  FixtureRun old;
  old.name = "old";
  f.add_group("m", {100, 101, 102}, old);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:m"));
  ASSERT_EQ(report.cells.size(), 2u);
  ASSERT_TRUE(report.cells[0].model);
  EXPECT_TRUE(report.cells[0].model->config_overridden);
  EXPECT_EQ(report.cells[1].runs_without_model, 3u);
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("| big | nam56r-small (changed by --set) | AEMEAEMEAEMR | 2048 | 12 | 4096 | 1820.0 M |"),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("Cell big: nam56r-small with --set model.d\\_model=2048."), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| old | not recorded |"), std::string::npos) << markdown;
}

// Every cell a matrix declares is listed, with its runs or why it has none: a cell wider than the
// GPUs given to `matrix run` is refused without a run, and an interrupted matrix leaves cells unstarted.
TEST(Report, DeclaredCellsWithoutRunsAreListedWithWhy) {
  FixtureStore f;
  auto& store = f.store();
  const std::int64_t matrix = store.create_matrix(
      "scaling", R"({"set":["train.steps=60"],"cells":[)"
                 R"({"name":"distributed.nproc=1","set":["distributed.nproc=1"]},)"
                 R"({"name":"distributed.nproc=2","set":["distributed.nproc=2"]},)"
                 R"({"name":"distributed.nproc=4","set":["distributed.nproc=4"]},{"name":"later","set":[]}]})");
  std::vector<std::vector<std::int64_t>> ran;
  for (const char* cell : {"distributed.nproc=1", "distributed.nproc=2"}) {
    FixtureRun run;
    run.matrix_id = matrix;
    run.cell = cell;
    ran.push_back(f.add_group("scaling", {100, 101, 99}, run));
  }
  const auto report = build_report(store, select_matrix(store, "scaling"));
  EXPECT_EQ(report.cells.size(), 2u);
  ASSERT_EQ(report.declared_cells.size(), 4u);
  EXPECT_EQ(report.declared_cells[1].run_ids, ran[1]);
  EXPECT_EQ(report.declared_cells[1].no_runs_reason, "");
  EXPECT_EQ(report.declared_cells[2].name, "distributed.nproc=4");
  EXPECT_TRUE(report.declared_cells[2].run_ids.empty());
  EXPECT_NE(report.declared_cells[2].no_runs_reason.find("asks for distributed.nproc = 4, and `ablate matrix run` refuses "
                                                          "it without a run unless --gpus lists 4 GPUs"),
            std::string::npos)
      << report.declared_cells[2].no_runs_reason;
  EXPECT_EQ(report.declared_cells[3].no_runs_reason,
            "no run recorded: never started, or refused before its run began (an unavailable backend under "
            "backends.strict = true, a setting this machine cannot run: the matrix log says which); `ablate matrix run` "
            "of the same file resumes the matrix");
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("The matrix declares 4 cells; 2 of them have no run and appear in no other table: "
                          "distributed.nproc=4, later."),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| later | none | no run recorded: never started"), std::string::npos) << markdown;
  const auto j = to_json(report);
  EXPECT_TRUE(j["declared_cells"][0]["no_runs_reason"].is_null());
  EXPECT_EQ(j["declared_cells"][2]["run_ids"].size(), 0u);
  // A selector-based report has no declared cells.
  EXPECT_TRUE(build_report(store, select_grouped(store, "tag:scaling")).declared_cells.empty());
}

// The report shows steady goodput next to goodput and says when a cell's fixed cost dominates.
TEST(Report, FixedCostDominatingGoodputIsSaid) {
  FixtureStore f;
  FixtureRun run;
  run.name = "short";
  run.goodput = {{"startup", 6.0}, {"warmup", 1.0}, {"productive", 2.9}, {"other", 0.1}};  // fixed 70 % of 10 s
  f.add_group("g", {100, 101, 99}, run);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:g"));
  EXPECT_NEAR(*report.cells[0].side.median_steady_goodput_pct, 96.6667, 1e-4);
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("Cell short: start-up, data prep and warm-up are 70 % of its wall time: its goodput measures "
                          "that fixed cost, not training; read its steady goodput."),
            std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| 70.0 % | 96.7 % |"), std::string::npos) << markdown;
  EXPECT_EQ(summary_table(report).columns.back(), "median_fixed_cost_share");
  EXPECT_NEAR(to_json(report)["cells"][0]["median_fixed_cost_share"].get<double>(), 0.7, 1e-12);
}

TEST(Report, FailedRunsAreListedButNeverCounted) {
  FixtureStore f;
  build_fixture(f);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  ASSERT_EQ(report.cells.size(), 2u);
  EXPECT_EQ(report.baseline().name, "reference");
  const auto& flash = report.cells[1];
  EXPECT_EQ(flash.side.evidence.size(), 3u);
  ASSERT_EQ(flash.side.excluded.size(), 1u);
  EXPECT_EQ(flash.side.excluded[0].status, receipts::RunStatus::failed);
  EXPECT_DOUBLE_EQ(flash.step_ms->ratio, 80);
  EXPECT_EQ(flash.verdict, Difference::faster);
  EXPECT_EQ(flash.traced_runs, 3u);
  ASSERT_EQ(flash.kernels.size(), 2u);
  EXPECT_EQ(flash.kernels[0].family, "gemm");  // largest first
  EXPECT_DOUBLE_EQ(flash.kernels[0].ms_per_run, 6.0);
  ASSERT_EQ(report.backend_issues.size(), 1u);  // the loss fallback, from the 4 flash runs
  EXPECT_EQ(report.backend_issues[0].run_ids.size(), 4u);
  EXPECT_EQ(report.cells[0].loss_curve.size(), 3u);
  EXPECT_DOUBLE_EQ(report.cells[0].goodput_seconds.at("productive"), 9.0);
  const auto j = to_json(report);
  EXPECT_EQ(j["cells"][1]["excluded"][0]["status"], "failed");
  EXPECT_EQ(j["cells"][1]["verdict"], "faster");
}

TEST(Report, TooFewRunsAreUnreliableNeverAWin) {
  FixtureStore f;
  f.add_group("ab", {100, 100, 100}, detailed("reference", "reference", 3.0));
  f.add_group("ab", {50, 50}, detailed("flash", "sdpa_flash", 3.0));
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  EXPECT_EQ(report.cells[1].verdict, Difference::unreliable);
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("unreliable (needs >= 3 ok runs a side)"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("Cell flash has 2 ok run(s): its numbers are unreliable"), std::string::npos) << markdown;
}

TEST(Report, NoEvidenceSaysSo) {
  FixtureStore f;
  FixtureRun failed;
  failed.status = receipts::RunStatus::failed;
  f.add("ab", failed);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  const std::string markdown = render_markdown(to_document(report, {}, ""));
  EXPECT_NE(markdown.find("No run in this report is evidence"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("no traces"), std::string::npos) << markdown;
}

TEST(Report, HtmlEscapesUserControlledNames) {
  FixtureStore f;
  const std::string evil = "<script>alert(1)</script>";
  FixtureRun run = detailed(evil, "reference", 3.0);
  run.backends = {{"loss", "x\"><img src=x onerror=alert(2)>", "reference", std::nullopt, evil, std::nullopt}};
  f.add_group("x", {100, 101, 102}, run);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:x"));
  for (const bool with_plots : {false, true}) {
    std::optional<ScopedEnv> env;
    if (!with_plots) env.emplace("ABLATE_GNUPLOT", "/nonexistent/gnuplot");
    const auto plots = make_plots(report);
    const std::string html = render_html(to_document(report, plots.plots, plots.note));
    EXPECT_EQ(html.find(evil), std::string::npos) << "with_plots " << with_plots;
    EXPECT_EQ(html.find("<img"), std::string::npos);
    EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
    const std::string markdown = render_markdown(to_document(report, plots.plots, plots.note));
    EXPECT_EQ(markdown.find(evil), std::string::npos);
  }
  EXPECT_EQ(html_escape("a&b<c>\"d'"), "a&amp;b&lt;c&gt;&quot;d&#39;");
  EXPECT_EQ(plot_label("a\"b'c<d>\\e"), "a?b?c?d??e");
}

TEST(Report, MissingGnuplotGivesAReportWithoutPlotsAndANote) {
  FixtureStore f;
  build_fixture(f);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  ScopedEnv missing("ABLATE_GNUPLOT", "/nonexistent/gnuplot");
  const auto plots = make_plots(report);
  EXPECT_TRUE(plots.plots.empty());
  EXPECT_NE(plots.note.find("/nonexistent/gnuplot"), std::string::npos) << plots.note;
  EXPECT_NE(plots.note.find("gnuplot-nox"), std::string::npos) << plots.note;
  const std::string html = render_html(to_document(report, plots.plots, plots.note));
  EXPECT_NE(html.find("Plots left out"), std::string::npos);
  EXPECT_EQ(html.find("<svg"), std::string::npos);
}

TEST(Report, GnuplotDrawsEveryPlotInline) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  FixtureStore f;
  build_fixture(f);
  const auto report = build_report(f.store(), select_grouped(f.store(), "tag:ab"));
  ScopedEnv path_lookup("ABLATE_GNUPLOT", std::nullopt);
  const auto plots = make_plots(report);
  EXPECT_EQ(plots.note, "");
  std::vector<std::string> files;
  for (const auto& p : plots.plots) {
    files.push_back(p.file);
    EXPECT_EQ(p.svg.rfind("<svg", 0), 0u) << p.file;
    EXPECT_NE(p.svg.find("</svg>"), std::string::npos) << p.file;
  }
  EXPECT_EQ(files, (std::vector<std::string>{"step_time.svg", "loss.svg", "goodput.svg", "memory.svg"}));
  const std::string html = render_html(to_document(report, plots.plots, plots.note));
  EXPECT_NE(html.find("<figure>\n<svg"), std::string::npos);
  EXPECT_NE(render_markdown(to_document(report, plots.plots, plots.note)).find("![Loss per step"), std::string::npos);
}

// A matrix changed on the command line (`matrix run --set/--axis/--name`) says so in its report; one run
// as its file is has no such note.
TEST(Report, AMatrixChangedOnTheCommandLineSaysSo) {
  FixtureStore f;
  auto& store = f.store();
  const std::int64_t changed = store.create_matrix(
      "layouts_2gpu", R"({"base":"../experiments/nam56r-large.toml","cells":[{"name":"baseline","set":[]}],)"
                      R"("command_line":["--name layouts_2gpu","--set distributed.nproc=2"]})");
  const std::int64_t plain = store.create_matrix("layouts", R"({"base":"../experiments/nam56r-large.toml","cells":[{"name":"baseline","set":[]}]})");
  for (const auto id : {changed, plain}) {
    FixtureRun run;
    run.matrix_id = id;
    run.cell = "baseline";
    f.add_group("layouts", {100, 101, 99}, run);
  }
  const auto report = build_report(store, select_matrix(store, "layouts_2gpu"));
  const std::string note = "Matrix layouts_2gpu (base ../experiments/nam56r-large.toml) run with changes from the command line: "
                           "--name layouts_2gpu --set distributed.nproc=2";
  EXPECT_NE(std::find(report.notes.begin(), report.notes.end(), note), report.notes.end()) << nlohmann::json(report.notes).dump();
  EXPECT_NE(render_markdown(to_document(report, {}, "")).find("--set distributed.nproc=2"), std::string::npos);
  for (const auto& n : build_report(store, select_matrix(store, "layouts")).notes)
    EXPECT_EQ(n.find("command line"), std::string::npos) << n;
}

// `ablate show`'s text view: a run's annotations a line each, with when they were written.
TEST(RunView, AnnotationsAreLinesWithTheirTime) {
  FixtureStore f;
  const auto id = f.add_group("ref", {100}).at(0);
  f.store().annotate(id, "ablate launch: rank 1 exited 1");
  const std::string text = render_run_text(f.store(), id);
  EXPECT_NE(text.find("annotation 1 ("), std::string::npos) << text;
  EXPECT_NE(text.find(" UTC): ablate launch: rank 1 exited 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("{\""), std::string::npos) << "no JSON in the text view: " << text;
}

TEST(Report, BaselineCanBeChosenAndUnknownCellsAreRefused) {
  FixtureStore f;
  build_fixture(f);
  auto selection = select_grouped(f.store(), "tag:ab");
  set_baseline(selection, "flash");
  EXPECT_EQ(build_report(f.store(), selection).baseline().name, "flash");
  EXPECT_THROW(set_baseline(selection, "nope"), std::invalid_argument);
  EXPECT_THROW(select_cells(f.store(), "", ""), std::invalid_argument);
  EXPECT_THROW(select_cells(f.store(), "tag:ab", "m"), std::invalid_argument);
  EXPECT_THROW(select_matrix(f.store(), "no-such-matrix"), std::invalid_argument);
}

}  // namespace
}  // namespace ablate::report
