// harness/cli/main.cpp: the `ablate` command line. Subcommands live in harness/cli/*_command.cpp and register
// themselves here. Exit codes: 0 ok, 1 a run failed (or a failing gate / trend --fail-on-regression),
// 2 bad input (spec, CLI, database, data).
// Try: ablate --help; ablate validate experiments/tiny.toml
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdlib>

#include "harness/cli/commands.h"

int main(int argc, char** argv) {
  using namespace ablate::cli;
  CLI::App app{"ablate: declared experiments with receipts for hybrid LLM training stacks.\n"
               "Exit codes: 0 ok, 1 run failed (gate: a keep backend failed its gate; trend --fail-on-regression:\n"
               "a regression), 2 bad input."};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--db) may follow the subcommand
  Globals g;
  app.add_option("--db", g.db, "receipt database (default: $ABLATE_DB, else ./receipts.db)");
  register_commands(app, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help or the error
    return rc == 0 ? 0 : kExitBadInput;
  }
  if (g.db.empty()) {
    const char* env = std::getenv("ABLATE_DB");
    g.db = env && *env ? env : "receipts.db";
  }
  return run_selected(app, g);
}
