// base/temp_dir.cpp: see temp_dir.h.
#include "base/temp_dir.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "base/remove_tree.h"

namespace ablate::base {

namespace {

std::filesystem::path make_temp_dir(const std::string& parent, std::string_view prefix) {
  const std::string pattern = fmt::format("{}/{}-XXXXXX", parent, prefix);
  std::string name = pattern;  // mkdtemp fills in the Xs, even when it fails
  if (::mkdtemp(name.data()) == nullptr) {
    const int error = errno;
    throw std::runtime_error(fmt::format("cannot create a temporary folder {}: {}", pattern, std::strerror(error)));
  }
  return name;
}

}  // namespace

TempDir::TempDir(std::string_view prefix) {
  const char* tmp = std::getenv("TMPDIR");
  path_ = make_temp_dir(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", prefix);
}

TempDir::TempDir(std::string_view prefix, const std::filesystem::path& parent)
    : path_(make_temp_dir(parent.empty() ? "." : parent.string(), prefix)) {}

TempDir::~TempDir() { remove(); }

TempDir::TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

void TempDir::remove() noexcept {
  if (path_.empty()) return;
  // Best effort (a destructor must not throw): a leftover temp folder is not an error.
  try {
    remove_tree(path_);
  } catch (const std::exception&) {
  }
  path_.clear();
}

}  // namespace ablate::base
