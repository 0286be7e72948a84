// kernels/gelu_gate.cpp: see gelu_gate.h (the autograd function and the LibTorch form; the CUDA passes
// are in gelu_gate.cu).
#include "kernels/gelu_gate.h"

#include "kernels/numerics.h"

namespace ablate::kernels {

torch::Tensor gelu_gate_ops(const torch::Tensor& g, const torch::Tensor& h) {
  TORCH_CHECK(g.sizes() == h.sizes(), "gelu_gate: g ", g.sizes(), " and h ", h.sizes(), " must have one shape");
  NoAutocastScope fp32_arithmetic;
  const auto wide = at::promote_types(at::promote_types(g.scalar_type(), h.scalar_type()), torch::kFloat);
  return (torch::gelu(g.to(wide)) * h.to(wide)).to(g.scalar_type());
}

#if defined(ABLATE_HAVE_CUDA)
namespace {

class GeluGate : public torch::autograd::Function<GeluGate> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& g, const torch::Tensor& h) {
    ctx->save_for_backward({g, h});
    return fused::gelu_gate_cuda(g, h);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dg, dh] = fused::gelu_gate_backward_cuda(grads[0], saved[0], saved[1]);  // takes d into g's dtype
    return {dg, dh};
  }
};

}  // namespace
#endif

torch::Tensor gelu_gate(const torch::Tensor& g, const torch::Tensor& h) {
#if defined(ABLATE_HAVE_CUDA)
  if (fused::gelu_gate_cuda_supports(g, h)) return GeluGate::apply(g, h);
#endif
  return gelu_gate_ops(g, h);
}

}  // namespace ablate::kernels
