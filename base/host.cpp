// base/host.cpp: see host.h.
#include "base/host.h"

#include <unistd.h>

#include <array>

namespace ablate::base {

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "unknown";
  return name.data();
}

}  // namespace ablate::base
