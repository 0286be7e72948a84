// ablations/child_env.cpp: see child_env.h.
#include "ablations/child_env.h"

namespace ablate::ablations {

std::vector<std::string> environment_without(char** environment,
                                             const std::function<bool(const std::string& key)>& replaced) {
  std::vector<std::string> kept;
  for (char** e = environment; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (!replaced(kv.substr(0, kv.find('=')))) kept.push_back(kv);
  }
  return kept;
}

}  // namespace ablate::ablations
