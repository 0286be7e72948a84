// harness/cli/run_command.cpp: `ablate run [FILE] [--set k=v]...`: one declared experiment into the receipt
// store. Without FILE it runs the embedded defaults (tiny on CPU, nam56r-small when a GPU is present).
// Only in builds with LibTorch (the runner needs it); a torch-free build has no `run` command. Run once
// per rank by torchrun (`torchrun --no-python --nproc-per-node N ablate run FILE`), srun or `ablate launch`.
#ifdef ABLATE_WITH_TORCH
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/errors.h"
#include "harness/cli/commands.h"
#include "harness/env.h"
#include "spec/spec.h"
#include "harness/train/device.h"
#include "harness/train/runner.h"
#include "receipts/lifecycle.h"

namespace ablate::cli {
namespace {

// A whole number >= `lo` from the environment variable `name` (set, when set, by `ablate matrix run`).
int64_t env_count(const char* name, int64_t lo) {
  const std::string raw = std::getenv(name);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), value);
  if (ec != std::errc() || end != raw.data() + raw.size() || value < lo)
    throw base::InputError(fmt::format("environment variable {}='{}' is not a whole number >= {} (`ablate matrix run` "
                                       "sets it for its cells): fix or unset it",
                                       name, raw, lo));
  return value;
}

}  // namespace

void register_run(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(kRunCommand.name, kRunCommand.about);
  static std::string file;
  static std::vector<std::string> overrides;
  static bool quiet = false;
  static bool no_profile = false;
  cmd->add_option("file", file, "experiment TOML (default: the embedded defaults)")->check(CLI::ExistingFile);
  cmd->add_option("--set", overrides, "override section.key=value (repeatable)");
  cmd->add_flag("-q,--quiet", quiet, "no progress lines");
  cmd->add_flag("--no-profile", no_profile,
                "leave CUPTI to nsys/ncu: no CUPTI window (the receipt says profiling off), NVTX ranges stay");
  command_table().push_back({cmd, [&g] {
    const auto start = std::chrono::steady_clock::now();
    // Before any thread exists, so the termination signals always reach the run's lifecycle thread.
    receipts::RunLifecycle::block_termination_signals();
    // A closed output (`ablate run ... | head`) fails the progress writes, not the process.
    ::signal(SIGPIPE, SIG_IGN);
    // Every environment input is read before a run row exists: a malformed one is exit 2, no run.
    harness::git_facts();  // ABLATE_GIT_REVISION / ABLATE_GIT_DIRTY
    base::env_seconds("ABLATE_HEARTBEAT_S", 1.0);
    const auto spec = file.empty() ? harness::default_spec(harness::live_device_info().cuda, overrides)
                                   : harness::parse_spec_file(file, overrides);
    harness::RunOptions opt;
    opt.db_path = g.db;
    opt.process_start = start;
    // Launched as one rank of several (torchrun, srun, `ablate launch`): a malformed launcher
    // environment is exit 2 here; rank 0 alone prints progress and writes the receipt.
    opt.world = harness::read_world_env();
    opt.quiet = quiet || (opt.world && opt.world->rank != 0);
    opt.no_profile = no_profile;
    // Set by `ablate matrix run` (ablations/matrix_run.cpp) so this run records its matrix cell.
    if (const char* id = std::getenv("ABLATE_MATRIX_ID"); id && *id) {
      opt.matrix_id = env_count("ABLATE_MATRIX_ID", 1);
      opt.cell = std::getenv("ABLATE_MATRIX_CELL") ? std::getenv("ABLATE_MATRIX_CELL") : "";
      opt.repeat = std::getenv("ABLATE_MATRIX_REPEAT") ? env_count("ABLATE_MATRIX_REPEAT", 0) : 0;
    }
    return harness::run_experiment(spec, opt).exit_code;
  }});
}

}  // namespace ablate::cli
#endif  // ABLATE_WITH_TORCH
