// harness/cli/catalog_command.cpp: `ablate catalog [--json]`: every seam's backends with role, fallback,
// CUPTI name patterns, whether each is available on this machine (and if not, why) and whether a
// whole-step CUDA graph can capture it (and if not always, why).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "harness/cli/commands.h"
#include "kernels/catalog.h"
#ifdef ABLATE_WITH_TORCH
#include "harness/train/device.h"
#endif

namespace ablate::cli {

void register_catalog(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("catalog", "Print the kernel catalog: seams, backends, roles, fallbacks, availability");
  static bool as_json = false;
  static std::string dtype = "bf16";
  cmd->add_flag("--json", as_json, "print JSON instead of a table");
  cmd->add_option("--dtype", dtype, "dtype to check availability for")->check(CLI::IsMember({"fp32", "bf16"}));
  command_table().push_back({cmd, [] {
    kernels::DeviceInfo dev;
#ifdef ABLATE_WITH_TORCH
    dev = harness::live_device_info();
#endif
    dev.dtype = dtype;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& b : kernels::catalog()) {
      const std::string why = kernels::why_unavailable(b, dev);
      rows.push_back({{"seam", b.seam}, {"backend", b.name}, {"role", kernels::role_name(b.role)},
                      {"fallback", b.fallback}, {"kernel_patterns", b.kernel_patterns},
                      {"available", why.empty()}, {"unavailable_reason", why},
                      {"capture", kernels::capture_name(b.capture)},
                      {"capture_reason", kernels::why_not_capturable(b, /*dropless_moe=*/true)},
                      {"description", b.description}});
    }
    if (as_json) {
      fmt::print("{}\n", rows.dump(2));
      return kExitOk;
    }
    fmt::print("device: {}\n", dev.cuda ? fmt::format("CUDA sm_{}{}", dev.sm_major, dev.sm_minor) : "CPU only");
    fmt::print("{:<15} {:<15} {:<13} {:<12} {:<10} {:<18} {}\n", "seam", "backend", "role", "fallback", "available",
               "capture", "kernel patterns");
    for (const auto& r : rows) {
      fmt::print("{:<15} {:<15} {:<13} {:<12} {:<10} {:<18} {}\n", r["seam"].get<std::string>(),
                 r["backend"].get<std::string>(), r["role"].get<std::string>(),
                 r["fallback"].get<std::string>().empty() ? "-" : r["fallback"].get<std::string>(),
                 r["available"].get<bool>() ? "yes" : "no", r["capture"].get<std::string>(),
                 fmt::format("{}", fmt::join(r["kernel_patterns"].get<std::vector<std::string>>(), ", ")));
      if (!r["available"].get<bool>()) fmt::print("{:<15} {:<15} ({})\n", "", "", r["unavailable_reason"].get<std::string>());
      if (!r["capture_reason"].get<std::string>().empty())
        fmt::print("{:<15} {:<15} (no capture: {})\n", "", "", r["capture_reason"].get<std::string>());
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
