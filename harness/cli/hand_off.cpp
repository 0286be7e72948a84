// harness/cli/hand_off.cpp: `ablate`'s side of the split between two executables (builds with LibTorch).
// Why two: LibTorch's static initialisers cost every process that loads it ~0.4 s and ~470 MB before
// main(), while the store commands (runs, show, report, compare, gate, trend, export, import, site,
// matrix, validate) need none of it and should answer in milliseconds. So `ablate` links only the plain
// libraries, and the commands that need LibTorch (catalog, run, launch: commands.h) run in
// `ablate-train`, the whole CLI linked with LibTorch, found beside `ablate`.
// Why exec, not dlopen of a training library: the run stays the same process with the same argv, pid,
// environment, descriptors and signal mask, which torchrun, srun, `ablate launch` and `ablate matrix run`
// watch and signal (a run blocks its termination signals before any thread starts); and ablate-train is
// one ordinary executable that `launch` re-executes for its ranks.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "harness/cli/commands.h"

namespace ablate::cli {
namespace {

void register_hand_off(CLI::App& app, const TrainCommand& command) {
  // Listed for `ablate --help` only: main() hands the command over before anything is parsed.
  app.add_subcommand(command.name, command.about);
}

}  // namespace

void register_catalog(CLI::App& app, Globals&) { register_hand_off(app, kCatalogCommand); }
void register_run(CLI::App& app, Globals&) { register_hand_off(app, kRunCommand); }
void register_launch(CLI::App& app, Globals&) { register_hand_off(app, kLaunchCommand); }

bool runs_in_train(const std::string& command) {
  for (const auto& c : {kCatalogCommand, kRunCommand, kLaunchCommand})
    if (command == c.name) return true;
  return false;
}

int hand_off_to_train(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    fmt::print(stderr, "ablate: error: cannot find this executable's folder (/proc/self/exe: {}), where {} is: "
                       "run {} directly\n",
               ec.message(), ABLATE_TRAIN_EXECUTABLE, ABLATE_TRAIN_EXECUTABLE);
    return kExitBadInput;
  }
  const auto train = (self.parent_path() / ABLATE_TRAIN_EXECUTABLE).string();
  // argv[0] as given: usage lines and messages read as they would from `ablate` itself.
  ::execv(train.c_str(), argv);
  const int err = errno;
  fmt::print(stderr,
             "ablate: error: the training commands ({}, {}, {}) run in {}, the half of ablate that loads LibTorch, "
             "which must be beside this executable: {}: {} (build it: cmake --build BUILD --target {}; copy it along "
             "with ablate)\n",
             kCatalogCommand.name, kRunCommand.name, kLaunchCommand.name, ABLATE_TRAIN_EXECUTABLE, train,
             std::strerror(err), ABLATE_TRAIN_EXECUTABLE);
  return kExitBadInput;
}

}  // namespace ablate::cli
