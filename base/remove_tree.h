// base/remove_tree.h: recursive delete without std::filesystem::remove_all. The PyPI torch wheel's
// libtorch.so exports its own copies of std::filesystem functions; in a process that loads it,
// remove_all can bind to that copy and crash (seen on both machines; on the GPU machine even from the
// torch-free report/ code, since the `ablate` executable loads LibTorch). So every folder delete in the
// project, tests included, goes through this. It lives in base/, the library every other one links.
// A scratch folder removed on scope exit: base::TempDir (temp_dir.h), built on this.
// Tests: tests/base/remove_tree_test.cpp.
#pragma once
#include <filesystem>

namespace ablate::base {
// Removes `path` and everything below it, not following symlinks. A missing path is fine.
// Throws std::runtime_error naming the first entry that could not be removed.
void remove_tree(const std::filesystem::path& path);
}  // namespace ablate::base
