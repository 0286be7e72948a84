// kernels/dispatch.cpp: the Dispatcher that a model instance calls its seams through: it resolves every
// seam against the catalog and binds the registered implementation (kernels/registry.h) of the chosen
// backend once, then each call runs it inside a launch scope.
// Tests: kernels_tests --gtest_filter='Dispatcher*' (tests/kernels/catalog_test.cpp).
#include "kernels/dispatch.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAContext.h>
#endif

#include "kernels/registry.h"
#include "kernels/scope.h"

namespace ablate::kernels {
namespace {

// `seam` bound to the function registered for its chosen `backend`; the catalog listing a backend
// that the registry lacks is a bug, reported when the Dispatcher is built.
template <typename Fn>
BoundSeam<Fn> bind(const std::map<std::string, Fn>& table, const char* seam, const std::string& backend) {
  const auto it = table.find(backend);
  if (it == table.end())
    throw std::logic_error(std::string("seam '") + seam + "': the catalog lists backend '" + backend +
                           "' but the registry has no implementation of it");
  return {backend, it->second};
}

// The function registered for `implementation` of `seam`, asked for by a test.
template <typename Fn>
const Fn& implementation_for_testing(const std::map<std::string, Fn>& table, const char* seam,
                                     const std::string& implementation) {
  const auto it = table.find(implementation);
  if (it == table.end())
    throw std::invalid_argument(std::string("seam '") + seam + "': this build has no implementation '" +
                                implementation + "'");
  return it->second;
}

// Compute capability (major, minor) of CUDA device `index`; (0, 0) in a build without CUDA.
std::pair<int, int> cuda_capability(c10::DeviceIndex index) {
#if defined(ABLATE_HAVE_CUDA)
  const auto* props = at::cuda::getDeviceProperties(index);
  return {props->major, props->minor};
#else
  return {0, 0};
#endif
}

}  // namespace

DeviceInfo describe_device(const torch::Device& device, torch::ScalarType dtype) {
  DeviceInfo info;
  info.dtype = dtype == torch::kBFloat16 ? "bf16"
               : dtype == torch::kHalf   ? "fp16"
               : dtype == torch::kDouble ? "fp64"
                                         : "fp32";
#if defined(ABLATE_HAVE_CUDA)
  info.cuda = device.is_cuda() && torch::cuda::is_available();
#endif
  if (info.cuda) {
    const auto [major, minor] = cuda_capability(device.has_index() ? device.index() : 0);
    info.sm_major = major;
    info.sm_minor = minor;
  }
  return info;
}

Dispatcher::Dispatcher(const std::map<std::string, std::string>& requested, const DeviceInfo& dev, bool strict) {
  const auto& all_seams = seams();
  // A request for a seam that does not exist fails closed with the catalog's own message.
  for (const auto& [seam, name] : requested) {
    if (std::find(all_seams.begin(), all_seams.end(), seam) != all_seams.end()) continue;
    Resolution unused;
    std::string error;
    resolve(seam, name, dev, strict, unused, error);
    throw std::invalid_argument(error + " (requested backend '" + name + "')");
  }
  for (const auto& seam : all_seams) {
    const auto it = requested.find(seam);
    const std::string name = it == requested.end() ? "reference" : it->second;
    Resolution resolution;
    std::string error;
    if (!resolve(seam, name, dev, strict, resolution, error)) throw std::invalid_argument(error);
    resolutions_.push_back(std::move(resolution));
  }
  const auto& tables = implementations();
#define ABLATE_BIND_SEAM(s, Fn, lane_key) bound_.s = bind(tables.s, #s, chosen(#s));
  ABLATE_SEAMS(ABLATE_BIND_SEAM)
#undef ABLATE_BIND_SEAM
}

Dispatcher::Dispatcher() : Dispatcher({}, DeviceInfo{}, /*strict=*/false) {}

const std::string& Dispatcher::chosen(const std::string& seam) const {
  for (const auto& r : resolutions_)
    if (r.seam == seam) return r.chosen;
  throw std::invalid_argument("unknown seam '" + seam + "'");
}

Dispatcher Dispatcher::with_implementation_for_testing(const std::string& seam, const std::string& implementation) const {
  Dispatcher copy = *this;
  const auto& tables = implementations();
#define ABLATE_REBIND_SEAM(s, Fn, lane_key)                                \
  if (seam == #s) {                                                        \
    copy.bound_.s.call = implementation_for_testing(tables.s, #s, implementation); \
    return copy;                                                           \
  }
  ABLATE_SEAMS(ABLATE_REBIND_SEAM)
#undef ABLATE_REBIND_SEAM
  throw std::invalid_argument("unknown seam '" + seam + "'");
}

// Each seam call opens a launch scope (kernels/scope.h) named after the seam and its chosen backend,
// so the profiler attributes its kernels, forward and backward, to this seam of this layer.
torch::Tensor Dispatcher::dense_gemm(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& bias) const {
  Scope scope("forward", "dense_gemm", bound_.dense_gemm.backend);
  const auto in = scope.enter({x, weight, bias});
  return scope.exit(bound_.dense_gemm.call(in[0], in[1], in[2]));
}

torch::Tensor Dispatcher::attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double scale) const {
  Scope scope("forward", "attention", bound_.attention.backend);
  const auto in = scope.enter({q, k, v});
  return scope.exit(bound_.attention.call(in[0], in[1], in[2], scale));
}

std::pair<torch::Tensor, torch::Tensor> Dispatcher::rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                                         const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                                         const torch::Tensor& cos, const torch::Tensor& sin) const {
  Scope scope("forward", "rope", bound_.rope.backend);
  const auto in = scope.enter({q_nope, q_rope, k_nope, k_rope});
  return scope.exit(bound_.rope.call(in[0], in[1], in[2], in[3], cos, sin));
}

