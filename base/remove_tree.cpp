// base/remove_tree.cpp: see remove_tree.h. nftw visits children before their folder (FTW_DEPTH)
// and never follows symlinks (FTW_PHYS), so a link to elsewhere is removed, not its target.
#include "base/remove_tree.h"

#include <ftw.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ablate::base {
namespace {
thread_local std::string failed_entry;

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = type == FTW_DP ? ::rmdir(path) : ::unlink(path);
  if (rc != 0) {
    failed_entry = std::string(path) + ": " + std::strerror(errno);
    return 1;
  }
  return 0;
}
}  // namespace

void remove_tree(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there
  failed_entry.clear();
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw std::runtime_error("cannot remove " + (failed_entry.empty() ? path.string() : failed_entry));
}

}  // namespace ablate::base
