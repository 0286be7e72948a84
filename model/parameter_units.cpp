// model/parameter_units.cpp: see parameter_units.h.
#include "model/parameter_units.h"

namespace ablate::model {
namespace {

// Identity in forward; its backward calls the hooks' before_unit_backward and hands the gradients on.
struct UnitBackwardMarker : torch::autograd::Function<UnitBackwardMarker> {
  // TensorList: autograd sees tensors among the arguments only as Tensor or TensorList.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList xs,
                                                int64_t hooks, int64_t unit) {
    ctx->saved_data["hooks"] = hooks;
    ctx->saved_data["unit"] = unit;
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined, not zeros
    return xs.vec();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* hooks = reinterpret_cast<ParameterUnitHooks*>(static_cast<intptr_t>(ctx->saved_data["hooks"].toInt()));
    hooks->before_unit_backward(ctx->saved_data["unit"].toInt());
    grads.emplace_back();  // hooks
    grads.emplace_back();  // unit
    return grads;
  }
};

}  // namespace

std::vector<torch::Tensor> mark_unit_outputs(ParameterUnitHooks& hooks, int64_t unit, std::vector<torch::Tensor> outputs) {
  std::vector<size_t> positions;
  torch::autograd::variable_list marked;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined() && outputs[i].requires_grad()) {
      positions.push_back(i);
      marked.push_back(outputs[i]);
    }
  if (marked.empty()) return outputs;
  auto out = UnitBackwardMarker::apply(at::TensorList(marked), static_cast<int64_t>(reinterpret_cast<intptr_t>(&hooks)), unit);
  for (size_t j = 0; j < positions.size(); ++j) outputs[positions[j]] = out[j];
  return outputs;
}

}  // namespace ablate::model
