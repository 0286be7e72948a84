// tests/kernels/scope_test.cpp: launch scopes on the CPU with a recording observer: every seam call of
// a real (tiny) model opens a forward scope with its layer, block, seam and backend; with backward
// markers on, the backward pass opens and closes a scope per seam and per layer, balanced and nested
// (a seam's backward inside its layer's backward); without an observer nothing is recorded.
// Run: build/tests/kernels_tests --gtest_filter='Scope*'
#include "kernels/scope.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "kernels/dispatch.h"

namespace ablate::kernels {
namespace {

class RecordingObserver : public ScopeObserver {
 public:
  explicit RecordingObserver(bool markers) : markers_(markers) {}
  uint64_t scope_id(const ScopeKey& key) override {
    const auto name = key.phase + "|" + std::to_string(key.layer) + "|" + key.block + "|" + key.seam + "|" + key.backend;
    auto [it, inserted] = ids_.try_emplace(name, keys_.size() + 1);
    if (inserted) keys_.push_back(key);
    return it->second;
  }
  void push(uint64_t id) override {
    events.push_back({true, id});
    stack.push_back(id);
  }
  void pop(uint64_t id) override {
    events.push_back({false, id});
    if (stack.empty() || stack.back() != id) ++unbalanced;
    if (!stack.empty()) stack.pop_back();
  }
  bool backward_markers() const override { return markers_; }
  const ScopeKey& key(uint64_t id) const { return keys_.at(id - 1); }

  struct Event {
    bool push;
    uint64_t id;
  };
  std::vector<Event> events;
  std::vector<uint64_t> stack;
  int unbalanced = 0;

