// tests/receipts/query_test.cpp: the read API: list_runs filters (status incl. abandoned, name
// substring/glob, tag, since, limit), run_json round trip, the read-only query(), time parsing.
// Run: build-receipts/tests/receipts_tests --gtest_filter='Query*:Time*'
#include <gtest/gtest.h>

#include <algorithm>

#include "base/clock.h"
#include "receipts/schema.h"
#include "receipts/store.h"
#include "tests/receipts/test_util.h"

namespace ablate::receipts {
namespace {

using testing::make_steps;
using testing::RawDb;
using testing::sample_start;

constexpr double kMay2024 = 1714560000;  // 2024-05-01T10:40:00Z

class QueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto a = store_.begin_run(sample_start("baseline-a", {"baseline", "h100"}));
    store_.finish_run(a, RunStatus::ok, "", testing::sample_summary());
    const auto f1 = store_.begin_run(sample_start("fused-rope-1", {"fused"}));
    store_.finish_run(f1, RunStatus::failed, "parity check failed", {});
    const auto f2 = store_.begin_run(sample_start("fused-rope-2", {"fused"}));
    store_.begin_run(sample_start("live-run"));
    RawDb raw(path_);
    // A run whose process vanished an hour ago, and a run from May 2024 (inserted directly: start
    // times are immutable through the API).
    raw.exec_ok(fmt::format("UPDATE runs SET heartbeat_at = {} WHERE id = {}", base::unix_now() - 3600, f2));
    raw.exec_ok(
        fmt::format("INSERT INTO runs (name, status, started_at, ended_at, heartbeat_at, host, tags, uid) VALUES "
                    "('old-run', 'ok', {0}, {0} + 60, {0} + 60, 'h', '[\"baseline\"]', lower(hex(randomblob(16))))",
                    kMay2024));
  }

  std::vector<std::string> names(RunFilter filter) {
    std::vector<std::string> out;
    for (const auto& run : store_.list_runs(filter)) out.push_back(run.name);
    return out;
  }
  static RunFilter status(const std::string& s) {
    RunFilter f;
    f.status = s;
    return f;
  }

  base::TempDir dir_;
  std::string path_ = dir_.file("receipts.db");
  testing::ScopedEnv no_stale_override_{"ABLATE_HEARTBEAT_STALE_S", std::nullopt};
  Store store_ = Store::open(path_);
};

using Names = std::vector<std::string>;

TEST_F(QueryTest, AllRunsNewestFirst) {
  EXPECT_EQ(names({}), (Names{"live-run", "fused-rope-2", "fused-rope-1", "baseline-a", "old-run"}));
}

TEST_F(QueryTest, FilterByStatusIncludingAbandoned) {
  EXPECT_EQ(names(status("ok")), (Names{"baseline-a", "old-run"}));
  EXPECT_EQ(names(status("failed")), (Names{"fused-rope-1"}));
  EXPECT_EQ(names(status("running")), (Names{"live-run"}));
  EXPECT_EQ(names(status("abandoned")), (Names{"fused-rope-2"}));
  EXPECT_TRUE(names(status("killed")).empty());
  try {
    store_.list_runs(status("crashed"));
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown run status 'crashed'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("abandoned"), std::string::npos) << e.what();
  }
}

TEST_F(QueryTest, FilterByNameSubstringOrGlob) {
  RunFilter f;
  f.name = "rope";
  EXPECT_EQ(names(f), (Names{"fused-rope-2", "fused-rope-1"}));
  f.name = "fused-*-1";
  EXPECT_EQ(names(f), (Names{"fused-rope-1"}));
  f.name = "*-[ab]";
  EXPECT_EQ(names(f), (Names{"baseline-a"}));
  f.name = "ROPE";  // case-sensitive, like the names themselves
  EXPECT_TRUE(names(f).empty());
  f.name = "%";  // no LIKE wildcards sneak in
  EXPECT_TRUE(names(f).empty());
}

TEST_F(QueryTest, FilterByTag) {
  RunFilter f;
  f.tag = "baseline";
  EXPECT_EQ(names(f), (Names{"baseline-a", "old-run"}));
  f.tag = "h1";  // whole tags only
  EXPECT_TRUE(names(f).empty());
  f.tag = "fused";
  f.status = "failed";
  EXPECT_EQ(names(f), (Names{"fused-rope-1"}));
}

TEST_F(QueryTest, FilterByLane) {
  RunFilter f;
  f.lane = "tiny-AMEM/1gpu/reference";  // every run made through the API; old-run has no lane
  EXPECT_EQ(names(f), (Names{"live-run", "fused-rope-2", "fused-rope-1", "baseline-a"}));
  f.lane = "tiny-AMEM/1gpu";  // exact lanes only
  EXPECT_TRUE(names(f).empty());
}

TEST_F(QueryTest, FilterBySinceAndLimit) {
  RunFilter f;
  f.since = "2024-06-01";
  EXPECT_EQ(names(f).size(), 4u);
  f.since = fmt::format("{}", kMay2024);
  EXPECT_EQ(names(f).size(), 5u);
  f.since = "1h";
  EXPECT_EQ(names(f).size(), 4u);
  f.since = "2024-13-01";
  EXPECT_THROW(store_.list_runs(f), base::InputError);
  f.since = "";
  f.limit = 2;
  EXPECT_EQ(names(f), (Names{"live-run", "fused-rope-2"}));
  f.limit = 0;
  EXPECT_THROW(store_.list_runs(f), StoreError);
}

