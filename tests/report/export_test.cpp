// tests/report/export_test.cpp: `ablate export` tables (report/export.h, row_table.h): RFC 4180 quoting,
// NULL as an empty CSV field and JSON null, a CSV/JSON round trip of awkward values, and atomic writes.
// Build and run: cmake --build build --target report_tests && build/tests/report_tests --gtest_filter='Export*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "report/export.h"
#include "report/row_table.h"
#include "tests/report/fixture_store.h"

namespace ablate::report {
namespace {

using testing::FixtureRun;
using testing::FixtureStore;

// A strict RFC 4180 reader (what pandas.read_csv does with default settings for these files).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      EXPECT_TRUE(field.empty()) << "quote inside an unquoted field";
      quoted = was_quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field), field.clear(), was_quoted = false;
    } else if (c == '\n') {
      rows.back().push_back(field), field.clear(), was_quoted = false;
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  EXPECT_FALSE(quoted) << "unterminated quoted field";
  EXPECT_TRUE(field.empty() && !was_quoted && rows.back().empty()) << "the last line must end with a newline";
  rows.pop_back();
  return rows;
}

TEST(Export, CsvFieldsAreQuotedOnlyWhenNeeded) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field(""), "");
}

TEST(Export, RunsRoundTripThroughCsvAndJson) {
  FixtureStore f;
  FixtureRun awkward;
  awkward.name = "comma, \"quote\"\nnewline <b>";
  const auto ok = f.add("=1+1,x", awkward);  // a tag that is a formula and holds a comma
  FixtureRun failed;
  failed.name = "@risky";  // a name a spreadsheet would run
  failed.status = receipts::RunStatus::failed;
  failed.with_goodput = false;
  const auto bad = f.add("t", failed);
  const RowTable records = export_runs(f.store(), {ok, bad});
  const auto csv = parse_csv(to_csv(records));
  const auto json = nlohmann::json::parse(to_json_text(records));
  ASSERT_EQ(csv.size(), 3u);
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(csv[0], records.columns);
  for (std::size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(csv[r + 1].size(), records.columns.size());
    for (std::size_t c = 0; c < records.columns.size(); ++c) {
      const auto& column = records.columns[c];
      const auto& value = json[r][column];
      const std::string& field = csv[r + 1][c];
      if (value.is_null()) {
        EXPECT_EQ(field, "") << column;
      } else if (value.is_string()) {
        // A text that a spreadsheet would run as a formula reads back with its apostrophe.
        const auto& text = value.get_ref<const std::string&>();
        const bool formula = !text.empty() && std::string("=+-@").find(text.front()) != std::string::npos;
        EXPECT_EQ(field, formula ? "'" + text : text) << column;
      } else if (value.is_array()) {
        EXPECT_EQ(nlohmann::json::parse(field), value) << column;  // a list is one JSON cell
      } else if (value.is_boolean()) {
        EXPECT_EQ(field, value.get<bool>() ? "true" : "false") << column;
      } else {
        EXPECT_EQ(std::stod(field), value.get<double>()) << column;  // exact: shortest round-trip digits
      }
    }
  }
  EXPECT_EQ(json[0]["name"], awkward.name);
  EXPECT_EQ(json[0]["tags"], nlohmann::json::array({"=1+1,x"}));  // one tag, not "=1+1" and "x"
  EXPECT_EQ(csv[2][1], "'@risky");
  EXPECT_EQ(json[0]["evidence"], true);
  EXPECT_EQ(json[0]["median_step_ms"], 100.0);
  EXPECT_EQ(json[1]["status"], "failed");
  EXPECT_TRUE(json[1]["goodput_pct"].is_null());
  EXPECT_TRUE(json[1]["mfu"].is_null());
  EXPECT_EQ(json[1]["error"], "CUDA out of memory");
}

TEST(Export, StepsKeepNullsAndColumnOrder) {
  FixtureStore f;
  FixtureRun run;
  run.losses = {4.0, 3.25};
  const auto id = f.add("t", run);
  const RowTable records = export_steps(f.store(), {id});
  ASSERT_EQ(records.rows.size(), 2u);
  const std::string csv = to_csv(records);
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "run_id,status,evidence,not_evidence_reason,rank,step,wall_ms,tokens,loss,grad_norm,lr,mem_allocated_peak,"
            "mem_reserved_peak,rss_bytes,data_wait_ms,outlier,moe_aux_loss,moe_dropped_slots");
  EXPECT_NE(csv.find(fmt::format("\n{},ok,true,,0,1,100,1000,3.25,,,,,,,false,,\n", id)), std::string::npos) << csv;
  const auto json = nlohmann::json::parse(to_json_text(records));
  EXPECT_TRUE(json[1]["grad_norm"].is_null());
  EXPECT_EQ(json[1]["loss"], 3.25);
  EXPECT_THROW(export_steps(f.store(), {id + 100}), receipts::StoreError);
}

