// profiling/scope_recorder.cpp: see scope_recorder.h.
// Tests: tests/profiling/scope_recorder_test.cpp (profiling_tests).
#include "profiling/scope_recorder.h"

#include <tuple>

#include "profiling/cupti_tracer.h"
#include "profiling/nvtx.h"

namespace ablate::profiling {
namespace {

std::atomic<uint64_t> g_generation{0};

struct OpenScope {
  uint64_t id;
  bool cupti;  // whether an external correlation id was pushed for it (the window may open later)
};
struct ThreadStack {
  uint64_t generation = 0;
  std::vector<OpenScope> open;
};
thread_local ThreadStack t_stack;

std::vector<OpenScope>& stack_of(uint64_t generation) {
  if (t_stack.generation != generation) t_stack = ThreadStack{generation, {}};
  return t_stack.open;
}

}  // namespace

ScopeRecorder::ScopeRecorder(CuptiTracer* tracer) : tracer_(tracer), generation_(++g_generation) {}

std::string ScopeRecorder::range_name(const kernels::ScopeKey& key) {
  std::string name;
  if (key.layer >= 0) name.append("L").append(std::to_string(key.layer)).append(".").append(key.block);
  if (!key.seam.empty()) {
    if (!name.empty()) name.append(" ");
    name.append(key.seam).append("[").append(key.backend).append("]");
  }
  if (name.empty()) return key.phase;
  if (key.phase == "backward") return name.append(" bwd");
  if (key.phase != "forward") return std::string(key.phase).append(" ").append(name);
  return name;
}

uint64_t ScopeRecorder::scope_id(const kernels::ScopeKey& key) {
  std::lock_guard lock(mutex_);
  const auto k = std::make_tuple(key.phase, key.layer, key.block, key.seam, key.backend);
  if (const auto it = ids_.find(k); it != ids_.end()) return it->second;
  const uint64_t id = ids_.size() + 1;  // 0 means "no external id" to some tools
  ids_.emplace(k, id);
  scopes_.emplace(id, LaunchScope{key.phase, key.layer, key.block, key.seam, key.backend});
  names_.push_back(range_name(key));
  return id;
}

void ScopeRecorder::push(uint64_t id) {
  std::string name;
  {
    std::lock_guard lock(mutex_);
    name = id >= 1 && id <= names_.size() ? names_[id - 1] : "scope " + std::to_string(id);
  }
  nvtx_push(name);
  const bool cupti = tracer_ != nullptr && tracer_->active();
  if (cupti) tracer_->push_external(id);
  stack_of(generation_).push_back({id, cupti});
}

void ScopeRecorder::pop(uint64_t id) {
  auto& open = stack_of(generation_);
  size_t depth = open.size();
  while (depth > 0 && open[depth - 1].id != id) --depth;
  if (depth == 0) {
    ++unmatched_pops_;
    return;
  }
  // Close `id` and anything opened inside it that was never closed (a marker whose partner did not run).
  while (open.size() >= depth) {
    nvtx_pop();
    if (open.back().cupti && tracer_ != nullptr) tracer_->pop_external();
    open.pop_back();
  }
}

uint64_t ScopeRecorder::current() const {
  const auto& open = stack_of(generation_);
  return open.empty() ? 0 : open.back().id;
}

std::map<uint64_t, LaunchScope> ScopeRecorder::scopes() const {
  std::lock_guard lock(mutex_);
  return scopes_;
}

}  // namespace ablate::profiling
