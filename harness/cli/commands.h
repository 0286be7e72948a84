// harness/cli/commands.h: how subcommands plug into the `ablate` CLI. Each command file defines a
// register_* function (options + a callback that returns the exit code); run_selected maps the
// project's error types to exit codes in one place.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace ablate::cli {

inline constexpr int kExitOk = 0, kExitRunFailed = 1, kExitBadInput = 2;

struct Globals {
  std::string db;
};

// A registered subcommand: its CLI11 node and what to run when it is selected.
struct Command {
  CLI::App* app;
  std::function<int()> run;
};
std::vector<Command>& command_table();

void register_commands(CLI::App& app, Globals& g);
// Runs the selected subcommand; SpecError / StoreError / StoreFileError / DataError / invalid_argument -> 2, any other
// exception -> 1, each printed as "ablate: error: ..." on stderr.
int run_selected(CLI::App& app, Globals& g);

// Prints every issue of a spec error as "where: error: message" on stderr.
void print_spec_issues(const std::exception& spec_error);

// An option value that must be a number >= `min` (a count: at_least(1); a tolerance: at_least(0)).
// CLI11's PositiveNumber / NonNegativeNumber say "not in range 0.000000 to <DBL_MAX>"; this says what
// was given and what to give: "--limit: -1 is below 0: give a number >= 0".
inline CLI::Validator at_least(double min) {
  std::ostringstream shown;
  shown << min;
  const std::string bound = shown.str();
  return CLI::Validator(
      [min, bound](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number: give a number >= " + bound;
        return value >= min ? std::string() : text + " is below " + bound + ": give a number >= " + bound;
      },
      "NUMBER >= " + bound);
}

// The commands that need LibTorch (the model, the kernels, the live CUDA device) run in the executable
// `ablate-train`; in a build with LibTorch, `ablate` lists them with the same line and hands them over to
// it (harness/cli/hand_off.cpp says why). Name and one-line description, shared by both executables.
struct TrainCommand {
  const char* name;
  const char* about;
};
inline constexpr TrainCommand kCatalogCommand{
    "catalog", "Print the kernel catalog: seams, backends, roles, fallbacks, availability"};
inline constexpr TrainCommand kRunCommand{"run",
                                          "Run one experiment and store its receipt (exit 1 when the run fails)"};
inline constexpr TrainCommand kLaunchCommand{
    "launch", "Run one experiment data-parallel on this node: N ranks of `ablate run` (torchrun's variables)"};

#ifdef ABLATE_TRAIN_EXECUTABLE
// `ablate` only: whether `command` is one ablate-train runs, and the hand-over: exec of ablate-train
// beside this executable with the same arguments. Returns only when it cannot (exit 2, saying why).
bool runs_in_train(const std::string& command);
int hand_off_to_train(char** argv);
#endif

// One register function per command file.
void register_validate(CLI::App& app, Globals& g);
void register_catalog(CLI::App& app, Globals& g);            // ablate-train (ablate without LibTorch: itself)
void register_receipt_queries(CLI::App& app, Globals& g);  // runs, show
void register_run(CLI::App& app, Globals& g);               // only in builds with LibTorch: ablate-train
void register_launch(CLI::App& app, Globals& g);            // only in builds with LibTorch: N ranks of run
void register_compare(CLI::App& app, Globals& g);           // report/: compare two groups of runs
void register_gate(CLI::App& app, Globals& g);              // report/: keep/drop gate
void register_matrix(CLI::App& app, Globals& g);            // matrix expand, matrix run
void register_report(CLI::App& app, Globals& g);            // report/: Markdown + HTML + JSON report
void register_trend(CLI::App& app, Globals& g);             // report/: a lane's level shifts over time
void register_export(CLI::App& app, Globals& g);            // report/: CSV / JSON tables
void register_import(CLI::App& app, Globals& g);            // merge other receipt stores into --db
void register_site(CLI::App& app, Globals& g);              // report/: a static HTML site over the store

}  // namespace ablate::cli