// Steps of runs that are not evidence (failed, incomplete) are left out unless asked for, and then
// carry their status and why they are not evidence.
TEST(Export, StepsAreOfEvidenceRunsUnlessAllAreAsked) {
  FixtureStore f;
  FixtureRun run;
  run.losses = {4.0, 3.25};
  const auto ok = f.add("t", run);
  run.status = receipts::RunStatus::failed;
  const auto failed = f.add("t", run);
  run.status = receipts::RunStatus::ok;
  run.with_goodput = false;
  const auto incomplete = f.add("t", run);
  std::vector<std::int64_t> left_out;
  const RowTable evidence = export_steps(f.store(), {ok, failed, incomplete}, false, &left_out);
  EXPECT_EQ(evidence.rows.size(), 2u);
  EXPECT_EQ(left_out, (std::vector<std::int64_t>{failed, incomplete}));
  const auto every = nlohmann::json::parse(to_json_text(export_steps(f.store(), {ok, failed, incomplete}, true)));
  ASSERT_EQ(every.size(), 6u);
  EXPECT_EQ(every[0]["evidence"], true);
  EXPECT_TRUE(every[0]["not_evidence_reason"].is_null());
  EXPECT_EQ(every[2]["run_id"], failed);
  EXPECT_EQ(every[2]["status"], "failed");
  EXPECT_EQ(every[2]["evidence"], false);
  EXPECT_EQ(every[2]["not_evidence_reason"], "status failed: CUDA out of memory");
  EXPECT_EQ(every[4]["status"], "ok");
  EXPECT_EQ(every[4]["not_evidence_reason"], "incomplete summary: no goodput");
}

// Held-out evaluations: one row each in step order, a NaN loss (stored as NULL) null, a run that is not
// evidence left out unless asked for.
TEST(Export, EvaluationsAreTheValidationCurves) {
  FixtureStore f;
  FixtureRun run;
  run.losses = {4.0, 3.25};
  run.evaluations = {{200, 2.0, 4096, 0.125}, {100, 2.5, 4096, 0.25}, {300, std::nan(""), 4096, 0.125}};
  const auto ok = f.add("t", run);
  run.status = receipts::RunStatus::failed;
  const auto failed = f.add("t", run);
  std::vector<std::int64_t> left_out;
  const RowTable records = export_evaluations(f.store(), {ok, failed}, false, &left_out);
  EXPECT_EQ(left_out, std::vector<std::int64_t>{failed});
  ASSERT_EQ(records.rows.size(), 3u);
  const std::string csv = to_csv(records);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "run_id,status,evidence,not_evidence_reason,step,loss,tokens,seconds");
  const auto json = nlohmann::json::parse(to_json_text(records));
  EXPECT_EQ(json[0]["step"], 100);
  EXPECT_EQ(json[0]["loss"], 2.5);
  EXPECT_EQ(json[1]["step"], 200);
  EXPECT_EQ(json[2]["step"], 300);
  EXPECT_TRUE(json[2]["loss"].is_null());
  EXPECT_EQ(json[2]["tokens"], 4096);
  EXPECT_EQ(export_evaluations(f.store(), {ok, failed}, true).rows.size(), 6u);
  EXPECT_THROW(export_evaluations(f.store(), {failed + 100}), receipts::StoreError);
}

TEST(Export, EmptyTablesAndBadTableNames) {
  EXPECT_EQ(to_json_text(RowTable{{"a"}, {}}), "[]\n");
  EXPECT_EQ(to_csv(RowTable{{"a", "b"}, {}}), "a,b\n");
  EXPECT_THROW(parse_export_table("rows"), std::invalid_argument);
  EXPECT_EQ(parse_export_table("steps"), ExportTable::steps);
  EXPECT_EQ(parse_export_table("evaluations"), ExportTable::evaluations);
}

}  // namespace
}  // namespace ablate::report
