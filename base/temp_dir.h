// base/temp_dir.h: a scratch folder that lives as long as its owner (the project's one mkdtemp).
// It is removed with base::remove_tree, never std::filesystem::remove_all (see remove_tree.h).
// Used by the tests of every folder, the benchmarks, report/plots.cpp (gnuplot's scratch space) and
// report/site.cpp (a site built beside its destination).
// Tests: tests/base/temp_dir_test.cpp.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

namespace ablate::base {

// Creates $TMPDIR/<prefix>-XXXXXX (/tmp when TMPDIR is unset or empty) with mkdtemp (mode 0700) and
// removes it with everything below it on destruction. Non-copyable; movable (a moved-from TempDir owns
// nothing and removes nothing). Throws std::runtime_error naming the folder and the errno text when
// the folder cannot be created.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "ablate");
  // The same inside `parent` instead of $TMPDIR: a folder that is renamed into place when complete
  // must be on the destination's filesystem (`ablate site` builds its site this way).
  TempDir(std::string_view prefix, const std::filesystem::path& parent);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  // The path of `name` inside the folder as a string, for APIs that take one (Store::open, ...).
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  void remove() noexcept;
  std::filesystem::path path_;
};

}  // namespace ablate::base
