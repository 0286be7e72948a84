// receipts/end_reserve.h: disk space held for the end of a run. A run's last writes (its status, reason
// and summary) must fit even when the disk holding the store fills while it trains, or the run would
// stay `running` until it reads `abandoned`, its reason lost. The run's owner holds kEndReserveBytes of
// disk blocks past the end of the store's WAL file (fallocate with FALLOC_FL_KEEP_SIZE: the file's size
// and content stay what SQLite wrote; the blocks are the file's, so SQLite's next writes land in them),
// renews them after each write of step rows, and stops the run as soon as they cannot be renewed, while
// what is still held takes its end. Where the filesystem cannot preallocate, nothing is held.
// Tests: tests/receipts/lifecycle_test.cpp (EndReserve*), tests/harness/cli_receipts_test.cpp
// (a disk that fills mid-run; both need root for a small tmpfs).
#pragma once

#include <cstdint>
#include <string>

namespace ablate::receipts {

// Enough for a failed run's end: the status row, a reason, the summary's facts (tens of KB), the last
// step rows, goodput and heartbeats, each a few WAL frames of one page.
inline constexpr std::int64_t kEndReserveBytes = std::int64_t{1} << 20;

class EndReserve {
 public:
  explicit EndReserve(std::string db_path, std::int64_t bytes = kEndReserveBytes);
  // Holds `bytes` past the WAL file's end. False when the disk cannot give them (full, over quota);
  // true when held, when there is no WAL file yet, or when the filesystem cannot preallocate.
  bool renew() const;
  std::int64_t bytes() const { return bytes_; }

 private:
  std::string wal_path_;
  std::int64_t bytes_;
};

}  // namespace ablate::receipts
