// tests/base/remove_tree_test.cpp: remove_tree deletes nested trees, removes links without
// following them, and accepts a missing path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "base/remove_tree.h"

namespace fs = std::filesystem;

TEST(RemoveTree, NestedTreeWithALinkOutside) {
  const fs::path root = fs::temp_directory_path() / ("ablate-rmtree-" + std::to_string(::getpid()));
  const fs::path keep = root.string() + "-keep";
  fs::create_directories(root / "a/b/c");
  fs::create_directories(keep);
  std::ofstream(root / "a/b/c/file") << "x";
  std::ofstream(root / "a/top") << "y";
  std::ofstream(keep / "precious") << "z";
  fs::create_directory_symlink(keep, root / "a/link");
  ablate::base::remove_tree(root);
  EXPECT_FALSE(fs::exists(root));
  EXPECT_TRUE(fs::exists(keep / "precious")) << "the link was followed";
  ablate::base::remove_tree(keep);
  EXPECT_FALSE(fs::exists(keep));
  EXPECT_NO_THROW(ablate::base::remove_tree(root));  // missing: nothing to do
}