std::pair<torch::Tensor, torch::Tensor> Dispatcher::residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                                  const torch::Tensor& weight, double eps) const {
  Scope scope("forward", "residual_norm", bound_.residual_norm.backend);
  const auto in = scope.enter({x, residual, weight});
  return scope.exit(
      bound_.residual_norm.call(in[0], in[1], in[2], eps));
}

torch::Tensor Dispatcher::swiglu(const torch::Tensor& a, const torch::Tensor& b) const {
  Scope scope("forward", "swiglu", bound_.swiglu.backend);
  const auto in = scope.enter({a, b});
  return scope.exit(bound_.swiglu.call(in[0], in[1]));
}

MoeRouterOutputs Dispatcher::moe_router(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k) const {
  Scope scope("forward", "moe_router", bound_.moe_router.backend);
  const auto in = scope.enter({x, weight});
  auto out = bound_.moe_router.call(in[0], in[1], top_k);
  auto [probs, top_w] = scope.exit(std::pair{std::move(out.probs), std::move(out.top_w)});
  return {.probs = std::move(probs), .top_w = std::move(top_w), .top_idx = std::move(out.top_idx)};
}

torch::Tensor Dispatcher::moe_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx,
                                       const torch::Tensor& topk_w, const torch::Tensor& w1, const torch::Tensor& w3,
                                       const torch::Tensor& w2, double capacity_factor, torch::Tensor* dropped,
                                       const ExpertExchange* experts) const {
  Scope scope("forward", "moe_dispatch", bound_.moe_dispatch.backend);
  const auto in = scope.enter({x, topk_w, w1, w3, w2});
  return scope.exit(bound_.moe_dispatch.call(
      in[0], topk_idx, in[1], in[2], in[3], in[4], capacity_factor, dropped, experts));
}

