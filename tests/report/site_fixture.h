// tests/report/site_fixture.h: a small store with everything `ablate site` shows: a lane whose step
// time rises by 30 % between two commits (a regression), a second lane, a failed run, a run whose name
// is markup, a two-cell matrix and a gate decision on it. Used by tests/report/site_test.cpp and, through
// tests/site_fixture_store.cpp, by the headless-browser test (tests/scripts/site_browser_test.sh).
#pragma once

#include <vector>

#include "tests/report/fixture_store.h"

namespace ablate::report::testing {

struct SiteFixture {
  std::vector<std::int64_t> before, after;  // the regressed lane's runs on each side of the shift
  std::int64_t matrix_id = 0, decision_id = 0, failed_run = 0, markup_run = 0;
};

inline SiteFixture populate_site_fixture(FixtureStore& fixture) {
  SiteFixture f;
  FixtureRun run;
  run.losses = {4.0, 3.5, 3.2, 3.0};
  run.git_revision = "aaaa1111aaaa1111";
  f.before = fixture.add_group("nightly", {100, 101, 99, 100, 102, 98, 100, 101}, run);
  run.git_revision = "bbbb2222bbbb2222";
  f.after = fixture.add_group("nightly", {130, 131, 129, 130, 132, 128, 130, 131}, run);
  FixtureRun failed = run;
  failed.status = receipts::RunStatus::failed;
  f.failed_run = fixture.add("nightly", failed);
  FixtureRun markup = run;
  markup.name = "<script>alert('site')</script>";
  markup.backend = "sdpa_flash";
  f.markup_run = fixture.add("markup", markup);

  const nlohmann::json cells = {{"cells", {{{"name", "baseline"}}, {{"name", "flash"}}}}};
  f.matrix_id = fixture.store().create_matrix("attention", cells.dump());
  FixtureRun cell = run;
  cell.matrix_id = f.matrix_id;
  cell.cell = "baseline";
  const auto baseline = fixture.add_group("matrix", {100, 101, 99}, cell);
  cell.cell = "flash";
  cell.backend = "sdpa_flash";
  const auto flash = fixture.add_group("matrix", {80, 81, 79}, cell);

  receipts::Decision decision;
  decision.seam = "attention";
  decision.backend = "sdpa_flash";
  decision.verdict = receipts::Verdict::keep;
  decision.evidence_run_ids = baseline;
  decision.evidence_run_ids.insert(decision.evidence_run_ids.end(), flash.begin(), flash.end());
  decision.matrix_id = f.matrix_id;
  decision.details = "faster: step time ratio 0.80 [0.79, 0.81]\nloss within 2 %";
  f.decision_id = fixture.store().record_decision(decision);
  return f;
}

}  // namespace ablate::report::testing
