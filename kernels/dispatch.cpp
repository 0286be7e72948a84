// kernels/dispatch.cpp: the registry of seam implementations (one entry per catalog row) and the
// Dispatcher that a model instance calls its seams through. A new backend is one catalog row
// (kernels/catalog.cpp) plus one registry entry here; the parity test then covers it automatically.
// Tests: kernels_tests --gtest_filter='Dispatcher*:Registry*' (tests/kernels/catalog_test.cpp).
#include "kernels/dispatch.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#if defined(ABLATE_HAVE_CUDA)
#include <ATen/cuda/CUDAContext.h>

#include "kernels/cuda/fused.h"
#endif

#include "kernels/reference/ops.h"
#include "kernels/reference/scans.h"

namespace ablate::kernels {
namespace {

Implementations build_registry() {
  namespace ref = reference;
  Implementations r;
  r.attention["reference"] = &ref::attention;
  r.attention["sdpa_flash"] = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double s) {
    return ref::sdpa_attention(ref::SdpaKernel::flash, q, k, v, s);
  };
  r.attention["sdpa_cudnn"] = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double s) {
    return ref::sdpa_attention(ref::SdpaKernel::cudnn, q, k, v, s);
  };
  r.attention["sdpa_efficient"] = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double s) {
    return ref::sdpa_attention(ref::SdpaKernel::efficient, q, k, v, s);
  };
  r.rope["reference"] = &ref::rope;
  r.residual_norm["reference"] = &ref::residual_norm;
  r.swiglu["reference"] = &ref::swiglu;
  r.moe_dispatch["reference"] = &ref::moe_dispatch_standard;
  r.ssm_scan["reference"] = &ref::ssm_scan_chunked;
  r.recurrent_scan["reference"] = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ref::recurrent_scan_chunked(a, b);
  };
#if defined(ABLATE_HAVE_CUDA)
  // Compiled only with CUDA; without it the catalog reports these rows unavailable ("built without CUDA").
  r.residual_norm["fused_cuda"] = &fused::residual_norm;
  r.swiglu["fused_cuda"] = &fused::swiglu;
  r.rope["fused_cuda"] = &fused::rope;
  r.loss["fused_cuda"] = [](const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
                            const torch::Tensor& m) {
    return fused::linear_cross_entropy(h, w, t, m, fused::LossReduction::mean);
  };
#endif
  r.loss["reference"] = &ref::loss_full_logits;
  r.loss["chunked"] = [](const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
                         const torch::Tensor& m) { return ref::loss_chunked(h, w, t, m); };
  return r;
}

template <typename Fn>
bool registered(const std::map<std::string, Fn>& table, const std::string& name) {
  return table.find(name) != table.end();
}

