// harness/cli/launch_command.cpp: `ablate launch [--nproc N] FILE [--set k=v]... [-q] [--no-profile]`:
// one data-parallel job on this node without torchrun. Starts N `ablate run FILE` ranks with the
// variables torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) and watches them:
//   - a rank that exits non-zero or dies by a signal ends the job: the others get `grace` seconds to
//     fail on their own (rank 0 then records the failure, naming the ranks behind), then SIGTERM, then
//     SIGKILL; no rank outlives the launcher (each dies with it: PR_SET_PDEATHSIG);
//   - a rank that hangs is caught by the collectives' timeout (distributed.timeout_s) in the others;
//   - when rank 0 died before closing its run, the launcher records it `failed` with the rank and how
//     it died; when the run was closed, the launcher's account is added as an annotation.
// Exit: 0 when every rank exited 0; 2 when the first rank to fail exited 2 (bad input); else 1.
// Tests: tests/harness/distributed_test.cpp.
#ifdef ABLATE_WITH_TORCH
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ablations/child_env.h"
#include "harness/cli/commands.h"
#include "harness/env.h"
#include "harness/train/device.h"
#include "receipts/store.h"
#include "spec/spec.h"

extern char** environ;

namespace ablate::cli {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_forward_signal = 0;
void on_termination_signal(int sig) { g_forward_signal = sig; }

// The job's rendezvous store, hosted by the launcher for the job's life (as torchrun's agent hosts
// its own): bound before any rank starts, on `port` or (0) on one the kernel picks as it binds, so no
// other process can take the port between its choice and its use, and still up for a rank that reads
// it after another rank ended. The ranks connect to it as clients.
c10::intrusive_ptr<c10d::TCPStore> host_rendezvous_store(int port) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;  // the ranks, not this process, wait for each other (ProcessGroup's rendezvous)
  std::string why;
  try {
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();  // c10's what() carries its C++ stack
  } catch (const std::exception& e) {
    why = e.what();
  }
  why = why.substr(0, why.find('\n'));
  throw std::invalid_argument(port > 0 ? fmt::format("the launcher cannot host the rendezvous store on port {} ({}): "
                                                     "give another --port, or leave it out for one the kernel picks",
                                                     port, why)
                                       : fmt::format("the launcher cannot host the rendezvous store ({})", why));
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

pid_t start_rank(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("launch: fork(): {}", std::strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls until exec. The rank dies with the launcher, starts with the default
    // signal mask (ablate run blocks what it handles itself), and is its own process group.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher is already gone
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);
    ::execve("/proc/self/exe", argv.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: a signal sent before the child's own setpgid must reach it
  return pid;
}

// CUDA's hardware work queues a rank's context gets (kCudaConnectionsEnv) unless the user set them.
constexpr int kRankCudaConnections = 16;

// The launcher's own variables and any a surrounding launcher left, replaced by this job's.
std::vector<std::string> rank_env(int64_t rank, int64_t nproc, int port, const std::string& run_id_file) {
  static const char* kOwned[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "GROUP_RANK", "ROLE_RANK", "ABLATE_LAUNCH", "ABLATE_LAUNCH_RUN_ID_FILE"};
  auto env = ablations::environment_without(environ, [](const std::string& key) {
    bool owned = key.rfind("TORCHELASTIC_", 0) == 0 || key.rfind("SLURM_", 0) == 0;
    for (const char* k : kOwned) owned = owned || key == k;
    return owned;
  });
  env.push_back(fmt::format("RANK={}", rank));
  env.push_back(fmt::format("WORLD_SIZE={}", nproc));
  env.push_back(fmt::format("LOCAL_RANK={}", rank));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(fmt::format("MASTER_PORT={}", port));
  env.push_back("ABLATE_LAUNCH=1");
  env.push_back("ABLATE_LAUNCH_RUN_ID_FILE=" + run_id_file);
  // Each rank's intra-op thread pool sized to its share of the cores (as torchrun does), unless the
  // user set it: N full pools on the same cores run far slower than N shares (the receipt records it).
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
    env.push_back(fmt::format("OMP_NUM_THREADS={}", std::max<int64_t>(1, cores / std::max<int64_t>(1, nproc))));
  }
  // The hardware work queues a rank's CUDA context spreads its streams over, unless the user set it:
  // a captured data-parallel step replays each parameter all-gather on a stream of its own, and with the
  // driver's default 8 queues compute kernels wait behind gathers that share theirs (16: 0.9906x the
  // step at 4 x H200, ZeRO-1; experiments/results/2026-11-28-h200x4-bf16-reduce/). The receipt records it.
  if (std::getenv(harness::kCudaConnectionsEnv) == nullptr)
    env.push_back(fmt::format("{}={}", harness::kCudaConnectionsEnv, kRankCudaConnections));
  return env;
}

std::optional<int64_t> read_run_id(const std::string& path) {
  std::ifstream in(path);
  int64_t id = 0;
  if (in >> id && id > 0) return id;
  return std::nullopt;
}

// Rank 0's run, when it exists: closed `failed` if rank 0 never closed it, else annotated.
void settle_run(const std::string& db, std::optional<int64_t> run_id, const std::string& account) {
  if (!run_id) return;
  try {
    auto store = receipts::Store::open(db);
    if (store.get_run(*run_id).stored_status == receipts::RunStatus::running) {
      store.finish_run(*run_id, receipts::RunStatus::failed, account, {});
      fmt::print(stderr, "ablate launch: run {} failed: {}\n", *run_id, account);
    } else {
      store.annotate(*run_id, "ablate launch: " + account);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "ablate launch: could not record the job's end in run {}: {}\n", *run_id, e.what());
  }
}

}  // namespace

