// tests/small_disk.h: a small tmpfs mounted at a folder for a test that needs a disk to fill, unmounted
// when it goes. Mounting needs root and a kernel that allows it: ready() says whether it is there, and
// why_not() what to give GTEST_SKIP.
#pragma once
#include <filesystem>
#include <string>

#include "tests/cli_runner.h"

namespace ablate::testing {

class SmallDisk {
 public:
  SmallDisk(const std::string& folder, int size_kb) : folder_(folder) {
    std::filesystem::create_directories(folder_);
    if (::geteuid() != 0) {
      why_not_ = "mounting a small tmpfs needs root";
    } else if (run_shell("mount -t tmpfs -o size=" + std::to_string(size_kb) + "k tmpfs " + folder_).rc != 0) {
      why_not_ = "cannot mount a tmpfs here";
    }
  }
  ~SmallDisk() {
    if (ready()) run_shell("umount " + folder_);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool ready() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }
  // Fills what is left with one file (dd fails once the disk is full, as it should); empty() frees it.
  void fill() const { run_shell("dd if=/dev/zero of=" + folder_ + "/fill bs=4k"); }
  void empty() const { std::filesystem::remove(folder_ + "/fill"); }

 private:
  std::string folder_;
  std::string why_not_;
};

}  // namespace ablate::testing
