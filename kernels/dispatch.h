// kernels/dispatch.h: the Dispatcher that a model instance calls its seams through. Blocks never call a
// backend directly: a fast backend is one registration in its seam's folder (kernels/registry.h).
// Every seam call opens a launch scope (kernels/scope.h) for the profiler and NVTX. The contracts
// (shapes, dtypes) of the seam calls below: kernels/seams.h.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "kernels/catalog.h"
#include "kernels/seam_list.h"
#include "kernels/seams.h"

namespace ablate::kernels {

// The DeviceInfo that availability checks see for a live device and run dtype (bf16 -> "bf16",
// fp16 -> "fp16", anything else "fp32"); compute capability read from the CUDA device when there is one.
DeviceInfo describe_device(const torch::Device& device, torch::ScalarType dtype);

// A seam bound to its function: the backend it reports (its chosen one) and the function it calls.
template <typename Fn>
struct BoundSeam {
  std::string backend;
  Fn call;
};

// One model instance's resolved seams. Built from the requested backends (seam -> name; missing
// seams request "reference"); every resolution is kept for the receipt, and each seam's function is
// looked up once, here, so a seam call is a direct call inside its launch scope.
class Dispatcher {
 public:
  // Throws std::invalid_argument for an unknown seam/backend name or, under `strict`, for an
  // unavailable requested backend.
  Dispatcher(const std::map<std::string, std::string>& requested, const DeviceInfo& dev, bool strict);
  Dispatcher();  // every seam on its reference backend

  const std::vector<Resolution>& resolutions() const { return resolutions_; }
  // Throws std::invalid_argument for an unknown seam.
  const std::string& chosen(const std::string& seam) const;

  // Test-only: a copy whose `seam` calls backend `implementation`'s function while still reporting
  // (and scoping as) its chosen backend, so the profiler's observed-backend check must flag the seam
  // (tests/harness/profiling_gpu_test.cpp). Throws std::invalid_argument for an unknown seam or an
  // implementation this build does not have.
  Dispatcher with_implementation_for_testing(const std::string& seam, const std::string& implementation) const;

  torch::Tensor dense_gemm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {}) const;
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) const;
  std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& q_nope, const torch::Tensor& q_rope,
                                               const torch::Tensor& k_nope, const torch::Tensor& k_rope,
                                               const torch::Tensor& cos, const torch::Tensor& sin) const;
  std::pair<torch::Tensor, torch::Tensor> residual_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                        const torch::Tensor& weight, double eps) const;
  torch::Tensor swiglu(const torch::Tensor& a, const torch::Tensor& b) const;
  MoeRouterOutputs moe_router(const torch::Tensor& x, const torch::Tensor& weight, int64_t top_k) const;
  torch::Tensor moe_dispatch(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor, torch::Tensor* dropped,
                             const ExpertExchange* experts = nullptr) const;
  SsmRotaryOutputs ssm_rotary(const SsmRotaryInputs& inputs) const;
  SsmScanOutputs ssm_scan(const SsmScanInputs& inputs) const;
  torch::Tensor causal_conv(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) const;
  RecurrentScanOutputs recurrent_scan(const RecurrentScanInputs& inputs) const;
  torch::Tensor loss(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                     const torch::Tensor& mask) const;
  void optimizer(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList steps, const torch::Tensor& lr, const torch::Tensor& grad_scale,
                 const AdamWHyper& hyper, at::TensorList rounded = {}) const;

 private:
  struct BoundSeams {
#define ABLATE_BOUND_SEAM(seam, Fn, lane_key) BoundSeam<Fn> seam;
    ABLATE_SEAMS(ABLATE_BOUND_SEAM)
#undef ABLATE_BOUND_SEAM
  };
  std::vector<Resolution> resolutions_;
  BoundSeams bound_;
};

}  // namespace ablate::kernels
