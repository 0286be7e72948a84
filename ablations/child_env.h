// ablations/child_env.h: the environment a child process starts with (the matrix runner's `ablate run`
// children, `ablate launch`'s ranks): this process's variables minus the ones the parent sets itself,
// so a child started from inside another run or launch cannot inherit stale coordinates.
// Tests: tests/ablations/child_env_test.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ablate::ablations {

// "KEY=value" entries of `environment` (null-terminated, as `environ`) whose key `replaced` rejects.
std::vector<std::string> environment_without(char** environment, const std::function<bool(const std::string& key)>& replaced);

}  // namespace ablate::ablations
