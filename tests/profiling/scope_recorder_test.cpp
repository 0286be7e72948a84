// tests/profiling/scope_recorder_test.cpp: scope ids are stable per key, NVTX names are readable,
// pops close the right scope (and anything left open inside it), unmatched pops are counted, not fatal.
// Run: build/tests/profiling_tests --gtest_filter='ScopeRecorder*'
#include "profiling/scope_recorder.h"

#include <gtest/gtest.h>

#include <thread>

namespace ablate::profiling {
namespace {

TEST(ScopeRecorder, IdsAndNames) {
  ScopeRecorder r(nullptr);
  const kernels::ScopeKey attn{"forward", 3, "A", "attention", "sdpa_flash"};
  const kernels::ScopeKey attn_bwd{"backward", 3, "A", "attention", "sdpa_flash"};
  const auto id = r.scope_id(attn);
  EXPECT_EQ(r.scope_id(attn), id);
  EXPECT_NE(r.scope_id(attn_bwd), id);
  EXPECT_EQ(ScopeRecorder::range_name(attn), "L3.A attention[sdpa_flash]");
  EXPECT_EQ(ScopeRecorder::range_name(attn_bwd), "L3.A attention[sdpa_flash] bwd");
  EXPECT_EQ(ScopeRecorder::range_name({"forward", 0, "M", "", ""}), "L0.M");
  EXPECT_EQ(ScopeRecorder::range_name({"optimizer", -1, "", "", ""}), "optimizer");
  EXPECT_EQ(ScopeRecorder::range_name({"forward", -1, "", "loss", "chunked"}), "loss[chunked]");
  const auto scopes = r.scopes();
  ASSERT_EQ(scopes.size(), 2u);
  EXPECT_EQ(scopes.at(id).seam, "attention");
  EXPECT_EQ(scopes.at(id).layer, 3);
}

TEST(ScopeRecorder, PopsAreMatchedPerThread) {
  ScopeRecorder r(nullptr);
  const auto outer = r.scope_id({"backward", 1, "E", "", ""});
  const auto inner = r.scope_id({"backward", 1, "E", "moe_dispatch", "reference"});
  r.push(outer);
  r.push(inner);
  r.pop(outer);  // closes inner too: its partner never ran
  EXPECT_EQ(r.unmatched_pops(), 0);
  r.pop(inner);  // already closed
  EXPECT_EQ(r.unmatched_pops(), 1);
  std::thread other([&] { r.pop(outer); });  // another thread's stack is its own
  other.join();
  EXPECT_EQ(r.unmatched_pops(), 2);
  // current(): the calling thread's innermost open scope, what a graph node created now is tagged with.
  EXPECT_EQ(r.current(), 0u);
  r.push(outer);
  r.push(inner);
  EXPECT_EQ(r.current(), inner);
  std::thread([&] { EXPECT_EQ(r.current(), 0u); }).join();  // another thread has opened nothing
  r.pop(inner);
  EXPECT_EQ(r.current(), outer);
  r.pop(outer);
  EXPECT_EQ(r.current(), 0u);
  // A new recorder does not see the old one's leftovers on this thread.
  r.push(outer);
  ScopeRecorder fresh(nullptr);
  fresh.pop(fresh.scope_id({"backward", 1, "E", "", ""}));
  EXPECT_EQ(fresh.unmatched_pops(), 1);
}

}  // namespace
}  // namespace ablate::profiling
