// harness/cli/validate_command.cpp: `ablate validate FILE [--set k=v]...`: prints the canonical JSON and the
// identity hash, or every problem as file:line:column (exit 2).
#include <fmt/core.h>

#include "harness/cli/commands.h"
#include "spec/spec.h"

namespace ablate::cli {

void register_validate(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand("validate", "Check experiment files; print their canonical form and identity hash");
  static std::vector<std::string> files, overrides;
  static bool quiet = false;
  cmd->add_option("files", files, "experiment TOML files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", overrides, "override section.key=value (repeatable)");
  cmd->add_flag("-q,--quiet", quiet, "print only the hash of each valid file");
  command_table().push_back({cmd, [] {
    int rc = kExitOk;
    for (const auto& f : files) {
      try {
        const auto spec = harness::parse_spec_file(f, overrides);
        if (quiet) {
          fmt::print("{}  {}\n", harness::spec_hash(spec), f);
        } else {
          fmt::print("# {}\n# spec_hash {}\n# model_hash {}\n{}\n", f, harness::spec_hash(spec), harness::model_hash(spec),
                     harness::canonical_json(spec).dump(2));
        }
      } catch (const harness::SpecError& e) {
        print_spec_issues(e);
        rc = kExitBadInput;
      }
    }
    return rc;
  }});
}

}  // namespace ablate::cli
