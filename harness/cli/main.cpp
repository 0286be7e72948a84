// harness/cli/main.cpp: the `ablate` command line (and `ablate-train`'s: the same file, see hand_off.cpp).
// Subcommands live in harness/cli/*_command.cpp and register themselves here. Exit codes: 0 ok, 1 a run failed (or a failing gate / trend --fail-on-regression),
// 2 bad input (spec, CLI, database, data) or output that could not be written.
// Try: ablate --help; ablate validate experiments/tiny.toml
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "build_info.h"
#include "harness/cli/commands.h"
#include "receipts/schema.h"

namespace {

int run_main(int argc, char** argv) {
  using namespace ablate::cli;
  CLI::App app{"ablate: declared experiments with receipts for hybrid LLM training stacks.\n"
               "Exit codes: 0 ok, 1 run failed (gate: a keep backend failed its gate; trend --fail-on-regression:\n"
               "a regression), 2 bad input."};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--db) may follow the subcommand
  Globals g;
  app.add_option("--db", g.db, "receipt database (default: $ABLATE_DB, else ./receipts.db)");
  // What this binary is, in the words its receipts record (env.harness_version, the build facts); the
  // source revision is a run's fact (git or ABLATE_GIT_REVISION at run time), not the binary's.
  const std::string cuda = ABLATE_CUDA_ARCHITECTURES, torch = ABLATE_LIBTORCH_VERSION;
  app.set_version_flag("--version",
                       fmt::format("ablate {}: receipt schema {}, {} build ({}), {}, {}", ABLATE_VERSION,
                                   ablate::receipts::schema::latest_version(), ABLATE_BUILD_TYPE, ABLATE_CXX_COMPILER,
                                   torch.empty() ? "without LibTorch" : "LibTorch " + torch,
                                   cuda.empty() ? "no CUDA kernels" : "CUDA kernels for sm_" + cuda),
                       "print this binary's version and build, then exit");
  register_commands(app, g);

  // The first word that is not a global option names the command: an unknown one is named, with the
  // real ones (CLI11 alone would only say that a subcommand is required).
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--db") {
      ++i;
      continue;
    }
    if (word.rfind("-", 0) == 0) continue;
    const auto commands = app.get_subcommands([](CLI::App*) { return true; });
    if (std::none_of(commands.begin(), commands.end(), [&](const CLI::App* sub) { return sub->check_name(word); })) {
      std::string known;
      for (const auto* sub : commands) known += (known.empty() ? "" : ", ") + sub->get_name();
      fmt::print(stderr, "ablate: unknown command '{}': the commands are {} (ablate --help says what each does)\n", word,
                 known);
      return kExitBadInput;
    }
#ifdef ABLATE_TRAIN_EXECUTABLE
    // Before parsing: ablate-train parses the whole command line itself, --help included.
    if (runs_in_train(word)) return hand_off_to_train(argv);
#endif
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // The parser's own message, said as every other error is: who, what, where to look.
    const auto parsed = app.get_subcommands();
    fmt::print(stderr, "ablate: {} ({} --help lists the options)\n", e.what(),
               parsed.empty() ? std::string("ablate") : "ablate " + parsed.front()->get_name());
    return kExitBadInput;
  }
  if (app.get_option("--db")->count() > 0 && g.db.empty()) {
    fmt::print(stderr, "ablate: --db is empty: give the receipt store's path (or leave --db out: $ABLATE_DB, else "
                       "./receipts.db)\n");
    return kExitBadInput;
  }
  if (g.db.empty()) {
    const char* env = std::getenv("ABLATE_DB");
    g.db = env && *env ? env : "receipts.db";
  }
  return run_selected(app, g);
}

}  // namespace

int main(int argc, char** argv) {
  int rc = ablate::cli::kExitBadInput;
  try {
    rc = run_main(argc, argv);
  } catch (...) {
    // Only printing gets this far (run_selected turns every command's own error into an exit code):
    // stderr or stdout could not be written, so there is nobody to tell; never an abort.
  }
  // Output that could not be written (a full disk, a closed file) is lost output: never exit 0 over it.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "ablate: the output could not be written (%s): what was printed is incomplete\n",
                 std::strerror(errno));
    return rc == 0 ? ablate::cli::kExitBadInput : rc;
  }
  return rc;
}
