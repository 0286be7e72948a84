// tests/harness/env_test.cpp: the host half of the environment fingerprint (harness/env.h): the git facts
// come from git in the source tree, or from ABLATE_GIT_REVISION / ABLATE_GIT_DIRTY when the caller sets
// them (receipts made on a machine whose checkout is stale); a malformed override is refused. build_flags
// carry no absolute path of the builder (portable_build_flags).
// Run: harness_tests --gtest_filter='Env*'
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>

#include "harness/env.h"
#include "tests/receipts/test_util.h"

namespace {

using ablate::harness::git_facts;
using ablate::harness::host_fingerprint;
using ablate::harness::portable_build_flags;
using ablate::receipts::testing::ScopedEnv;
using ::testing::HasSubstr;

// The message of the std::invalid_argument that git_facts() throws ("" when it does not throw).
std::string refusal() {
  try {
    git_facts();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Env, GitFactsComeFromGitWithoutTheOverride) {
  ScopedEnv rev("ABLATE_GIT_REVISION", std::nullopt), dirty("ABLATE_GIT_DIRTY", std::nullopt);
  const auto f = host_fingerprint(3);
  EXPECT_EQ(f.at("git_revision_source"), "git");
  if (f.at("git_revision") == "unknown") {  // a source tree without git
    EXPECT_EQ(f.at("git_dirty"), "unknown");
  } else {
    EXPECT_EQ(f.at("git_revision").size(), 40u) << f.at("git_revision");
    EXPECT_THAT(f.at("git_dirty"), ::testing::AnyOf("true", "false"));
  }
  EXPECT_EQ(f.at("schema_version"), "3");
}

TEST(Env, AValidOverrideIsRecordedWithItsSource) {
  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  {
    ScopedEnv rev("ABLATE_GIT_REVISION", sha), dirty("ABLATE_GIT_DIRTY", "false");
    const auto f = host_fingerprint(3);
    EXPECT_EQ(f.at("git_revision"), sha);
    EXPECT_EQ(f.at("git_dirty"), "false");
    EXPECT_EQ(f.at("git_revision_source"), "ABLATE_GIT_REVISION");
  }
  {  // abbreviated, upper case: recorded in lower case, as git prints it; dirty unknown when unset
    ScopedEnv rev("ABLATE_GIT_REVISION", "ABCDEF1"), dirty("ABLATE_GIT_DIRTY", std::nullopt);
    const auto g = git_facts();
    EXPECT_EQ(g.revision, "abcdef1");
    EXPECT_EQ(g.dirty, "unknown");
    EXPECT_EQ(g.source, "ABLATE_GIT_REVISION");
  }
  {
    ScopedEnv rev("ABLATE_GIT_REVISION", sha), dirty("ABLATE_GIT_DIRTY", "true");
    EXPECT_EQ(git_facts().dirty, "true");
  }
}

TEST(Env, AMalformedOverrideIsRefusedWithTheVariableAndTheValue) {
  ScopedEnv dirty("ABLATE_GIT_DIRTY", std::nullopt);
  for (const char* bad : {"", "main", "abc123", "0123456789abcdef0123456789abcdef012345678", "g123456", "HEAD~1",
                          "0123456 "}) {
    ScopedEnv rev("ABLATE_GIT_REVISION", bad);
    const std::string why = refusal();
    EXPECT_THAT(why, HasSubstr(std::string("ABLATE_GIT_REVISION='") + bad + "' is not a git revision")) << bad;
    EXPECT_THAT(why, HasSubstr("7 to 40 hex digits")) << bad;
    EXPECT_THROW(host_fingerprint(3), std::invalid_argument) << bad;
  }
  {
    ScopedEnv rev("ABLATE_GIT_REVISION", "0123456"), bad_dirty("ABLATE_GIT_DIRTY", "yes");
    EXPECT_THAT(refusal(), HasSubstr("ABLATE_GIT_DIRTY='yes': expected true or false"));
  }
  {  // a dirty flag without its revision would be silently dropped: refused
    ScopedEnv rev("ABLATE_GIT_REVISION", std::nullopt), lone_dirty("ABLATE_GIT_DIRTY", "false");
    EXPECT_THAT(refusal(), HasSubstr("ABLATE_GIT_DIRTY is set ('false') but ABLATE_GIT_REVISION is not"));
  }
}

// The GPU machine's build (scripts/gpu-check.sh) passes -isystem <checkout>/.gpu-deps/include: the
// receipt records where inside the tree, not where the tree was.
TEST(Env, BuildFlagsRecordPathsRelativeToTheTreeOrAsAHash) {
  const std::string src = "/work/main", build = "/work/main/build-gpu";
  EXPECT_EQ(portable_build_flags(" -isystem /work/main/.gpu-deps/include -O3 -DNDEBUG", src, build),
            "-isystem <source>/.gpu-deps/include -O3 -DNDEBUG");
  EXPECT_EQ(portable_build_flags("-I/work/main/build-gpu/generated -I/work/main", src, build),
            "-I<build>/generated -I<source>");
  // Outside both trees: a hash of the path, the same for the same path, different for another.
  const std::string a = portable_build_flags("-isystem /opt/deps/include --sysroot=/opt/sysroot", src, build);
  EXPECT_THAT(a, ::testing::MatchesRegex("-isystem <path sha256:[0-9a-f]{12}> --sysroot=<path sha256:[0-9a-f]{12}>"));
  EXPECT_EQ(a, portable_build_flags("-isystem /opt/deps/include --sysroot=/opt/sysroot", src, build));
  EXPECT_NE(a.substr(0, 35), portable_build_flags("-isystem /opt/other/include", src, build).substr(0, 35));
  // A folder that only shares a prefix with the tree is not inside it; values that are not paths stay.
  EXPECT_THAT(portable_build_flags("-I/work/main2/include", src, build), ::testing::HasSubstr("<path sha256:"));
  EXPECT_EQ(portable_build_flags("-DRATIO=1/2 -O2 -march=native", src, build), "-DRATIO=1/2 -O2 -march=native");
  EXPECT_EQ(portable_build_flags("-Wl,-rpath,/work/main/build-gpu/lib", src, build), "-Wl,-rpath,<build>/lib");
}

// What this binary records: no absolute path of its source or build folder, no absolute path at all.
TEST(Env, RecordedBuildFlagsHoldNoAbsolutePathOfThisBuild) {
  ScopedEnv rev("ABLATE_GIT_REVISION", std::nullopt), dirty("ABLATE_GIT_DIRTY", std::nullopt);
  const std::string flags = host_fingerprint(3).at("build_flags");
  EXPECT_EQ(flags.find(ABLATE_SOURCE_DIR), std::string::npos) << flags;
  EXPECT_EQ(flags.find(ABLATE_BINARY_DIR), std::string::npos) << flags;
  std::istringstream words(flags);
  for (std::string w; words >> w;) EXPECT_NE(w[0], '/') << flags;
}

}  // namespace
