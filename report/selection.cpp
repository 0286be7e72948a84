// report/selection.cpp: matrix and selector based run selection, grouped into cells (see selection.h).
// Tests: tests/report/report_test.cpp, export_test.cpp (report_tests).
#include "report/selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
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

}  // namespace

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
  RunSelection selection;
  selection.matrix_id = rows[0]["id"].get<std::int64_t>();
  selection.title = fmt::format("matrix {} (id {})", name, *selection.matrix_id);
  if (rows.size() > 1) {
    selection.notes.push_back(fmt::format("{} older matri{} named '{}' (another cell set or base) not included; this "
                                          "report covers the newest, id {}",
                                          rows.size() - 1, rows.size() == 2 ? "x" : "ces", name, *selection.matrix_id));
  }
  // Cell order from the matrix's identity (baseline first), then any cell it does not list.
  std::vector<std::string> order;
  const json identity = json::parse(rows[0]["spec_json"].get<std::string>());
  if (identity.contains("cells") && identity["cells"].is_array())
    for (const auto& cell : identity["cells"])
      if (cell.contains("name") && cell["name"].is_string()) order.push_back(cell["name"].get<std::string>());
  std::map<std::string, std::vector<std::int64_t>> by_cell;
  for (const auto& cell : store.matrix_cells(*selection.matrix_id)) by_cell[cell.cell].push_back(cell.run_id);
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
                                            name, *selection.matrix_id, store.path()));
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
