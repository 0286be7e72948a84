// tests/ablations/child_env_test.cpp: environment_without (ablations/child_env.h), the environment the
// matrix runner's children and `ablate launch`'s ranks start with.
#include "ablations/child_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ablate::ablations {
namespace {

using ::testing::ElementsAre;

// A null-terminated array of C strings, as `environ` is.
struct FakeEnvironment {
  explicit FakeEnvironment(std::vector<std::string> entries) : strings(std::move(entries)) {
    for (auto& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

TEST(ChildEnvironment, DropsTheReplacedKeysAndKeepsTheRestInOrder) {
  FakeEnvironment env({"PATH=/usr/bin", "RANK=3", "HOME=/root", "MASTER_PORT=29500", "RANKING=kept"});
  const auto kept = environment_without(env.pointers.data(), [](const std::string& key) {
    return key == "RANK" || key == "MASTER_PORT";
  });
  // The key is what precedes the first '=': RANKING is not RANK.
  EXPECT_THAT(kept, ElementsAre("PATH=/usr/bin", "HOME=/root", "RANKING=kept"));
}

TEST(ChildEnvironment, MatchesOnTheWholeKeyAndToleratesOddEntries) {
  // A value holding '=', an entry without one (its key is the whole entry), an empty environment.
  FakeEnvironment env({"OPTS=a=b", "BARE", "SLURM_JOB_ID=7"});
  const auto kept = environment_without(env.pointers.data(), [](const std::string& key) {
    return key.rfind("SLURM_", 0) == 0 || key == "BARE";
  });
  EXPECT_THAT(kept, ElementsAre("OPTS=a=b"));
  FakeEnvironment empty({});
  EXPECT_TRUE(environment_without(empty.pointers.data(), [](const std::string&) { return false; }).empty());
  EXPECT_TRUE(environment_without(nullptr, [](const std::string&) { return false; }).empty());
}

}  // namespace
}  // namespace ablate::ablations
