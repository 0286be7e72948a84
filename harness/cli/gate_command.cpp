// harness/cli/gate_command.cpp: the keep/drop gate (report::evaluate_gate), printed and stored as decisions.
//   ablate gate --matrix NAME            every backend cell of the newest matrix NAME (a cell that sets
//                                        backends.<seam> = <backend>) against its baseline cell;
//   ablate gate --baseline SEL --candidate SEL --seam S --backend B [--role keep]   one backend.
// Exit 1 when the verdict is not KEEP for a backend whose role is `keep` (--role, or else the role the
// candidate runs recorded in their catalog snapshot), so the command can guard CI; exit 2 for bad input.
// Tests: report/gate.cpp in tests/report/gate_test.cpp (report_tests); --matrix end to end in
// tests/ablations/matrix_cli_test.cpp (ablations_tests).
#include <fmt/core.h>

#include <stdexcept>

#include "harness/cli/commands.h"
#include "report/gate.h"
#include "report/selection.h"

namespace ablate::cli {
namespace {

// "backends.loss=chunked" -> {"loss", "chunked"}; nullopt for a cell that toggles anything else.
std::optional<std::pair<std::string, std::string>> backend_toggle(const std::string& cell) {
  constexpr std::string_view prefix = "backends.";
  const auto eq = cell.find('=');
  if (cell.rfind(prefix, 0) != 0 || eq == std::string::npos || cell.find(',') != std::string::npos) return std::nullopt;
  return std::pair{cell.substr(prefix.size(), eq - prefix.size()), cell.substr(eq + 1)};
}

}  // namespace

void register_gate(CLI::App& app, Globals& g) {
  static std::string baseline, candidate, role, matrix;
  static report::GateOptions options;
  static bool as_json = false;
  auto* cmd = app.add_subcommand("gate", "Keep/drop gate of backends: KEEP / DROP / INCONCLUSIVE, stored as decisions");
  cmd->add_option("--matrix", matrix, "gate every backend cell of the newest matrix of this name against its baseline");
  cmd->add_option("--baseline", baseline, "baseline runs: 12 | 12,13,14 | tag:NAME | name:GLOB | lane:LANE | since:DATE (joined by &) | cell:MATRIX/CELL");
  cmd->add_option("--candidate", candidate, "runs with the backend under test, same forms");
  cmd->add_option("--seam", options.seam, "dispatch seam, e.g. attention");
  cmd->add_option("--backend", options.backend, "the candidate backend at that seam");
  cmd->add_option("--role", role, "catalog role of the backend (default: as the candidate runs recorded it)")
      ->check(CLI::IsMember(receipts::backend_roles()));
  cmd->add_option("--loss-tolerance", options.loss_tolerance,
                  "relative difference of the runs' loss allowed (default 0.02); a larger one within the baseline "
                  "runs' own spread is INCONCLUSIVE, beyond it DROP")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--loss-window", options.loss_window,
                  "a run's loss is the mean over its last this many steps (default 10)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--memory-tolerance", options.memory_tolerance,
                  "relative growth of median peak memory allowed before DROP (default 0.10)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--allow-mismatch", options.compare.allow_mismatch,
                "gate even when environment, harness revision or other spec fields differ (marked)");
  cmd->add_flag("--json", as_json, "print JSON");
  command_table().push_back({cmd, [&g] {
    const bool single = !baseline.empty() || !candidate.empty() || !options.seam.empty() || !options.backend.empty();
    if (matrix.empty() == !single || (single && (baseline.empty() || candidate.empty() || options.seam.empty() ||
                                                 options.backend.empty())))
      throw std::invalid_argument(
          "gate: give either --matrix NAME, or all of --baseline, --candidate, --seam and --backend");
    if (!matrix.empty() && !role.empty())
      throw std::invalid_argument("gate: --role applies to one backend; with --matrix each cell's recorded role is used");
    auto store = receipts::Store::open_existing(g.db);

    // (baseline ids, candidate ids, seam, backend) for each gate to evaluate.
    struct Job {
      std::vector<std::int64_t> baseline, candidate;
      std::string seam, backend;
    };
    std::vector<Job> jobs;
    if (!matrix.empty()) {
      const auto selection = report::select_matrix(store, matrix);
      if (selection.groups.size() < 2)
        throw std::invalid_argument(fmt::format("gate: {} has no cell besides its baseline", selection.title));
      for (size_t i = 1; i < selection.groups.size(); ++i) {
        const auto toggle = backend_toggle(selection.groups[i].name);
        if (!toggle) {
          fmt::print("cell {}: not a single backends.<seam> toggle, not gated\n", selection.groups[i].name);
          continue;
        }
        jobs.push_back({selection.groups[0].run_ids, selection.groups[i].run_ids, toggle->first, toggle->second});
      }
    } else {
      // Tag and name selectors include failed runs: a candidate that failed is evidence against it.
      jobs.push_back({report::select_runs(store, baseline, true), report::select_runs(store, candidate, true),
                      options.seam, options.backend});
    }

    bool keep_backend_failed = false;
    nlohmann::json all = nlohmann::json::array();
    for (const auto& job : jobs) {
      report::GateOptions job_options = options;
      job_options.seam = job.seam;
      job_options.backend = job.backend;
      const auto result = report::evaluate_gate(store, job.baseline, job.candidate, job_options);
      const std::int64_t decision_id = store.record_decision(result.decision());
      if (as_json) {
        auto j = report::to_json(result);
        j["decision_id"] = decision_id;
        all.push_back(std::move(j));
      } else {
        fmt::print("{}decision {} stored in {}\n", report::render_text(result), decision_id, g.db);
      }
      const std::string effective_role = role.empty() ? result.catalog_role.value_or("") : role;
      if (effective_role == "keep" && result.verdict != receipts::Verdict::keep) {
        keep_backend_failed = true;
        fmt::print(stderr, "ablate: gate: {}/{} is marked keep but its gate says {}\n", job.seam, job.backend,
                   receipts::to_string(result.verdict));
      }
    }
    if (as_json) fmt::print("{}\n", (matrix.empty() ? all.at(0) : all).dump(2));
    return keep_backend_failed ? kExitRunFailed : kExitOk;
  }});
}

}  // namespace ablate::cli
