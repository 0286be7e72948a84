// harness/cli/gate_command.cpp: the keep/drop gate (report::evaluate_gate), printed and stored as decisions.
//   ablate gate --matrix NAME            every backend cell of the newest matrix NAME (a cell that sets
//                                        backends.<seam> = <backend>) against its baseline cell, or, for a
//                                        cell that turns a seam back to `reference`, the baseline's backend
//                                        there against that cell (report::matrix_gates);
//   ablate gate --baseline SEL --candidate SEL --seam S --backend B [--role keep]   one backend.
// Exit 1 when the verdict is not KEEP for a backend whose role is `keep`: --role, else its standing
// decision on the candidate runs' lane (a stored KEEP, report::standing_decisions), else the role the
// candidate runs recorded in their catalog snapshot; so the command can guard CI. Exit 1 too when a backend
// cell of the matrix has no run at all (refused before its run began, or never started): no verdict on
// it is no pass. Exit 2 for bad input,
// and for a run still running (then nothing is stored). Every gate is evaluated before any decision is
// stored, so a refusal leaves no decision behind.
// Tests: report/gate.cpp in tests/report/gate_test.cpp (report_tests); kept backends, regressions and
// refusals end to end in tests/harness/gate_cli_test.cpp (harness_tests); --matrix end to end in
// tests/ablations/matrix_cli_test.cpp (ablations_tests).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "base/near_miss.h"
#include "harness/cli/commands.h"
#include "kernels/catalog.h"
#include "report/gate.h"
#include "report/selection.h"

