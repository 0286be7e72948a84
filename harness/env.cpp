// harness/env.cpp: see env.h. Reads /proc and git; never fails a run: a fact that cannot be read is
// recorded as "unknown", so the absence is visible in the receipt. Build flags are recorded without the
// builder's absolute paths (portable_build_flags). The one error is a malformed git
// override (ABLATE_GIT_REVISION / ABLATE_GIT_DIRTY): bad input, refused before the run is opened.
#include "harness/env.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "build_info.h"
#include "base/host.h"
#include "base/sha256.h"

namespace ablate::harness {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// The value after "key<spaces>:" of the first matching line of a /proc file.
std::string proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    auto colon = line.find(':');
    if (colon != std::string::npos) return trim(line.substr(colon + 1));
  }
  return "";
}

std::string or_unknown(std::string s) { return s.empty() ? "unknown" : s; }

// Where the absolute path in a flag argument starts, or npos: at 0 ("/usr/include"), after '=' or ','
// ("--sysroot=/x", "-Wl,-rpath,/x"), or after an option name ("-I/x", "-isystem/x").
size_t path_start(const std::string& arg) {
  const size_t slash = arg.find('/');
  if (slash == 0 || slash == std::string::npos) return slash;
  if (arg[slash - 1] == '=' || arg[slash - 1] == ',') return slash;
  const size_t dashes = arg.rfind("--", 0) == 0 ? 2 : arg[0] == '-' ? 1 : 0;
  if (dashes == 0 || dashes == slash) return std::string::npos;
  for (size_t i = dashes; i < slash; ++i)
    if (!std::isalpha(static_cast<unsigned char>(arg[i])) && arg[i] != '-' && arg[i] != '_') return std::string::npos;
  return slash;
}

// "<tag>/REL" when `path` is `dir` or below it, else "".
std::string under(const std::string& path, const std::string& dir, const char* tag) {
  if (dir.empty() || path.rfind(dir, 0) != 0) return "";
  if (path.size() == dir.size()) return tag;
  if (path[dir.size()] != '/') return "";
  return tag + path.substr(dir.size());
}

constexpr const char* kRevisionEnv = "ABLATE_GIT_REVISION";
constexpr const char* kDirtyEnv = "ABLATE_GIT_DIRTY";

}  // namespace

std::string command_output(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((cmd + " 2>/dev/null").c_str(), "r"), pclose);
  if (!p) return "";
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return trim(out);
}

std::string nvidia_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..."
  std::istringstream ss(line);
  for (std::string w; ss >> w;)
    if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) && w.find('.') != std::string::npos) return w;
  return "";
}

std::string portable_build_flags(const std::string& flags, const std::string& source_dir, const std::string& build_dir) {
  // The more specific folder first: the build folder is usually inside the source tree.
  const bool build_first = build_dir.size() >= source_dir.size();
  std::istringstream in(flags);
  std::string out;
  for (std::string arg; in >> arg;) {
    if (const size_t at = path_start(arg); at != std::string::npos) {
      const std::string path = arg.substr(at);
      std::string portable = build_first ? under(path, build_dir, "<build>") : under(path, source_dir, "<source>");
      if (portable.empty()) portable = build_first ? under(path, source_dir, "<source>") : under(path, build_dir, "<build>");
      if (portable.empty()) portable = "<path sha256:" + base::sha256_hex(path).substr(0, 12) + ">";
      arg = arg.substr(0, at) + portable;
    }
    out += (out.empty() ? "" : " ") + arg;
  }
  return out;
}

GitFacts git_facts() {
  const char* revision = std::getenv(kRevisionEnv);
  const char* dirty = std::getenv(kDirtyEnv);
  if (revision == nullptr) {
    if (dirty != nullptr)
      throw std::invalid_argument(fmt::format("{} is set ('{}') but {} is not: set both (the revision the run's "
                                              "tree is at, and whether it has changes), or neither",
                                              kDirtyEnv, dirty, kRevisionEnv));
    // Read now, not at build time: a rebuild after a commit shows it.
    const std::string git = std::string("git -C '") + ABLATE_SOURCE_DIR_AT_BUILD + "' ";
    GitFacts g{or_unknown(command_output(git + "rev-parse HEAD")), "unknown", "git"};
    if (g.revision != "unknown")
      g.dirty = command_output(git + "status --porcelain --untracked-files=no").empty() ? "false" : "true";
    return g;
  }
  std::string rev = revision;
  const bool hex = std::all_of(rev.begin(), rev.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
  if (!hex || rev.size() < 7 || rev.size() > 40)
    throw std::invalid_argument(fmt::format("{}='{}' is not a git revision: expected 7 to 40 hex digits, the "
                                            "output of `git rev-parse HEAD` where the tree was checked out",
                                            kRevisionEnv, rev));
  std::transform(rev.begin(), rev.end(), rev.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const std::string d = dirty == nullptr ? "unknown" : dirty;
  if (dirty != nullptr && d != "true" && d != "false")
    throw std::invalid_argument(fmt::format("{}='{}': expected true or false (leave it unset when not known)", kDirtyEnv, d));
  return {rev, d, kRevisionEnv};
}

Fingerprint host_fingerprint(int schema_version) {
  Fingerprint f;
  f["host"] = base::host_name();
  utsname u{};
  if (uname(&u) == 0) f["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  f["cpu_model"] = or_unknown(proc_field("/proc/cpuinfo", "model name"));
  f["cpu_cores"] = std::to_string(std::thread::hardware_concurrency());
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");  // "24594520 kB"
  f["memory_bytes"] = mem.empty() ? "unknown" : std::to_string(std::stoull(mem) * 1024);
  f["compiler"] = ABLATE_CXX_COMPILER;
  f["build_type"] = ABLATE_BUILD_TYPE;
  f["build_flags"] = portable_build_flags(ABLATE_BUILD_FLAGS, ABLATE_SOURCE_DIR_AT_BUILD, ABLATE_BINARY_DIR_AT_BUILD);
  f["cuda_arch_list"] = ABLATE_CUDA_ARCHITECTURES;
  f["harness_version"] = ABLATE_VERSION;
  f["schema_version"] = std::to_string(schema_version);
  const GitFacts git = git_facts();
  f["git_revision"] = git.revision;
  f["git_dirty"] = git.dirty;
  f["git_revision_source"] = git.source;
  f["nvidia_driver"] = or_unknown(nvidia_driver_version());
  return f;
}

}  // namespace ablate::harness
