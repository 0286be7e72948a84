// base/atomic_write.cpp: temp-file-then-rename writes (see atomic_write.h).
// Tests: tests/base/atomic_write_test.cpp (base_tests).
#include "base/atomic_write.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace ablate::base {

namespace fs = std::filesystem;

void write_file_atomically(const std::string& path, const std::string& contents) {
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec))
    throw std::invalid_argument(fmt::format("cannot write {}: it is a folder (give a file path inside it)", path));
  std::string temp = (target.parent_path() / fmt::format(".{}.tmp-XXXXXX", target.filename().string())).string();
  const int fd = mkstemp(temp.data());
  // A missing or read-only folder is a bad output path (exit 2), unlike a write that fails midway.
  if (fd < 0)
    throw std::invalid_argument(fmt::format("cannot write {}: {} (choose another output path)", path, std::strerror(errno)));
  // The output's file system (full, read-only, out of quota) is the caller's environment: bad input.
  auto fail = [&](const char* what) {
    const int error = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    throw std::invalid_argument(fmt::format("cannot write {} ({}): {} (free space or choose another output path)",
                                            path, what, std::strerror(error)));
  };
  for (std::size_t written = 0; written < contents.size();) {
    const ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) fail("chmod");  // mkstemp creates 0600; reports are for sharing
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw std::invalid_argument(fmt::format("cannot write {} (close): {} (free space or choose another output path)",
                                            path, std::strerror(error)));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temp.c_str());
    throw std::invalid_argument(fmt::format("cannot write {} (rename): {} (choose another output path)", path,
                                            std::strerror(error)));
  }
}

void write_files_atomically(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::invalid_argument(
        fmt::format("cannot create the output folder {}: {} (choose another output path)", dir, ec.message()));
  for (const auto& [name, contents] : files) write_file_atomically((fs::path(dir) / name).string(), contents);
}

}  // namespace ablate::base
