// harness/cli/matrix_command.cpp: `ablate matrix expand FILE` (cells and run order of an ablation matrix) and
// `ablate matrix run FILE [--gpus 0,1] [--repeats N] [--dry-run] [--logs DIR]` (every (cell, repeat)
// as a child `ablate run`, resumable); both take changes to the file from the command line (`--set
// KEY=VALUE`, `--axis KEY=[V1,V2]`, `--name NAME`: ablations::MatrixOverrides). The matrix logic lives in ablations/; this file is options and
// printing. Tests: tests/ablations/matrix_cli_test.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "ablations/matrix.h"
#include "ablations/matrix_run.h"
#include "harness/cli/commands.h"
#include "harness/env.h"
#include "receipts/store.h"

namespace ablate::cli {
namespace {

namespace fs = std::filesystem;

// Single-quoted for a POSIX shell when needed, so a dry-run line can be pasted.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:+@") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The options both subcommands take to change the file; overrides() reads what was given.
struct OverrideOptions {
  int64_t repeats = 0;  // 0: the file's [matrix].repeats
  std::string name;
  CLI::Option* name_option = nullptr;
  std::vector<std::string> set, axes;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--repeats", repeats, "override [matrix].repeats")->check(at_least(1));
    cmd->add_option("--set", set, "set section.key=VALUE in every cell, over the file's [set] (repeatable; recorded in the matrix)");
    cmd->add_option("--axis", axes, "replace or add an axis: section.key=[V1,V2,...], the first the baseline (repeatable; recorded)");
    name_option = cmd->add_option("--name", name, "store the matrix under this name (default [matrix].name), e.g. for a variant");
  }
  ablations::MatrixOverrides overrides() const {
    ablations::MatrixOverrides o;
    if (repeats > 0) o.repeats = repeats;
    if (name_option->count() > 0) o.name = name;
    o.set = set;
    o.axes = axes;
    return o;
  }
};

}  // namespace

void register_matrix(CLI::App& app, Globals& g) {
  auto* matrix = app.add_subcommand("matrix", "Ablation matrices: expand a matrix file, or run it into the store");
  matrix->require_subcommand(1);

  static std::string file;
  static OverrideOptions expand_options, run_options;
  auto* expand = matrix->add_subcommand("expand", "Validate a matrix file; print its cells and run order");
  expand->add_option("file", file, "matrix TOML (ablations/*.toml)")->required()->check(CLI::ExistingFile);
  expand_options.add_to(expand);
  command_table().push_back({expand, [] {
    fmt::print("{}", ablations::describe(ablations::load_matrix(file, expand_options.overrides())));
    return kExitOk;
  }});

  static std::vector<std::string> gpus;
  static bool dry_run = false;
  static std::string logs;
  auto* run = matrix->add_subcommand(
      "run", "Run every (cell, repeat) as a child `ablate run`, skipping pairs that already have an ok run or that a concurrent runner took (exit 1 if any fails)");
  run->add_option("file", file, "matrix TOML (ablations/*.toml)")->required()->check(CLI::ExistingFile);
  run->add_option("--gpus", gpus, "run in parallel, one child per listed GPU (CUDA_VISIBLE_DEVICES), e.g. 0,1; a cell with distributed.nproc = N takes N of them")->delimiter(',');
  run_options.add_to(run);
  run->add_option("--logs", logs, "folder for each child's output (default: matrix-logs/ next to the database)");
  run->add_flag("--dry-run", dry_run, "print what would run; start nothing, write nothing");
  command_table().push_back({run, [&g] {
    const auto m = ablations::load_matrix(file, run_options.overrides());
    const size_t total = m.cells.size() * static_cast<size_t>(m.spec.repeats);
    if (dry_run) {
      // Read-only: an existing store tells what a real run would skip; a missing one is not created.
      std::optional<int64_t> id;
      std::vector<ablations::Slot> pending = ablations::run_order(m);
      if (fs::exists(g.db)) {
        auto store = receipts::Store::open(g.db);
        if ((id = ablations::find_matrix(store, m))) pending = ablations::pending_slots(store, *id, m);
      }
      fmt::print("matrix {} ({}): {} of {} runs to do\n", m.spec.name, id ? fmt::format("id {}", *id) : "new", pending.size(), total);
      for (const auto& slot : pending) {
        std::vector<std::string> args;
        for (const auto& a : ablations::child_args(m, slot, g.db)) args.push_back(shell_quote(a));
        fmt::print("{}ABLATE_MATRIX_CELL={} ABLATE_MATRIX_REPEAT={} ablate {}\n", id ? fmt::format("ABLATE_MATRIX_ID={} ", *id) : "",
                   shell_quote(m.cells[slot.cell].name), slot.repeat, fmt::join(args, " "));
      }
      return kExitOk;
    }
    harness::git_facts();  // a malformed ABLATE_GIT_REVISION would fail every child: refuse it here (exit 2)
    // The children's log folder, made before the store learns of the matrix: a path that cannot be a
    // folder is bad input (exit 2) with nothing written.
    const std::string log_dir = !logs.empty() ? logs : (fs::path(g.db).parent_path() / "matrix-logs").string();
    if (std::error_code ec; !fs::create_directories(log_dir, ec) && !fs::is_directory(log_dir))
      throw std::invalid_argument(fmt::format("matrix run: cannot make the log folder {} ({}): give --logs a folder path "
                                              "you can write, not a file",
                                              log_dir, ec ? ec.message() : "a file is in the way"));
    int64_t id = 0;
    std::vector<ablations::Slot> pending;
    {  // closed before the children start writing
      auto store = receipts::Store::open(g.db);
      id = ablations::find_or_create_matrix(store, m);
      pending = ablations::pending_slots(store, id, m);
    }
    fmt::print("matrix {} (id {}) in {}: {} cells x {} repeats; {} already ok, {} to run{}\n", m.spec.name, id, g.db,
               m.cells.size(), m.spec.repeats, total - pending.size(), pending.size(),
               gpus.empty() ? "" : fmt::format(" on GPUs {}", fmt::join(gpus, ",")));
    std::fflush(stdout);
    ablations::RunnerOptions opt;
    opt.binary = fs::read_symlink("/proc/self/exe").string();
    opt.db = g.db;
    opt.gpus = gpus;
    opt.log_dir = log_dir;
    const auto outcome = ablations::run_slots(m, id, pending, opt);
    fmt::print("matrix {} (id {}): {} ok, {} not ok (failed or killed){}{}\n", m.spec.name, id, outcome.ok, outcome.failed,
               outcome.skipped ? fmt::format(", {} run or running elsewhere (another runner)", outcome.skipped) : "",
               outcome.failed ? fmt::format("; logs in {}; run the same command again to retry them", opt.log_dir) : "");
    return outcome.failed == 0 ? kExitOk : kExitRunFailed;
  }});
}

}  // namespace ablate::cli
