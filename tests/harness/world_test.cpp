// tests/harness/world_test.cpp: reading a rank's place in the job from torchrun, SLURM and `ablate
// launch` variables (harness/world.h); malformed or inconsistent variables are errors naming the
// variable; distributed.nproc must match the launcher's world.
#include "harness/world.h"

#include <gtest/gtest.h>

#include <map>

using namespace ablate::harness;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    const auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

std::string error_of(std::map<std::string, std::string> vars) {
  try {
    read_world_env(env_of(std::move(vars)));
  } catch (const WorldEnvError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(WorldEnv, NoLauncherVariablesIsASingleProcess) { EXPECT_FALSE(read_world_env(env_of({{"HOME", "/root"}}))); }

TEST(WorldEnv, TorchrunVariablesWithItsAgentStore) {
  const auto w = read_world_env(env_of({{"RANK", "3"},
                                        {"WORLD_SIZE", "4"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "node7"},
                                        {"MASTER_PORT", "29400"},
                                        {"TORCHELASTIC_RUN_ID", "abc"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->rank, 3);
  EXPECT_EQ(w->world_size, 4);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 2);
  EXPECT_EQ(w->master_addr, "node7");
  EXPECT_EQ(w->master_port, 29400);
  EXPECT_EQ(w->launcher, "torchrun");
  EXPECT_TRUE(w->store_hosted_by_launcher);
  EXPECT_EQ(w->store_prefix, "ablate/attempt_2/");
}

TEST(WorldEnv, AblateLaunchHostsTheStore) {
  const auto w = read_world_env(env_of({{"RANK", "0"},
                                        {"WORLD_SIZE", "2"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", "40001"},
                                        {"ABLATE_LAUNCH", "1"}}));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->launcher, "ablate launch");
  EXPECT_TRUE(w->store_hosted_by_launcher);
  EXPECT_EQ(w->local_rank, 0);  // defaults to RANK
}

TEST(WorldEnv, SlurmVariablesAndTheFirstHostOfTheNodeList) {
  const auto w = read_world_env(env_of({{"SLURM_PROCID", "5"},
                                        {"SLURM_NTASKS", "8"},
                                        {"SLURM_LOCALID", "1"},
                                        {"SLURM_NTASKS_PER_NODE", "4"},
                                        {"SLURM_JOB_NODELIST", "gpu[03-04,07],cpu1"},
                                        {"SLURM_JOB_ID", "123456"}}));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->launcher, "slurm");
  EXPECT_EQ(w->rank, 5);
  EXPECT_EQ(w->world_size, 8);
  EXPECT_EQ(w->local_rank, 1);
  EXPECT_EQ(w->local_world_size, 4);
  EXPECT_EQ(w->master_addr, "gpu03");
  EXPECT_EQ(w->master_port, 20000 + 123456 % 20000);
  EXPECT_EQ(first_slurm_host("node7"), "node7");
  EXPECT_EQ(first_slurm_host("a[9]-ib,b1"), "a9-ib");
}

TEST(WorldEnv, MalformedVariablesNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).find(
                "RANK=\"2\": expected an integer in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK=\"x\""), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}).find(
                "MASTER_PORT=\"70000\""),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_NODELIST", "gpu[03"}}).find("unbalanced"),
            std::string::npos);
}

TEST(WorldEnv, NprocMustMatchTheLaunchedWorld) {
  EXPECT_NO_THROW(check_world_matches(std::nullopt, 1, "x.toml"));
  try {
    check_world_matches(std::nullopt, 2, "x.toml");
    FAIL() << "nproc 2 in a single process was accepted";
  } catch (const WorldEnvError& e) {
    EXPECT_NE(std::string(e.what()).find("ablate launch x.toml"), std::string::npos) << e.what();
  }
  WorldEnv w;
  w.world_size = 4;
  w.launcher = "torchrun";
  EXPECT_NO_THROW(check_world_matches(w, 4, "x.toml"));
  EXPECT_THROW(check_world_matches(w, 2, "x.toml"), WorldEnvError);
}
