// receipts/end_reserve.cpp: see end_reserve.h.
#include "receipts/end_reserve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ablate::receipts {

EndReserve::EndReserve(std::string db_path, std::int64_t bytes) : wal_path_(std::move(db_path) + "-wal"), bytes_(bytes) {}

bool EndReserve::renew() const {
  const int fd = ::open(wal_path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return true;  // no WAL yet (nothing written since the last connection closed)
  struct stat st {};
  int rc = ::fstat(fd, &st);
  int error = 0;
  if (rc == 0) {
    do {
      rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, st.st_size, bytes_);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) error = errno;
  }
  ::close(fd);
  return error != ENOSPC && error != EDQUOT;
}

}  // namespace ablate::receipts