// The registry entry for (seam, name); throws when the catalog and the registry disagree.
template <typename Fn>
const Fn& lookup(const std::map<std::string, Fn>& table, const std::string& seam, const std::string& name) {
  const auto it = table.find(name);
  if (it == table.end())
    throw std::logic_error("seam '" + seam + "': backend '" + name + "' has no registered implementation");
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

const Implementations& implementations() {
  static const Implementations kRegistry = build_registry();
  return kRegistry;
}

bool has_implementation(const std::string& seam, const std::string& name) {
  const auto& r = implementations();
  if (seam == "attention") return registered(r.attention, name);
  if (seam == "rope") return registered(r.rope, name);
  if (seam == "residual_norm") return registered(r.residual_norm, name);
  if (seam == "swiglu") return registered(r.swiglu, name);
  if (seam == "moe_dispatch") return registered(r.moe_dispatch, name);
  if (seam == "ssm_scan") return registered(r.ssm_scan, name);
  if (seam == "recurrent_scan") return registered(r.recurrent_scan, name);
  if (seam == "loss") return registered(r.loss, name);
  return false;
}

DeviceInfo describe_device(const torch::Device& device, torch::ScalarType dtype) {
  DeviceInfo info;
  info.dtype = dtype == torch::kBFloat16 ? "bf16" : dtype == torch::kHalf ? "fp16" : "fp32";
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
  for (const auto& [seam, name] : requested) {
    if (std::find(all_seams.begin(), all_seams.end(), seam) == all_seams.end()) {
      std::string known;
      for (const auto& s : all_seams) known += (known.empty() ? "" : ", ") + s;
      throw std::invalid_argument("unknown seam '" + seam + "' (requested backend '" + name + "'): known seams are " +
                                  known);
    }
  }
  for (const auto& seam : all_seams) {
    const auto it = requested.find(seam);
    const std::string name = it == requested.end() ? "reference" : it->second;
    Resolution resolution;
    std::string error;
    if (!resolve(seam, name, dev, strict, resolution, error)) throw std::invalid_argument(error);
    if (!has_implementation(seam, resolution.chosen))
      throw std::logic_error("seam '" + seam + "': the catalog lists backend '" + resolution.chosen +
                             "' but the registry has no implementation of it");
    chosen_[seam] = resolution.chosen;
    resolutions_.push_back(std::move(resolution));
  }
}

Dispatcher::Dispatcher() : Dispatcher({}, DeviceInfo{}, /*strict=*/false) {}

const std::string& Dispatcher::chosen(const std::string& seam) const {
  const auto it = chosen_.find(seam);
  if (it == chosen_.end()) throw std::invalid_argument("unknown seam '" + seam + "'");
  return it->second;
}

torch::Tensor Dispatcher::attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    double scale) const {
  return lookup(implementations().attention, "attention", chosen("attention"))(q, k, v, scale);
}

std::pair<torch::Tensor, torch::Tensor> Dispatcher::rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                                         const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                                         const torch::Tensor& cos, const torch::Tensor& sin) const {
  return lookup(implementations().rope, "rope", chosen("rope"))(q_nope, q_rope, k_nope, k_rope, cos, sin);
}

std::pair<torch::Tensor, torch::Tensor> Dispatcher::residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                                  const torch::Tensor& weight, double eps) const {
  return lookup(implementations().residual_norm, "residual_norm", chosen("residual_norm"))(x, residual, weight, eps);
}

torch::Tensor Dispatcher::swiglu(const torch::Tensor& a, const torch::Tensor& b) const {
  return lookup(implementations().swiglu, "swiglu", chosen("swiglu"))(a, b);
}

torch::Tensor Dispatcher::moe_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx,
                                       const torch::Tensor& topk_w, const torch::Tensor& w1, const torch::Tensor& w3,
                                       const torch::Tensor& w2, double capacity_factor, torch::Tensor* dropped) const {
  return lookup(implementations().moe_dispatch, "moe_dispatch", chosen("moe_dispatch"))(x, topk_idx, topk_w, w1, w3, w2,
                                                                                        capacity_factor, dropped);
}

torch::Tensor Dispatcher::ssm_scan(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& log_alpha, const torch::Tensor& beta,
                                   const torch::Tensor& gamma, const torch::Tensor& D, int64_t chunk) const {
  return lookup(implementations().ssm_scan, "ssm_scan", chosen("ssm_scan"))(x, q, k, log_alpha, beta, gamma, D, chunk);
}

torch::Tensor Dispatcher::recurrent_scan(const torch::Tensor& a, const torch::Tensor& b) const {
  return lookup(implementations().recurrent_scan, "recurrent_scan", chosen("recurrent_scan"))(a, b);
}

torch::Tensor Dispatcher::loss(const torch::Tensor& hidden, const torch::Tensor& head_weight,
                               const torch::Tensor& targets, const torch::Tensor& mask) const {
  return lookup(implementations().loss, "loss", chosen("loss"))(hidden, head_weight, targets, mask);
}

}  // namespace ablate::kernels