TEST_F(QueryTest, RunJsonRoundTrip) {
  RunStart start = sample_start("full", {"roundtrip"});
  start.env["git_dirty"] = "false";
  const auto id = store_.begin_run(start);
  auto steps = make_steps(30);
  steps[7].loss.reset();
  steps[7].outlier = true;
  store_.append_steps(id, steps);
  store_.record_backends(id, {{"rope", "fused", "fused", "fused", "", false},
                              {"attention", "flash", "math", "math", "no GPU, fell back to reference", false}});
  store_.record_catalog(id, {{"rope", "fused", "keep", "reference", {"rope_fused_kernel*"}},
                             {"rope", "reference", "reference", std::nullopt, {}}});
  store_.record_goodput(id, {{"productive", 25.5}, {"startup", 3.0}, {"other", 0.25}});
  store_.record_memory(id, {{3, 0, "backward", 1000, 2000, 900, 1, 0, 0.125}});
  store_.record_kernels(id, {{"rope_fused_kernel", "rope", "rope", 0, 30, 3000}, {"sgemm", "gemm", "", 0, 60, 12000}});
  const std::string trace = dir_.file("trace.json");
  testing::write_file(trace, R"({"traceEvents":[]})");
  const ArtifactRow artifact = store_.add_artifact(id, "trace", trace);
  store_.finish_run(id, RunStatus::ok, "", testing::sample_summary(30));
  store_.annotate(id, "looks good");

  const nlohmann::json doc = store_.run_json(id);
  EXPECT_EQ(doc["run"]["id"], id);
  EXPECT_EQ(doc["run"]["name"], "full");
  EXPECT_EQ(doc["run"]["status"], "ok");
  EXPECT_EQ(doc["run"]["tags"], nlohmann::json::array({"roundtrip"}));
  EXPECT_EQ(doc["run"]["summary"]["median_step_ms"], 104.5);
  EXPECT_TRUE(doc["run"]["summary"]["mfu"].is_null());
  EXPECT_EQ(doc["run"]["summary"]["facts"]["warmup_steps"], 2);
  EXPECT_TRUE(doc["run"]["evidence"].get<bool>());
  EXPECT_EQ(doc["env"]["git_dirty"], "false");
  EXPECT_EQ(doc["env"].size(), 3u);
  EXPECT_EQ(doc["spec"]["spec_json"], nlohmann::json::parse(start.spec_json));
  EXPECT_EQ(doc["spec"]["spec_hash"], doc["run"]["spec_hash"]);
  ASSERT_EQ(doc["steps"].size(), 30u);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(doc["steps"][i]["step"], steps[i].step);
    EXPECT_EQ(doc["steps"][i]["wall_ms"], steps[i].wall_ms);
    EXPECT_EQ(doc["steps"][i]["tokens"], 8192);
    EXPECT_FALSE(doc["steps"][i].contains("run_id"));
  }
  EXPECT_TRUE(doc["steps"][7]["loss"].is_null());
  EXPECT_EQ(doc["steps"][7]["outlier"], true);
  EXPECT_EQ(doc["steps"][8]["loss"], *steps[8].loss);
  EXPECT_TRUE(doc["steps"][0]["mem_reserved_peak"].is_null());
  ASSERT_EQ(doc["backends"].size(), 2u);
  EXPECT_EQ(doc["backends"][0]["seam"], "attention");  // ordered by seam
  EXPECT_EQ(doc["backends"][0]["reason"], "no GPU, fell back to reference");
  EXPECT_EQ(doc["catalog"][0]["patterns"], nlohmann::json::array({"rope_fused_kernel*"}));
  EXPECT_EQ(doc["catalog"][0]["fallback"], "reference");
  EXPECT_TRUE(doc["catalog"][1]["fallback"].is_null());
  EXPECT_EQ(doc["goodput"], (nlohmann::json{{"other", 0.25}, {"productive", 25.5}, {"startup", 3.0}}));
  EXPECT_EQ(doc["memory"][0]["fragmentation"], 0.125);
  EXPECT_EQ(doc["kernels"][0]["name"], "sgemm");  // largest total first
  EXPECT_EQ(doc["kernels"][1]["mean_ns"], 100.0);
  EXPECT_EQ(doc["artifacts"][0]["path"], artifact.path);
  EXPECT_EQ(doc["artifacts"][0]["bytes"], artifact.bytes);
  EXPECT_EQ(doc["annotations"][0]["text"], "looks good");
  EXPECT_TRUE(doc["matrix_cell"].is_null());
}

TEST_F(QueryTest, GenericQueryIsReadOnly) {
  const auto rows = store_.query("SELECT name FROM runs WHERE status = ? ORDER BY name", {std::string("ok")});
  EXPECT_EQ(rows, (nlohmann::json::array({{{"name", "baseline-a"}}, {{"name", "old-run"}}})));
  EXPECT_EQ(store_.query("  with x AS (SELECT 1 AS one) SELECT one FROM x")[0]["one"], 1);
  EXPECT_THROW(store_.query("DELETE FROM annotations"), StoreError);
  EXPECT_THROW(store_.query("PRAGMA user_version = 9"), StoreError);
  EXPECT_THROW(store_.query("WITH x AS (SELECT 1) DELETE FROM annotations"), StoreError);
  EXPECT_THROW(store_.query("SELECT 1; DELETE FROM annotations"), StoreError);
  EXPECT_THROW(store_.query("SELECT ?", {}), StoreError);
  EXPECT_THROW(store_.query("SELECTED"), StoreError);
  EXPECT_EQ(store_.schema_version(), schema::latest_version());  // the PRAGMA write above was refused
}

}  // namespace
}  // namespace ablate::receipts