void register_launch(CLI::App& app, Globals& g) {
  auto* cmd = app.add_subcommand(kLaunchCommand.name, kLaunchCommand.about);
  static std::string file;
  static std::vector<std::string> overrides;
  static int64_t nproc = 0;
  static int port = 0;
  static double grace_s = 10;
  static bool quiet = false, no_profile = false;
  cmd->add_option("file", file, "experiment TOML")->required()->check(CLI::ExistingFile);
  cmd->add_option("--nproc", nproc, "ranks (default: the file's distributed.nproc); sets distributed.nproc")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--port", port, "rendezvous port on 127.0.0.1 (default: one the kernel picks)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--grace", grace_s, "seconds the other ranks get to fail on their own after one died")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--set", overrides, "override section.key=value (repeatable)");
  cmd->add_flag("-q,--quiet", quiet, "no progress lines");
  cmd->add_flag("--no-profile", no_profile, "as `ablate run --no-profile`");
  command_table().push_back({cmd, [&g] {
    auto sets = overrides;
    if (nproc > 0) sets.push_back(fmt::format("distributed.nproc={}", nproc));
    // Bad input is exit 2 here, before any rank starts.
    auto spec = spec::parse_spec_file(file, sets);
    const int64_t world = spec.distributed.nproc;
    // A CPU job whose file leaves distributed.backend to the launcher gets gloo (NCCL needs GPUs); a
    // stated backend is never changed (nccl on the CPU stays an error). The choice is a --set, so the
    // receipt's identity and overrides say it.
    const bool on_cpu = spec.train.device == "cpu" || (spec.train.device == "auto" && !harness::live_device_info().cuda);
    if (world > 1 && on_cpu && !spec.given("distributed.backend")) {
      sets.push_back("distributed.backend=\"gloo\"");
      spec = spec::parse_spec_file(file, sets);
      fmt::print(stderr, "ablate launch: {} ranks on the CPU and {} sets no distributed.backend: they use gloo (added "
                         "as --set distributed.backend=\"gloo\")\n",
                 world, file);
    }
    const auto store = host_rendezvous_store(port);
    const int rendezvous = store->getPort();
    const fs::path run_id_file =
        fs::temp_directory_path() / fmt::format("ablate-launch-{}-{}.runid", ::getpid(), rendezvous);
    std::vector<std::string> args{"ablate", "--db", g.db, "run", file};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    if (quiet) args.push_back("--quiet");
    if (no_profile) args.push_back("--no-profile");

    struct sigaction sa {};
    sa.sa_handler = on_termination_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    sigset_t handled;
    sigemptyset(&handled);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGTERM);
    ::sigprocmask(SIG_UNBLOCK, &handled, nullptr);

    std::vector<Rank> ranks(static_cast<size_t>(world));
    for (int64_t r = 0; r < world; ++r) {
      ranks[r].pid = start_rank(args, rank_env(r, world, rendezvous, run_id_file.string()));
      ranks[r].running = true;
    }
    if (!quiet)
      fmt::print("ablate launch: {} ranks of {} on 127.0.0.1:{} (pids {})\n", world, file, rendezvous,
                 fmt::join([&] {
                   std::vector<pid_t> p;
                   for (const auto& r : ranks) p.push_back(r.pid);
                   return p;
                 }(), " "));
    std::fflush(stdout);

    std::string account;       // the first rank to fail, and how
    int first_failure_code = 0;
    std::optional<Clock::time_point> term_at, kill_at;
    bool settled = false;
    auto alive = [&] {
      int n = 0;
      for (const auto& r : ranks) n += r.running;
      return n;
    };
    auto signal_all = [&](int sig) {
      for (const auto& r : ranks)
        if (r.running) ::kill(-r.pid, sig);
    };
    while (alive() > 0) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        for (size_t r = 0; r < ranks.size(); ++r) {
          if (ranks[r].pid != pid) continue;
          ranks[r].running = false;
          ranks[r].status = status;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && account.empty()) {
            account = fmt::format("rank {} (pid {}) {}", r, pid, describe_exit(status));
            first_failure_code = WIFEXITED(status) && WEXITSTATUS(status) == kExitBadInput ? kExitBadInput : kExitRunFailed;
            term_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
            if (!quiet) fmt::print(stderr, "ablate launch: {}; ending the job\n", account);
          }
        }
        continue;
      }
      if (g_forward_signal && account.empty()) {
        account = fmt::format("the launcher got {}", ::strsignal(g_forward_signal));
        first_failure_code = kExitRunFailed;
        signal_all(g_forward_signal);  // ranks record `killed` themselves
        kill_at = Clock::now() + std::chrono::seconds(10);
      }
      const auto now = Clock::now();
      if (term_at && now >= *term_at && !kill_at) {
        // Closed `failed` with the account before SIGTERM, which rank 0 would record as `killed`.
        settle_run(g.db, read_run_id(run_id_file.string()), account);
        settled = true;
        signal_all(SIGTERM);
        kill_at = now + std::chrono::seconds(5);
      }
      if (kill_at && now >= *kill_at) signal_all(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const auto run_id = read_run_id(run_id_file.string());
    std::error_code ec;
    fs::remove(run_id_file, ec);
    if (!account.empty()) {
      if (!settled) settle_run(g.db, run_id, account);
      return first_failure_code;
    }
    return kExitOk;
  }});
}

}  // namespace ablate::cli
#endif  // ABLATE_WITH_TORCH
