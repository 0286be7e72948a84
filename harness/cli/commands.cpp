// harness/cli/commands.cpp: the subcommand table and the one place where error types become exit codes.
#include "harness/cli/commands.h"

#include <fmt/core.h>

#include <cstdio>
#include <stdexcept>

#include "base/errors.h"
#include "spec/spec.h"
#include "receipts/store.h"

namespace ablate::cli {

std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}

void register_commands(CLI::App& app, Globals& g) {
  register_validate(app, g);
  register_catalog(app, g);
  register_receipt_queries(app, g);
  register_compare(app, g);
  register_gate(app, g);
  register_matrix(app, g);
  register_report(app, g);
  register_trend(app, g);
  register_export(app, g);
  register_import(app, g);
  register_site(app, g);
#if defined(ABLATE_WITH_TORCH) || defined(ABLATE_TRAIN_EXECUTABLE)
  register_run(app, g);
  register_launch(app, g);
#endif
}

void print_spec_issues(const std::exception& e) {
  for (const auto& i : dynamic_cast<const harness::SpecError&>(e).issues())
    fmt::print(stderr, "{}: error: {}\n", i.where, i.message);
}

int run_selected(CLI::App& app, Globals& g) {
  for (const auto& cmd : command_table()) {
    if (!cmd.app->parsed()) continue;
    try {
      return cmd.run();
    } catch (const harness::SpecError& e) {
      print_spec_issues(e);
      return kExitBadInput;
    } catch (const std::exception& e) {
      // Bad input (store, data, configuration against this machine) is exit 2; anything else
      // means the work itself failed.
      // A store file that is damaged or cannot be written is the --db the user gave: bad input too.
      const bool bad_input = dynamic_cast<const base::InputError*>(&e) ||  // StoreError, DataError
                             dynamic_cast<const receipts::StoreFileError*>(&e) ||
                             dynamic_cast<const std::invalid_argument*>(&e);
      // A command stopped by its own output failing (fmt throws once the stdout buffer cannot be
      // flushed: a full disk, a closed pipe) lost that output: exit 2, as main says, not a failed run.
      const bool output_lost = std::ferror(stdout) != 0;
      fmt::print(stderr, "ablate: error: {}\n", e.what());
      return bad_input || output_lost ? kExitBadInput : kExitRunFailed;
    }
  }
  fmt::print(stderr, "ablate: error: no subcommand given (see ablate --help)\n");
  return kExitBadInput;
}

}  // namespace ablate::cli
