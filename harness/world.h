// harness/world.h: where this process sits in a multi-process job, read from the launcher's
// environment (plain C++, no LibTorch): torchrun and `ablate launch` set RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT; SLURM's srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (and the job's
// node list, whose first host is the rendezvous host when MASTER_ADDR is not given). A job that is
// half-described (RANK without WORLD_SIZE, a rank outside the world, a port that is not a port) is an
// error that says which variable is wrong; nothing is guessed.
// Tests: tests/harness/world_test.cpp (harness_tests).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace ablate::harness {

struct WorldEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  std::string launcher;  // "torchrun" | "ablate launch" | "slurm" | "" (a single process)
  // The rendezvous store is hosted by the launcher (`ablate launch`, or torchrun's agent store when it
  // says so): every rank connects to it as a client. Otherwise rank 0 hosts it.
  bool store_hosted_by_launcher = false;
  std::string store_prefix = "ablate/";  // keys of this attempt (torchrun restarts get their own)
};

struct WorldEnvError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Reads the environment through `getenv` (tests pass their own). nullopt: no launcher variables at all
// (a single process). Throws WorldEnvError for a malformed or inconsistent description.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<WorldEnv> read_world_env(const EnvLookup& getenv);
std::optional<WorldEnv> read_world_env();  // the process environment

// The first host of a SLURM node list: "gpu[03-05,07],cpu1" -> "gpu03", "node7" -> "node7".
std::string first_slurm_host(const std::string& nodelist);

// The job's world against distributed.nproc of the experiment: nproc 1 and no launcher is a single
// process; nproc N needs a launcher that started exactly N ranks. Throws WorldEnvError with the command
// that would launch it right.
void check_world_matches(const std::optional<WorldEnv>& world, int64_t nproc, const std::string& spec_path);

}  // namespace ablate::harness
