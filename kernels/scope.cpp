// kernels/scope.cpp: see scope.h. The two marker nodes are identity autograd Functions; their forward
// returns the inputs unchanged (autograd turns returned inputs into aliases), their backward returns
// the gradients unchanged and only opens or closes the backward scope. The autograd engine runs a node
// once all of its gradients are in, in dependency order, so the opening node (on the outputs) runs
// before every node of the scope's own backward and the closing node (on the inputs) after them.
// Tests: kernels_tests --gtest_filter='Scope*' (tests/kernels/scope_test.cpp).
#include "kernels/scope.h"

#include <atomic>

namespace ablate::kernels {
namespace {

std::atomic<ScopeObserver*> g_observer{nullptr};
thread_local LayerContext t_layer;

// Identity in forward; in backward it opens (kOpens, the marker on a scope's outputs: the scope's
// backward begins) or closes (the marker on its inputs: the scope's backward is complete) scope `id`.
template <bool kOpens>
struct BackwardScopeMarker : torch::autograd::Function<BackwardScopeMarker<kOpens>> {
  // TensorList, not variable_list: autograd recognises tensors among the arguments only as Tensor or
  // TensorList (a std::vector argument is opaque to it, and the outputs would not require grad).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList xs, int64_t id) {
    ctx->saved_data["id"] = id;
    // An output nobody used keeps an undefined gradient: materialised, it would be zeros the size of
    // the output, and the view ops behind it (phi_last = phi[:, T-1]) would fill and add a whole
    // tensor of them in every profiled backward.
    ctx->set_materialize_grads(false);
    return xs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (auto* o = scope_observer()) {
      const auto id = static_cast<uint64_t>(ctx->saved_data["id"].toInt());
      kOpens ? o->push(id) : o->pop(id);
    }
    grads.emplace_back();  // the id argument has no gradient
    return grads;
  }
};
using OpenBackwardScope = BackwardScopeMarker<true>;
using CloseBackwardScope = BackwardScopeMarker<false>;

// Applies marker F to the tensors of `xs` that take part in autograd; the others pass through.
template <typename F>
std::vector<torch::Tensor> apply_marker(std::vector<torch::Tensor> xs, int64_t id) {
  std::vector<size_t> positions;
  torch::autograd::variable_list marked;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].defined() && xs[i].requires_grad()) {
      positions.push_back(i);
      marked.push_back(xs[i]);
    }
  }
  if (marked.empty()) return xs;
  auto out = F::apply(at::TensorList(marked), id);
  for (size_t j = 0; j < positions.size(); ++j) xs[positions[j]] = out[j];
  return xs;
}

}  // namespace

void set_scope_observer(ScopeObserver* observer) { g_observer.store(observer); }
ScopeObserver* scope_observer() { return g_observer.load(std::memory_order_relaxed); }
const LayerContext& current_layer() { return t_layer; }

Scope::Scope(std::string phase, std::string seam, std::string backend) : observer_(scope_observer()) {
  if (observer_ == nullptr) return;
  key_ = ScopeKey{std::move(phase), t_layer.layer, t_layer.block, std::move(seam), std::move(backend)};
  forward_id_ = observer_->scope_id(key_);
  observer_->push(forward_id_);
}

Scope::~Scope() {
  if (observer_ != nullptr) observer_->pop(forward_id_);
}

std::vector<torch::Tensor> Scope::enter(std::vector<torch::Tensor> inputs) {
  if (observer_ == nullptr || !observer_->backward_markers() || !torch::GradMode::is_enabled()) return inputs;
  bool any = false;
  for (const auto& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return inputs;
  ScopeKey backward = key_;
  backward.phase = "backward";
  backward_id_ = static_cast<int64_t>(observer_->scope_id(backward));
  return apply_marker<CloseBackwardScope>(std::move(inputs), backward_id_);
}

std::vector<torch::Tensor> Scope::mark_outputs(std::vector<torch::Tensor> outputs) {
  // Only when the inputs carry the closing marker: an opened scope must always be closed.
  if (backward_id_ < 0) return outputs;
  return apply_marker<OpenBackwardScope>(std::move(outputs), backward_id_);
}

torch::Tensor Scope::exit(torch::Tensor output) { return mark_outputs({std::move(output)})[0]; }

std::pair<torch::Tensor, torch::Tensor> Scope::exit(std::pair<torch::Tensor, torch::Tensor> outputs) {
  auto out = mark_outputs({std::move(outputs.first), std::move(outputs.second)});
  return {out[0], out[1]};
}

LayerScope::LayerScope(int64_t layer, std::string block) : saved_(t_layer) {
  t_layer = LayerContext{layer, std::move(block)};
  scope_ = std::make_unique<Scope>("forward");
}

LayerScope::~LayerScope() {
  scope_.reset();
  t_layer = saved_;
}

}  // namespace ablate::kernels
