// harness/env.h: the environment fingerprint of a run (DESIGN.md "Data flow" step 2): host, CPU,
// memory, compiler and build flags, CUDA arch list, git revision and dirty flag, harness and schema
// versions. The device half (GPU model/count, driver, CUDA runtime, LibTorch, NCCL) is added by the
// runner, which links LibTorch; this half needs nothing but the OS.
// Tests: tests/harness/env_test.cpp.
#pragma once
#include <map>
#include <string>

namespace ablate::harness {

using Fingerprint = std::map<std::string, std::string>;

// Host facts and build facts. `schema_version` is the receipt store's.
Fingerprint host_fingerprint(int schema_version);

// Runs a command and returns its stdout with trailing whitespace trimmed ("" on failure).
std::string command_output(const std::string& cmd);

// NVIDIA driver version from /proc/driver/nvidia/version ("" when absent).
std::string nvidia_driver_version();

}  // namespace ablate::harness