namespace ablate::cli {
namespace {

// --seam names a dispatch seam: a typo is bad input with the nearest name, not "requests no backend".
// (--backend is not checked against this build's catalog: a backend since removed is still judged on
// the runs that requested it.)
void require_known_seam(const std::string& seam) {
  const auto& seams = kernels::seams();
  if (std::find(seams.begin(), seams.end(), seam) == seams.end())
    throw std::invalid_argument(fmt::format("gate: --seam '{}' is not a seam{}; the seams are {}", seam,
                                            base::did_you_mean(seam, seams), fmt::join(seams, ", ")));
}

// The decision to store, or the id of the newest decision at its seam and backend when that one is the
// same (verdict, evidence runs, matrix, details): a gate asked again of the same runs stores nothing new.
std::int64_t store_decision(receipts::Store& store, const receipts::Decision& decision, bool& stored_before) {
  const auto existing = store.list_decisions(decision.seam, decision.backend);  // newest first
  stored_before = !existing.empty() && existing.front().verdict == decision.verdict &&
                  existing.front().evidence_run_ids == decision.evidence_run_ids &&
                  existing.front().matrix_id == decision.matrix_id && existing.front().details == decision.details;
  return stored_before ? existing.front().id : store.record_decision(decision);
}

// Why a gate that did not say KEEP fails: the backend was `keep` before it, and by what.
std::string kept_backend_regressed(const report::GateJob& job, const report::GateResult& result,
                                   std::int64_t decision_id, const std::string& role_option) {
  const std::string verdict(receipts::to_string(result.verdict));
  if (!role_option.empty())
    return fmt::format("{}/{} is marked keep (--role keep) but its gate says {} (decision {})", job.seam, job.backend,
                       verdict, decision_id);
  std::vector<std::string> kept_by;
  for (const auto& d : result.standing_before)
    if (d.verdict == receipts::Verdict::keep) kept_by.push_back(report::describe(d));
  if (kept_by.empty())
    return fmt::format("{}/{} is marked keep in the candidate runs' catalog snapshot but its gate says {} (decision {})",
                       job.seam, job.backend, verdict, decision_id);
  return fmt::format("kept backend {}/{} regressed: kept by {}, its gate now says {} (decision {}){}", job.seam,
                     job.backend, fmt::join(kept_by, ", "), verdict, decision_id,
                     result.verdict == receipts::Verdict::drop
                         ? "; this DROP demotes it on that lane"
                         : "; it stays kept there until a gate with the minimum evidence says DROP");
}

}  // namespace

void register_gate(CLI::App& app, Globals& g) {
  static std::string baseline, candidate, role, matrix;
  static report::GateOptions options;
  static bool as_json = false;
  auto* cmd = app.add_subcommand("gate", "Keep/drop gate of backends: KEEP / DROP / INCONCLUSIVE, stored as decisions");
  cmd->add_option("--matrix", matrix, "gate every backend cell of the newest matrix of this name against its baseline (a cell back on `reference`: the baseline's backend against it)");
  cmd->add_option("--baseline", baseline, "baseline runs: 12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (joined by &) | cell:MATRIX/CELL");
  cmd->add_option("--candidate", candidate, "runs with the backend under test, same forms");
  cmd->add_option("--seam", options.seam, "dispatch seam, e.g. attention");
  cmd->add_option("--backend", options.backend, "the candidate backend at that seam");
  cmd->add_option("--role", role,
                  "role of the backend (default: keep when a stored KEEP stands on the candidate runs' lane, else as "
                  "the candidate runs' catalog snapshot recorded it)")
      ->check(CLI::IsMember(receipts::backend_roles()));
  cmd->add_option("--loss-tolerance", options.loss_tolerance,
                  "relative difference of the runs' loss allowed (default 0.02), at the end of training and on held-out "
                  "data; a larger one within the baseline runs' own spread is INCONCLUSIVE, beyond it DROP")
      ->check(at_least(0));
  cmd->add_option("--loss-window", options.loss_window,
                  "a run's loss is the mean over its last this many steps (default 10)")
      ->check(at_least(1));
  cmd->add_option("--memory-tolerance", options.memory_tolerance,
                  "relative growth of median peak memory allowed before DROP (default 0.10)")
      ->check(at_least(0));
  cmd->add_option("--min-seeds", options.min_seeds,
                  "distinct experiment.seed values a side, among runs with a validation loss, for a convergence "
                  "verdict (default 3)")
      ->check(at_least(1));
  cmd->add_flag("--allow-mismatch", options.compare.allow_mismatch,
                "gate even when environment, harness revision or other spec fields differ (marked)");
  cmd->add_flag("--json", as_json, "print JSON");
  command_table().push_back({cmd, [&g] {
    const bool single = !baseline.empty() || !candidate.empty() || !options.seam.empty() || !options.backend.empty();
    if (matrix.empty() == !single || (single && (baseline.empty() || candidate.empty() || options.seam.empty() ||
                                                 options.backend.empty())))
      throw std::invalid_argument(
          "gate: give either --matrix NAME, or all of --baseline, --candidate, --seam and --backend");
    if (!options.seam.empty()) require_known_seam(options.seam);
    if (!matrix.empty() && !role.empty())
      throw std::invalid_argument("gate: --role applies to one backend; with --matrix each cell's recorded role is used");
    auto store = receipts::Store::open_existing(g.db);

    // The gates to evaluate: a matrix's (report::matrix_gates), or the one given.
    std::vector<report::GateJob> jobs;
    std::vector<std::string> unjudged;  // a matrix's backend cells without a run
    if (!matrix.empty()) {
      const auto selection = report::select_matrix(store, matrix);
      if (selection.groups.size() < 2 && selection.declared_cells.size() < 2)
        throw std::invalid_argument(fmt::format("gate: {} has no cell besides its baseline", selection.title));
      std::vector<std::string> skipped;
      jobs = report::matrix_gates(store, selection, &skipped, &unjudged);
      for (const auto& why : skipped) fmt::print("{}\n", why);
      for (const auto& why : unjudged) fmt::print("{}\n", why);
    } else {
      // Tag and name selectors include failed runs: a candidate that failed is evidence against it. Their
      // runs still running join the sides, so that the gate refuses them rather than decide without them.
      auto side = [&](const std::string& selector) {
        std::vector<std::int64_t> running;
        auto ids = report::select_runs(store, selector, true, &running);
        ids.insert(ids.end(), running.begin(), running.end());
        return ids;
      };
      jobs.push_back({"", side(baseline), side(candidate), options.seam, options.backend});
    }

    // Every gate first: one refused (a run still running, a mismatch) stores nothing at all.
    std::vector<report::GateResult> results;
    for (const auto& job : jobs) {
      report::GateOptions job_options = options;
      job_options.seam = job.seam;
      job_options.backend = job.backend;
      results.push_back(report::evaluate_gate(store, job.baseline, job.candidate, job_options));
    }

    bool keep_backend_failed = false;
    nlohmann::json all = nlohmann::json::array();
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const auto& job = jobs[i];
      const auto& result = results[i];
      bool stored_before = false;
      const std::int64_t decision_id = store_decision(store, result.decision(), stored_before);
      if (as_json) {
        auto j = report::to_json(result);
        j["decision_id"] = decision_id;
        j["stored_before"] = stored_before;
        all.push_back(std::move(j));
      } else {
        fmt::print("{}decision {} {} {}\n", report::render_text(result), decision_id,
                   stored_before ? "(the same verdict on the same runs) already stored in" : "stored in", g.db);
      }
      const bool kept = role.empty() ? result.kept_before() : role == "keep";
      if (kept && result.verdict != receipts::Verdict::keep) {
        keep_backend_failed = true;
        fmt::print(stderr, "ablate: gate: {}\n", kept_backend_regressed(job, result, decision_id, role));
      }
    }
    if (as_json) fmt::print("{}\n", (matrix.empty() ? all.at(0) : all).dump(2));
    // A backend the matrix declares but never ran is no pass: the gate could not judge it.
    if (!unjudged.empty())
      fmt::print(stderr, "ablate: gate: {} backend cell(s) of {} have no run, so no verdict: {} (see each cell's matrix "
                         "log; resume with `ablate matrix run`)\n",
                 unjudged.size(), matrix, fmt::join(unjudged, "; "));
    return keep_backend_failed || !unjudged.empty() ? kExitRunFailed : kExitOk;
  }});
}

}  // namespace ablate::cli
