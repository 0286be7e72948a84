// harness/world.cpp: see world.h.
#include "harness/world.h"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

namespace ablate::harness {
namespace {

int64_t parse_int(const EnvLookup& getenv, const std::string& name, int64_t lo, int64_t hi) {
  const auto text = getenv(name);
  if (!text) throw WorldEnvError(fmt::format("{} is not set", name));
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw WorldEnvError(fmt::format("{}={:?}: expected an integer in [{}, {}]", name, *text, lo, hi));
  return v;
}

std::optional<std::string> nonempty(const EnvLookup& getenv, const std::string& name) {
  auto v = getenv(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges "03-05" or single numbers.
  const auto comma = [&] {
    int depth = 0;
    for (size_t i = 0; i < nodelist.size(); ++i) {
      if (nodelist[i] == '[') ++depth;
      if (nodelist[i] == ']') --depth;
      if (nodelist[i] == ',' && depth == 0) return i;
    }
    return nodelist.size();
  }();
  const std::string first = nodelist.substr(0, comma);
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  const auto close = first.find(']', open);
  if (close == std::string::npos) throw WorldEnvError(fmt::format("SLURM_JOB_NODELIST={:?}: unbalanced '['", nodelist));
  const std::string inside = first.substr(open + 1, close - open - 1);
  const std::string lowest = inside.substr(0, inside.find_first_of(",-"));
  return first.substr(0, open) + lowest + first.substr(close + 1);
}

std::optional<WorldEnv> read_world_env(const EnvLookup& getenv) {
  WorldEnv w;
  const bool torch_style = getenv("RANK").has_value() || getenv("WORLD_SIZE").has_value();
  const bool slurm = !torch_style && getenv("SLURM_PROCID").has_value() && getenv("SLURM_NTASKS").has_value();
  if (!torch_style && !slurm) return std::nullopt;
  constexpr int64_t kMaxWorld = 1 << 20;
  if (torch_style) {
    w.world_size = parse_int(getenv, "WORLD_SIZE", 1, kMaxWorld);
    w.rank = parse_int(getenv, "RANK", 0, w.world_size - 1);
    w.local_rank = getenv("LOCAL_RANK") ? parse_int(getenv, "LOCAL_RANK", 0, w.world_size - 1) : w.rank;
    w.local_world_size =
        getenv("LOCAL_WORLD_SIZE") ? parse_int(getenv, "LOCAL_WORLD_SIZE", 1, w.world_size) : w.world_size;
    if (getenv("ABLATE_LAUNCH")) {
      w.launcher = "ablate launch";
      w.store_hosted_by_launcher = true;  // bound before the ranks start (harness/cli/launch_command.cpp)
    } else if (getenv("TORCHELASTIC_RUN_ID") || getenv("TORCHELASTIC_RESTART_COUNT")) {
      w.launcher = "torchrun";
      // torchrun's agent hosts a TCPStore on MASTER_PORT and tells its workers so (what
      // torch.distributed's env:// rendezvous reads); keys of one restart attempt stay apart.
      w.store_hosted_by_launcher = getenv("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
      w.store_prefix = fmt::format("ablate/attempt_{}/", getenv("TORCHELASTIC_RESTART_COUNT").value_or("0"));
    } else {
      w.launcher = "env";
    }
    const auto addr = nonempty(getenv, "MASTER_ADDR");
    if (!addr && w.world_size > 1)
      throw WorldEnvError("MASTER_ADDR is not set: the ranks need the rendezvous host (torchrun sets it)");
    if (addr) w.master_addr = *addr;
    if (getenv("MASTER_PORT")) w.master_port = parse_int(getenv, "MASTER_PORT", 1, 65535);
    else if (w.world_size > 1)
      throw WorldEnvError("MASTER_PORT is not set: the ranks need the rendezvous port (torchrun sets it)");
  } else {
    w.launcher = "slurm";
    w.world_size = parse_int(getenv, "SLURM_NTASKS", 1, kMaxWorld);
    w.rank = parse_int(getenv, "SLURM_PROCID", 0, w.world_size - 1);
    w.local_rank = getenv("SLURM_LOCALID") ? parse_int(getenv, "SLURM_LOCALID", 0, w.world_size - 1) : 0;
    w.local_world_size = getenv("SLURM_NTASKS_PER_NODE") && getenv("SLURM_NTASKS_PER_NODE")->find_first_not_of(
                                                                 "0123456789") == std::string::npos
                             ? parse_int(getenv, "SLURM_NTASKS_PER_NODE", 1, w.world_size)
                             : w.world_size;
    if (const auto addr = nonempty(getenv, "MASTER_ADDR")) w.master_addr = *addr;
    else if (const auto nodes = nonempty(getenv, "SLURM_JOB_NODELIST")) w.master_addr = first_slurm_host(*nodes);
    else if (const auto nodes2 = nonempty(getenv, "SLURM_NODELIST")) w.master_addr = first_slurm_host(*nodes2);
    // One port per job so two jobs sharing a node do not meet at the same store.
    if (getenv("MASTER_PORT")) w.master_port = parse_int(getenv, "MASTER_PORT", 1, 65535);
    else if (getenv("SLURM_JOB_ID")) w.master_port = 20000 + parse_int(getenv, "SLURM_JOB_ID", 0, INT64_MAX) % 20000;
    w.store_prefix = fmt::format("ablate/slurm_{}/", getenv("SLURM_JOB_ID").value_or("0"));
  }
  return w;
}

std::optional<WorldEnv> read_world_env() {
  return read_world_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

void check_world_matches(const std::optional<WorldEnv>& world, int64_t nproc, const std::string& spec_path) {
  const int64_t launched = world ? world->world_size : 1;
  if (launched == nproc) return;
  if (!world)
    throw WorldEnvError(fmt::format(
        "distributed.nproc = {} but this process was started alone: launch the ranks with `ablate launch {}` "
        "(one node), `torchrun --no-python --nproc-per-node {} ablate run {}`, or srun -n {}; or set "
        "distributed.nproc = 1",
        nproc, spec_path, nproc, spec_path, nproc));
  throw WorldEnvError(fmt::format("distributed.nproc = {} but {} started {} ranks (WORLD_SIZE): make them agree",
                                  nproc, world->launcher, launched));
}

}  // namespace ablate::harness
