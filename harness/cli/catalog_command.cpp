// harness/cli/catalog_command.cpp: `ablate catalog [--lane LANE] [--json]`: every seam's backends with role,
// fallback, CUPTI name patterns, whether each is available on this machine (and if not, why) and whether a
// whole-step CUDA graph can capture it (and if not always, why).
// Roles follow the gate: when the receipt store (--db) exists, a backend whose standing decision on a lane
// is KEEP (report::standing_decisions) is `keep` there; with --lane the role column is the role on that
// lane and cites the decision, without it each kept lane is listed under its backend. A backend with a
// standing decision that this build's catalog lacks (a LibTorch-free build registers none; or renamed,
// removed) is listed too, unavailable, so the decision is never hidden. Without a store: the static catalog.
// Tests: tests/harness/gate_cli_test.cpp (harness_tests).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "harness/cli/commands.h"
#include "kernels/catalog.h"
#include "base/clock.h"
#include "receipts/store.h"
#include "report/gate.h"
#ifdef ABLATE_WITH_TORCH
#include "harness/train/device.h"
#endif

namespace ablate::cli {
namespace {

using nlohmann::json;

// The standing decisions of the store at `db` by seam and backend (none without a store). A --lane
// needs the store and a lane some run of it ran on.
std::map<std::pair<std::string, std::string>, std::vector<report::StandingDecision>> decisions_by_backend(
    const std::string& db, const std::string& lane) {
  std::map<std::pair<std::string, std::string>, std::vector<report::StandingDecision>> out;
  if (!std::filesystem::exists(db)) {
    if (!lane.empty())
      throw std::invalid_argument(fmt::format("catalog --lane reads the gate's decisions from the receipt store, and "
                                              "there is none at {}: pass --db PATH (or set ABLATE_DB)",
                                              db));
    return out;
  }
  auto store = receipts::Store::open_existing(db);
  if (!lane.empty() && store.query("SELECT 1 FROM runs WHERE lane = ? LIMIT 1", {lane}).empty())
    throw std::invalid_argument(fmt::format("catalog --lane: no run in {} ran on lane '{}' (`ablate runs --json` shows "
                                            "each run's lane)",
                                            db, lane));
  for (auto& d : report::standing_decisions(store, "", "", lane)) out[{d.seam, d.backend}].push_back(std::move(d));
  return out;
}

}  // namespace

void register_catalog(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(kCatalogCommand.name, kCatalogCommand.about);
  static bool as_json = false;
  static std::string dtype = "bf16", lane;
  cmd->add_flag("--json", as_json, "print JSON instead of a table");
  cmd->add_option("--dtype", dtype, "dtype to check availability for")->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--lane", lane,
                  "roles on this lane (`ablate runs --json` shows each run's): `keep` where the gate's newest KEEP or "
                  "DROP there, stored in --db, is a KEEP");
  command_table().push_back({cmd, [&g] {
    const auto decisions = decisions_by_backend(g.db, lane);
    kernels::DeviceInfo dev;
#ifdef ABLATE_WITH_TORCH
    dev = harness::live_device_info();
#endif
    dev.dtype = dtype;
    json rows = json::array();
    // One row: its static fields (a null catalog_role: not in this build's catalog) and its decisions.
    auto add_row = [&](const std::string& seam, const std::string& backend, const json& catalog_role, json row) {
      json kept_on = json::array(), on_lane = nullptr;
      if (const auto it = decisions.find({seam, backend}); it != decisions.end()) {
        for (const auto& d : it->second) {
          const json entry = {{"lane", d.lane}, {"decision_id", d.decision_id},
                              {"verdict", receipts::to_string(d.verdict)}, {"decided_at", d.decided_at}};
          if (d.verdict == receipts::Verdict::keep) kept_on.push_back(entry);
          if (!lane.empty()) on_lane = entry;  // filtered to the lane: one at most
        }
      }
      const bool kept_here = !on_lane.is_null() && on_lane["verdict"] == "KEEP";
      row.update({{"seam", seam}, {"backend", backend}, {"role", kept_here ? json("keep") : catalog_role},
                  {"catalog_role", catalog_role}, {"kept_on", kept_on}, {"decision", on_lane}});
      rows.push_back(std::move(row));
    };
    std::set<std::pair<std::string, std::string>> listed;
    for (const auto& b : kernels::catalog()) {
      const std::string why = kernels::why_unavailable(b, dev);
      add_row(b.seam, b.name, kernels::role_name(b.role),
              {{"fallback", b.fallback}, {"kernel_patterns", b.kernel_patterns}, {"available", why.empty()},
               {"unavailable_reason", why}, {"capture", kernels::capture_name(b.capture)},
               {"capture_reason", kernels::why_not_capturable(b, /*dropless_moe=*/true)}, {"description", b.description}});
      listed.insert({b.seam, b.name});
    }
    for (const auto& [seam_backend, unused] : decisions) {
      if (listed.contains(seam_backend)) continue;
      add_row(seam_backend.first, seam_backend.second, nullptr,
              {{"fallback", ""}, {"kernel_patterns", json::array()}, {"available", false},
               {"unavailable_reason", "not in this build's catalog (a build without LibTorch registers no backend; "
                                      "else renamed or removed)"},
               {"capture", "-"}, {"capture_reason", ""}, {"description", ""}});
    }
    if (as_json) {
      fmt::print("{}\n", rows.dump(2));
      return kExitOk;
    }
    fmt::print("device: {}\n", dev.cuda ? fmt::format("CUDA sm_{}{}", dev.sm_major, dev.sm_minor) : "CPU only");
    if (!lane.empty())
      fmt::print("roles on lane {} (the gate's standing decisions in {})\n", lane, g.db);
    fmt::print("{:<15} {:<15} {:<13} {:<12} {:<10} {:<18} {}\n", "seam", "backend", "role", "fallback", "available",
               "capture", "kernel patterns");
    for (const auto& r : rows) {
      fmt::print("{:<15} {:<15} {:<13} {:<12} {:<10} {:<18} {}\n", r["seam"].get<std::string>(),
                 r["backend"].get<std::string>(), r["role"].is_null() ? "-" : r["role"].get<std::string>(),
                 r["fallback"].get<std::string>().empty() ? "-" : r["fallback"].get<std::string>(),
                 r["available"].get<bool>() ? "yes" : "no", r["capture"].get<std::string>(),
                 fmt::format("{}", fmt::join(r["kernel_patterns"].get<std::vector<std::string>>(), ", ")));
      if (!r["available"].get<bool>()) fmt::print("{:<15} {:<15} ({})\n", "", "", r["unavailable_reason"].get<std::string>());
      if (!r["capture_reason"].get<std::string>().empty())
        fmt::print("{:<15} {:<15} (no capture: {})\n", "", "", r["capture_reason"].get<std::string>());
      if (!r["decision"].is_null()) {
        const auto& d = r["decision"];
        fmt::print("{:<15} {:<15} ({} by decision {} of {} UTC; catalog role {})\n", "", "",
                   d["verdict"] == "KEEP" ? "kept" : "dropped", d["decision_id"].get<std::int64_t>(),
                   base::format_utc(d["decided_at"].get<double>()),
                   r["catalog_role"].is_null() ? "-" : r["catalog_role"].get<std::string>());
      } else if (lane.empty()) {
        for (const auto& k : r["kept_on"])
          fmt::print("{:<15} {:<15} (keep on lane {} by decision {} of {} UTC)\n", "", "", k["lane"].get<std::string>(),
                     k["decision_id"].get<std::int64_t>(), base::format_utc(k["decided_at"].get<double>()));
      }
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