SsmRotaryOutputs Dispatcher::ssm_rotary(const SsmRotaryInputs& inputs) const {
  Scope scope("forward", "ssm_rotary", bound_.ssm_rotary.backend);
  const auto in = scope.enter({inputs.b, inputs.c, inputs.b_bias, inputs.c_bias, inputs.delta, inputs.theta, inputs.phi0});
  // A copy of every field (qk_dtype too), with the tensors replaced by their scope-marked versions.
  SsmRotaryInputs with_marks = inputs;
  for (auto [slot, i] : {std::pair{&with_marks.b, 0}, {&with_marks.c, 1}, {&with_marks.b_bias, 2},
                         {&with_marks.c_bias, 3}, {&with_marks.delta, 4}, {&with_marks.theta, 5}, {&with_marks.phi0, 6}})
    *slot = in[static_cast<size_t>(i)];
  const auto out = bound_.ssm_rotary.call(with_marks);
  auto marked = scope.exit_all({out.q, out.k, out.phi_last});
  return {.q = std::move(marked[0]), .k = std::move(marked[1]), .phi_last = std::move(marked[2])};
}

SsmScanOutputs Dispatcher::ssm_scan(const SsmScanInputs& inputs) const {
  Scope scope("forward", "ssm_scan", bound_.ssm_scan.backend);
  const auto in = scope.enter({inputs.x, inputs.q, inputs.k, inputs.log_alpha, inputs.beta, inputs.gamma, inputs.D,
                               inputs.z, inputs.h0, inputs.x_prev, inputs.k_prev});
  SsmScanInputs marked = inputs;
  for (auto [slot, i] : {std::pair{&marked.x, 0}, {&marked.q, 1}, {&marked.k, 2}, {&marked.log_alpha, 3},
                         {&marked.beta, 4}, {&marked.gamma, 5}, {&marked.D, 6}, {&marked.z, 7}, {&marked.h0, 8},
                         {&marked.x_prev, 9}, {&marked.k_prev, 10}})
    *slot = in[static_cast<size_t>(i)];
  auto out = bound_.ssm_scan.call(marked);
  auto [y, h_last] = scope.exit(std::pair{std::move(out.y), std::move(out.h_last)});
  return {std::move(y), std::move(h_last)};
}

torch::Tensor Dispatcher::causal_conv(const torch::Tensor& x, const torch::Tensor& weight,
                                      const torch::Tensor& bias) const {
  Scope scope("forward", "causal_conv", bound_.causal_conv.backend);
  const auto in = scope.enter({x, weight, bias});
  return scope.exit(bound_.causal_conv.call(in[0], in[1], in[2]));
}

RecurrentScanOutputs Dispatcher::recurrent_scan(const RecurrentScanInputs& inputs) const {
  Scope scope("forward", "recurrent_scan", bound_.recurrent_scan.backend);
  const auto in = scope.enter({inputs.gate_a, inputs.gate_x, inputs.u, inputs.lambda, inputs.h0});
  const auto out = bound_.recurrent_scan.call(
      RecurrentScanInputs{.gate_a = in[0], .gate_x = in[1], .u = in[2], .lambda = in[3], .h0 = in[4]});
  auto [h, h_last] = scope.exit(std::pair{out.h, out.h_last});
  return {.h = std::move(h), .h_last = std::move(h_last)};
}

torch::Tensor Dispatcher::loss(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                               const torch::Tensor& targets, const torch::Tensor& mask) const {
  Scope scope("forward", "loss", bound_.loss.backend);
  const auto in = scope.enter({hidden, head_weight});
  return scope.exit(bound_.loss.call(in[0], in[1], targets, mask));
}

// No autograd markers: the update is not differentiated; the scope attributes its kernels to the seam.
void Dispatcher::optimizer(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                           at::TensorList exp_avg_sqs, at::TensorList steps, const torch::Tensor& lr,
                           const torch::Tensor& grad_scale, const AdamWHyper& hyper,
                           at::TensorList rounded) const {
  Scope scope("optimizer", "optimizer", bound_.optimizer.backend);
  bound_.optimizer.call(params, grads, exp_avgs, exp_avg_sqs, steps, lr, grad_scale, hyper, rounded);
}

}  // namespace ablate::kernels
