// base/host.h: this machine's host name, as receipts, run records and rank registrations name it.
#pragma once

#include <string>

namespace ablate::base {

// gethostname(), or "unknown" when it fails or is empty.
std::string host_name();

}  // namespace ablate::base
