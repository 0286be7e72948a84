// base/atomic_write.h: writing report, export and other output files so a reader never sees half of one: each file
// is written to a temporary name in the same folder, flushed, then renamed over its final name (rename
// within a filesystem is atomic). Everything is rendered in memory before the first file is written, so
// an error in the data leaves no output at all.
// Tests: tests/base/atomic_write_test.cpp (base_tests); its use in tests/report/export_test.cpp.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ablate::base {

// Writes `contents` to `path` via a temporary sibling and a rename. Throws std::invalid_argument (the
// output's environment: exit 2) when `path` is a folder, its folder is missing or not writable, or the
// write fails midway (a full disk); always with the path and the OS error, and nothing left behind.
void write_file_atomically(const std::string& path, const std::string& contents);

// Creates `dir` (and its parents) if missing, then writes each (file name, contents) into it atomically.
void write_files_atomically(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace ablate::base
