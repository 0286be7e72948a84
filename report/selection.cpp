// report/selection.cpp: matrix and selector based run selection, grouped into cells (see selection.h).
// Tests: tests/report/report_test.cpp, export_test.cpp (report_tests).
#include "report/selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "report/compare.h"

namespace ablate::report {
namespace {

using nlohmann::json;

std::vector<std::string> matrix_names(receipts::Store& store) {
  std::vector<std::string> names;
  for (const auto& row : store.query("SELECT DISTINCT name FROM matrices ORDER BY name"))
    names.push_back(row["name"].get<std::string>());
  return names;
}

std::vector<std::string> group_names(const RunSelection& selection) {
  std::vector<std::string> names;
  for (const auto& g : selection.groups) names.push_back(g.name);
  return names;
}

// The world size a matrix cell asks for through its own or the matrix's --set overrides (1 when neither
// sets distributed.nproc: the base file's value is not in the matrix identity).
std::int64_t declared_nproc(const json& identity, const json& cell) {
  std::int64_t nproc = 1;
  for (const json* sets : {&identity, &cell}) {
    if (!sets->contains("set") || !(*sets)["set"].is_array()) continue;
    for (const auto& arg : (*sets)["set"]) {
      constexpr std::string_view key = "distributed.nproc=";
      if (!arg.is_string() || !arg.get<std::string>().starts_with(key)) continue;
      try {
        nproc = std::stoll(arg.get<std::string>().substr(key.size()));
      } catch (const std::exception&) {  // not a number: the matrix could not have run it either
      }
    }
  }
  return nproc;
}

std::string no_runs_reason(const json& identity, const json& cell) {
  const std::int64_t nproc = declared_nproc(identity, cell);
  if (nproc > 1)
    return fmt::format("no run recorded: the cell asks for distributed.nproc = {}, and `ablate matrix run` refuses it "
                       "without a run unless --gpus lists {} GPUs (or it was never started)",
                       nproc, nproc);
  return "no run recorded: never started, or refused before its run began (an unavailable backend under "
         "backends.strict = true, a setting this machine cannot run: the matrix log says which); `ablate matrix run` "
         "of the same file resumes the matrix";
}

}  // namespace

const DeclaredCell* RunSelection::baseline_without_runs() const {
  return !declared_cells.empty() && !declared_cells.front().no_runs_reason.empty() ? &declared_cells.front() : nullptr;
}

std::vector<std::int64_t> RunSelection::run_ids() const {
  std::vector<std::int64_t> ids;
  for (const auto& g : groups) ids.insert(ids.end(), g.run_ids.begin(), g.run_ids.end());
  return ids;
}

RunSelection select_matrix(receipts::Store& store, std::string_view name) {
  const json rows = store.query("SELECT id, spec_json FROM matrices WHERE name = ? ORDER BY id DESC", {std::string(name)});
  if (rows.empty()) {
    const auto known = matrix_names(store);
    throw std::invalid_argument(fmt::format("no matrix named '{}' in {}; {} (run one with `ablate matrix run FILE`)", name,
                                            store.path(),
                                            known.empty() ? "the store has no matrices"
                                                          : fmt::format("known matrices: {}", fmt::join(known, ", "))));
  }
  RunSelection selection = select_matrix_id(store, rows[0]["id"].get<std::int64_t>());
  if (rows.size() > 1) {
    selection.notes.insert(selection.notes.begin(),
                           fmt::format("{} older matri{} named '{}' (another cell set or base) not included; this "
                                       "report covers the newest, id {}",
                                       rows.size() - 1, rows.size() == 2 ? "x" : "ces", name, *selection.matrix_id));
  }
  return selection;
}

RunSelection select_matrix_id(receipts::Store& store, std::int64_t matrix_id) {
  const json rows = store.query("SELECT name, spec_json FROM matrices WHERE id = ?", {matrix_id});
  if (rows.empty()) throw std::invalid_argument(fmt::format("no matrix with id {} in {}", matrix_id, store.path()));
  const std::string name = rows[0]["name"].get<std::string>();
  RunSelection selection;
  selection.matrix_id = matrix_id;
  selection.title = fmt::format("matrix {} (id {})", name, matrix_id);
  // Cell order from the matrix's identity (baseline first), then any cell it does not list.
  std::vector<std::string> order;
  const json identity = json::parse(rows[0]["spec_json"].get<std::string>());
  // A matrix run with changes from the command line says so: its file alone does not reproduce it.
  if (const auto it = identity.find("command_line"); it != identity.end() && it->is_array() && !it->empty()) {
    std::vector<std::string> changes;
    for (const auto& change : *it)
      if (change.is_string()) changes.push_back(change.get<std::string>());
    selection.notes.push_back(fmt::format("Matrix {} (base {}) run with changes from the command line: {}", name,
                                          identity.value("base", std::string("not recorded")), fmt::join(changes, " ")));
  }
  std::map<std::string, std::vector<std::int64_t>> by_cell;
  for (const auto& cell : store.matrix_cells(matrix_id)) by_cell[cell.cell].push_back(cell.run_id);
  if (identity.contains("cells") && identity["cells"].is_array()) {
    for (const auto& cell : identity["cells"]) {
      if (!cell.contains("name") || !cell["name"].is_string()) continue;
      const std::string cell_name = cell["name"].get<std::string>();
      order.push_back(cell_name);
      selection.declared_cells.push_back({cell_name, by_cell.count(cell_name) ? "" : no_runs_reason(identity, cell)});
    }
  }
  for (const auto& [cell, ids] : by_cell)
    if (std::find(order.begin(), order.end(), cell) == order.end()) order.push_back(cell);
  for (const auto& cell : order) {
    auto it = by_cell.find(cell);
    if (it == by_cell.end()) continue;
    std::sort(it->second.begin(), it->second.end());  // ids grow with start time
    selection.groups.push_back({cell, it->second});
  }
  if (selection.groups.empty())
    throw std::invalid_argument(fmt::format("matrix '{}' (id {}) in {} has no runs yet (run it with `ablate matrix run`)",
                                            name, matrix_id, store.path()));
  if (const auto* missing = selection.baseline_without_runs())
    selection.notes.push_back(fmt::format("The matrix's baseline cell '{}' has no run ({}): the comparisons are against "
                                          "another cell, the one the baseline line names",
                                          missing->name, missing->no_runs_reason));
  return selection;
}

RunSelection select_grouped(receipts::Store& store, std::string_view selector) {
  RunSelection selection;
  selection.title = fmt::format("runs {}", selector);
  for (const std::int64_t id : select_runs(store, selector, true)) {
    const auto run = store.get_run(id);
    const std::string group = run.cell.value_or(run.name);
    auto it = std::find_if(selection.groups.begin(), selection.groups.end(), [&](const auto& g) { return g.name == group; });
    if (it == selection.groups.end()) {
      selection.groups.push_back({group, {}});
      it = selection.groups.end() - 1;
    }
    it->run_ids.push_back(id);
  }
  const auto baseline = std::find_if(selection.groups.begin(), selection.groups.end(),
                                     [](const auto& g) { return g.name == "baseline"; });
  if (baseline != selection.groups.end()) std::rotate(selection.groups.begin(), baseline, baseline + 1);
  return selection;
}

RunSelection select_cells(receipts::Store& store, const std::string& selector, const std::string& matrix_name) {
  if (!selector.empty() && !matrix_name.empty())
    throw std::invalid_argument(fmt::format("give either a run selector ('{}') or --matrix ('{}'), not both", selector,
                                            matrix_name));
  if (!matrix_name.empty()) return select_matrix(store, matrix_name);
  if (selector.empty())
    throw std::invalid_argument("which runs? give --matrix NAME or a run selector: 12 | 12,13,14 | tag:NAME | name:GLOB");
  return select_grouped(store, selector);
}

namespace {

// "model.d_model=128" from "spec.model.d_model" and its JSON text; strings without their quotes.
std::string spec_setting(const std::string& field, const std::string& value) {
  const json parsed = json::parse(value, nullptr, /*allow_exceptions=*/false);
  const std::string shown = parsed.is_string() ? parsed.get<std::string>() : value;  // (default) is not JSON
  return fmt::format("{}={}", std::string_view(field).substr(std::string_view("spec.").size()), shown);
}

}  // namespace

void split_groups_by_spec(receipts::Store& store, RunSelection& selection) {
  std::vector<RunGroup> groups;
  for (const auto& group : selection.groups) {
    std::vector<std::map<std::string, std::string>> specs;  // in the order of their oldest run
    std::vector<std::vector<std::int64_t>> runs;
    for (const std::int64_t id : group.run_ids) {
      auto spec = spec_fields(store, id);
      spec.erase("spec.experiment.seed");
      const auto it = std::find(specs.begin(), specs.end(), spec);
      if (it == specs.end()) {
        specs.push_back(std::move(spec));
        runs.push_back({id});
      } else {
        runs[static_cast<std::size_t>(it - specs.begin())].push_back(id);
      }
    }
    if (specs.size() <= 1) {
      groups.push_back(group);
      continue;
    }
    std::set<std::string> fields;
    for (const auto& spec : specs)
      for (const auto& [field, value] : spec) fields.insert(field);
    std::vector<std::string> differing;
    for (const auto& field : fields) {
      std::set<std::string> values;
      for (const auto& spec : specs) values.insert(spec.count(field) ? spec.at(field) : absent_value(field));
      if (values.size() > 1) differing.push_back(field);
    }
    std::vector<std::string> parts;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      std::vector<std::string> settings;
      for (const auto& field : differing)
        settings.push_back(spec_setting(field, specs[i].count(field) ? specs[i].at(field) : absent_value(field)));
      groups.push_back({fmt::format("{} [{}]", group.name, fmt::join(settings, ", ")), runs[i]});
      parts.push_back(fmt::format("{} (run(s) {})", groups.back().name, fmt::join(runs[i], ", ")));
    }
    std::vector<std::string> keys;
    for (const auto& field : differing) keys.push_back(field.substr(std::string_view("spec.").size()));
    selection.notes.push_back(fmt::format("Cell {} holds runs of {} different specs (they differ in {}): reported as "
                                          "{} cells, never pooled: {}.",
                                          group.name, specs.size(), fmt::join(keys, ", "), specs.size(),
                                          fmt::join(parts, "; ")));
  }
  selection.groups = std::move(groups);
}

void set_baseline(RunSelection& selection, std::string_view baseline) {
  const auto it = std::find_if(selection.groups.begin(), selection.groups.end(),
                               [&](const auto& g) { return g.name == baseline; });
  if (it == selection.groups.end()) {
    throw std::invalid_argument(fmt::format("--baseline '{}' is not a cell of {}; cells: {}", baseline, selection.title,
                                            fmt::join(group_names(selection), ", ")));
  }
  std::rotate(selection.groups.begin(), it, it + 1);
}

}  // namespace ablate::report
