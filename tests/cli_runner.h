// tests/cli_runner.h: runs the built `ablate` binary (or any shell command) the way a user would and
// returns its exit code and output. Shared by the CLI tests of every folder.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace ablate::testing {

struct CliResult {
  int rc;
  std::string out;  // stdout and stderr together
};

inline CliResult run_shell(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// `ablate ARGS` from this build.
inline CliResult run_cli(const std::string& args) { return run_shell(std::string(ABLATE_BINARY_DIR) + "/ablate " + args); }

}  // namespace ablate::testing
