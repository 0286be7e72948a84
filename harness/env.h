// harness/env.h: the environment fingerprint of a run (docs/architecture.md "One run" step 2): host, CPU,
// memory, compiler and build flags, CUDA arch list, git revision and dirty flag, harness and schema
// versions. The device half (GPU model/count, driver, CUDA runtime, LibTorch, NCCL) is added by the
// runner, which links LibTorch; this half needs nothing but the OS.
// Tests: tests/harness/env_test.cpp, `ablate run` with the git override in tests/harness/cli_test.cpp.
#pragma once
#include <map>
#include <string>

namespace ablate::harness {

using Fingerprint = std::map<std::string, std::string>;

// CUDA's hardware work queues a context spreads its streams over (read when the context is created; the
// driver's default is 8): `ablate launch` sets it for its ranks, a CUDA run records it (run_env
// cuda_device_max_connections).
inline constexpr const char* kCudaConnectionsEnv = "CUDA_DEVICE_MAX_CONNECTIONS";

// The git facts a receipt records (run_env git_revision, git_dirty, git_revision_source).
struct GitFacts {
  std::string revision;  // full or abbreviated hex revision, or "unknown"
  std::string dirty;     // "true", "false" or "unknown"
  std::string source;    // "ABLATE_GIT_REVISION" or "git"
};

// When ABLATE_GIT_REVISION is set (7 to 40 hex digits, recorded in lower case; give all 40: comparisons
// match git_revision as text, and git's own is the full one): that revision, dirty from
// ABLATE_GIT_DIRTY ("true" or "false"; unset: "unknown"), source "ABLATE_GIT_REVISION". For a machine
// whose checkout's .git is stale (the GPU machine gets a copy of the working tree): the caller, where
// git works, passes what it sees. Otherwise `git rev-parse HEAD` and `git status` in the source tree
// this binary was built from, now, source "git" (revision "unknown" where git cannot answer).
// Throws std::invalid_argument for an ABLATE_GIT_REVISION that is set but not 7-40 hex digits, an
// ABLATE_GIT_DIRTY other than true/false, or ABLATE_GIT_DIRTY without ABLATE_GIT_REVISION.
GitFacts git_facts();

// The compiler flags as a receipt records them (run_env build_flags): every absolute path made
// portable, so a receipt does not carry the builder's directory layout and two clones at different
// paths record the same flags. A path inside `build_dir` becomes "<build>/REL", inside `source_dir`
// "<source>/REL" (relative, since the tree's own layout is the same in every clone); any other
// absolute path becomes "<path sha256:HHHHHHHHHHHH>" (the first 12 hex digits of the sha256 of the
// path: the same dependency folder still compares equal across runs, its location is not recorded).
// A path is an argument that starts with '/', or the part of one after '=' or ',' or after an
// option name ("-I/x", "-isystem /x", "-Wl,-rpath,/x", "--sysroot=/x").
std::string portable_build_flags(const std::string& flags, const std::string& source_dir, const std::string& build_dir);

// Host facts and build facts. `schema_version` is the receipt store's. Throws as git_facts().
Fingerprint host_fingerprint(int schema_version);

// Runs a command and returns its stdout with trailing whitespace trimmed ("" on failure).
std::string command_output(const std::string& cmd);

// NVIDIA driver version from /proc/driver/nvidia/version ("" when absent).
std::string nvidia_driver_version();

}  // namespace ablate::harness