 private:
  bool markers_;
  std::map<std::string, uint64_t> ids_;
  std::vector<ScopeKey> keys_;
};

// Two "layers" (A then D) of seam calls, as the model makes them, then backward.
torch::Tensor two_layers(const Dispatcher& d, torch::Tensor x, const torch::Tensor& w) {
  torch::Tensor residual = x, branch;
  for (int64_t i = 0; i < 2; ++i) {
    LayerScope layer(i, i == 0 ? "A" : "D");
    const auto in = layer.scope().enter({branch, residual});
    auto [normed, summed] = d.residual_norm(in[0], in[1], w, 1e-6);
    auto y = d.swiglu(normed, normed * 2);
    std::tie(branch, residual) = layer.scope().exit(std::pair{y, summed});
  }
  return (branch + residual).sum();
}

// x [2, 3, 8] and a norm weight [8], fp64 leaves that require grad.
std::pair<torch::Tensor, torch::Tensor> leaf_inputs() {
  return {torch::randn({2, 3, 8}, torch::kDouble).requires_grad_(),
          torch::rand({8}, torch::kDouble).add_(0.5).requires_grad_()};
}

struct ObserverGuard {
  explicit ObserverGuard(ScopeObserver* o) { set_scope_observer(o); }
  ~ObserverGuard() { set_scope_observer(nullptr); }
};

TEST(Scope, ForwardScopesCarryLayerBlockSeamAndBackend) {
  RecordingObserver obs(/*markers=*/false);
  ObserverGuard guard(&obs);
  Dispatcher d;
  auto [x, w] = leaf_inputs();
  two_layers(d, x, w).backward();
  EXPECT_EQ(obs.unbalanced, 0);
  EXPECT_TRUE(obs.stack.empty());
  std::vector<std::string> opened;
  for (const auto& e : obs.events) {
    if (!e.push) continue;
    const auto& k = obs.key(e.id);
    EXPECT_EQ(k.phase, "forward");  // no markers: no backward scopes
    opened.push_back(std::to_string(k.layer) + k.block + ":" + k.seam + "[" + k.backend + "]");
  }
  EXPECT_EQ(opened, (std::vector<std::string>{"0A:[]", "0A:residual_norm[reference]", "0A:swiglu[reference]", "1D:[]",
                                              "1D:residual_norm[reference]", "1D:swiglu[reference]"}));
  EXPECT_EQ(current_layer().layer, -1);  // restored after the layers
}

TEST(Scope, BackwardMarkersOpenAndCloseNestedScopes) {
  RecordingObserver obs(/*markers=*/true);
  ObserverGuard guard(&obs);
  Dispatcher d;
  auto [x, w] = leaf_inputs();
  const auto loss = two_layers(d, x, w);
  const size_t forward_events = obs.events.size();
  loss.backward();
  EXPECT_EQ(obs.unbalanced, 0);
  EXPECT_TRUE(obs.stack.empty());

  // Replay the backward events: each seam's backward opens inside its own layer's backward scope.
  std::vector<uint64_t> stack;
  std::vector<std::string> seams_opened;
  for (size_t i = forward_events; i < obs.events.size(); ++i) {
    const auto& e = obs.events[i];
    const auto& k = obs.key(e.id);
    EXPECT_EQ(k.phase, "backward");
    if (!e.push) {
      ASSERT_FALSE(stack.empty());
      EXPECT_EQ(stack.back(), e.id);
      stack.pop_back();
      continue;
    }
    if (!k.seam.empty()) {
      ASSERT_FALSE(stack.empty()) << "seam backward outside every layer scope";
      const auto& layer = obs.key(stack.back());
      EXPECT_TRUE(layer.seam.empty());
      EXPECT_EQ(layer.layer, k.layer);
      seams_opened.push_back(std::to_string(k.layer) + ":" + k.seam);
    }
    stack.push_back(e.id);
  }
  // Backward runs the layers in reverse; within a layer swiglu (later in forward) first.
  EXPECT_EQ(seams_opened, (std::vector<std::string>{"1:swiglu", "1:residual_norm", "0:swiglu", "0:residual_norm"}));

  // The markers are identities: gradients equal those of the same computation without an observer.
  const auto gx = x.grad().clone(), gw = w.grad().clone();
  set_scope_observer(nullptr);
  x.mutable_grad() = torch::Tensor();
  w.mutable_grad() = torch::Tensor();
  two_layers(d, x, w).backward();
  EXPECT_TRUE(torch::equal(gx, x.grad()));
  EXPECT_TRUE(torch::equal(gw, w.grad()));
}

TEST(Scope, NoObserverRecordsNothingAndChangesNothing) {
  RecordingObserver obs(true);
  Dispatcher d;
  auto a = torch::randn({4}, torch::kDouble).requires_grad_();
  {
    Scope scope("forward", "swiglu", "reference");
    const auto in = scope.enter({a, a});
    EXPECT_TRUE(in[0].is_same(a));  // pass-through without an observer
  }
  d.swiglu(a, a).sum().backward();
  EXPECT_TRUE(obs.events.empty());
}

// The Dispatcher re-marks a seam's tensors for its scope; every other field of the inputs must reach the
// backend unchanged. (Before e7bff09 ssm_rotary's qk_dtype was dropped here, so the M block's bf16 request
// never reached the kernel: the parity rows call backends directly and could not see it.)
TEST(Scope, SeamCallsPassEveryInputFieldThrough) {
  RecordingObserver obs(/*markers=*/true);
  ObserverGuard guard(&obs);
  Dispatcher d;
  SsmRotaryInputs rotary;
  rotary.b = torch::randn({1, 3, 8});
  rotary.c = torch::randn({1, 3, 8});
  rotary.b_bias = torch::ones({2, 8});
  rotary.c_bias = torch::ones({2, 8});
  rotary.delta = torch::rand({1, 3, 2});
  rotary.theta = torch::randn({1, 3, 2});
  EXPECT_EQ(d.ssm_rotary(rotary).q.scalar_type(), torch::kFloat);  // unset: the compute dtype
  rotary.qk_dtype = torch::kBFloat16;
  const auto turned = d.ssm_rotary(rotary);
  EXPECT_EQ(turned.q.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(turned.k.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(turned.phi_last.scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace ablate::kernels
