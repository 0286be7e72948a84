// harness/cli/gate.cpp: `ablate gate --baseline SEL --candidate SEL --seam S --backend B [--role keep]`:
// the keep/drop gate of one backend (report::evaluate_gate), printed and stored as a decision. Exit 1
// when the verdict is not KEEP for a backend whose role is `keep` (--role, or else the role the
// candidate runs recorded in their catalog snapshot), so the command can guard CI; exit 2 for bad input.
// Tests: report/gate.cpp is tested in tests/report/gate_test.cpp (report_tests).
#include <fmt/core.h>

#include "harness/cli/commands.h"
#include "report/gate.h"

namespace ablate::cli {

void register_gate(CLI::App& app, Globals& g) {
  static std::string baseline, candidate, role;
  static report::GateOptions options;
  static bool as_json = false;
  auto* cmd = app.add_subcommand("gate", "Keep/drop gate of one backend: KEEP / DROP / INCONCLUSIVE, stored as a decision");
  cmd->add_option("--baseline", baseline, "baseline runs: 12 | 12,13,14 | tag:NAME | name:GLOB")->required();
  cmd->add_option("--candidate", candidate, "runs with the backend under test, same forms")->required();
  cmd->add_option("--seam", options.seam, "dispatch seam, e.g. attention")->required();
  cmd->add_option("--backend", options.backend, "the candidate backend at that seam")->required();
  cmd->add_option("--role", role, "catalog role of the backend (default: as the candidate runs recorded it)")
      ->check(CLI::IsMember(receipts::backend_roles()));
  cmd->add_option("--loss-tolerance", options.loss_tolerance, "relative final-loss difference allowed (default 0.02)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--allow-mismatch", options.compare.allow_mismatch,
                "gate even when environment, harness revision or other spec fields differ (marked)");
  cmd->add_flag("--json", as_json, "print JSON");
  command_table().push_back({cmd, [&g] {
    auto store = receipts::Store::open_existing(g.db);
    // Tag and name selectors include failed runs: a candidate that failed is evidence against it.
    const auto result = report::evaluate_gate(store, report::select_runs(store, baseline, true),
                                              report::select_runs(store, candidate, true), options);
    const std::int64_t decision_id = store.record_decision(result.decision());
    if (as_json) {
      auto j = report::to_json(result);
      j["decision_id"] = decision_id;
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("{}decision {} stored in {}\n", report::render_text(result), decision_id, g.db);
    }
    const std::string effective_role = role.empty() ? result.catalog_role.value_or("") : role;
    const bool keep_backend_failed = effective_role == "keep" && result.verdict != receipts::Verdict::keep;
    if (keep_backend_failed)
      fmt::print(stderr, "ablate: gate: {}/{} is marked keep but its gate says {}\n", options.seam, options.backend,
                 receipts::to_string(result.verdict));
    return keep_backend_failed ? kExitRunFailed : kExitOk;
  }});
}

}  // namespace ablate::cli
