// kernels/optimizer/fused_cuda.cu: backend `fused_cuda` of seam `optimizer`: AdamW (decoupled weight
// decay) over every parameter of a group in one launch of one kernel, the clipping's grad_scale
// divided in as each gradient is read. It reads p, g, m, v and writes p, m, v: 28 bytes a parameter,
// where LibTorch's fused kernel (backend fused_adamw) also writes the divided gradient back when given a
// scale (32 bytes: 0.47 ms of nam56r-small's step on the H100). The arithmetic is torch's AdamW in fp32
// with the bias corrections in fp64 from the step tensor: p *= 1 - lr wd; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Multi-tensor launches: the tensors' pointers, sizes and first blocks travel in the kernel
// parameters (up to 32 KB on sm_70+ with CUDA 12.1+), so nothing is copied to the device and a CUDA
// graph captures the launches as they are. 16-byte accesses where a chunk's pointers allow (fp32
// parameters from the caching allocator do), element by element otherwise. fp32 only, contiguous.
// With `rounded` (bf16 copies of the parameters a sharded stage gathers) the kernel writes each updated
// value rounded too: 2 bytes a parameter more, where a separate rounding pass reads 4 and writes 2.
// Tests: kernels_tests --gtest_filter='*Parity*optimizer*' (every backend against the fp64 reference).
// Benchmark: kernels_bench --benchmark_filter=optimizer. Without a CUDA compiler this file compiles to
// the catalog row alone (unavailable: "built without CUDA").
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "kernels/cuda_common.cuh"
#include "kernels/optimizer/optimizer_lists.h"

namespace ablate::kernels::fused {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = int64_t{kThreads} * 4 * 8;  // elements a block: 8 float4 a thread
// Every tensor of a launch in its parameters: ~29 KB for 480 tensors (nam56r-small's groups have fewer,
// so one launch a group). Tensor t owns the grid's blocks [first_block[t], first_block[t + 1]), a chunk
// each; a block finds its tensor by a binary search of first_block. An earlier table of 768 blocks a
// launch (a block -> tensor entry each) ran nam56r-small's update in 48 launches of under one wave:
// 3.20 ms in the step (2.1 TB/s), 2.79 ms as one launch of ~29 k blocks (H100, b465fde, 2026-11-26,
// experiments/results/2026-11-26-h100-s13/).
constexpr int kLaunchTensors = 480;

struct AdamWLaunch {
  float* p[kLaunchTensors];
  const float* g[kLaunchTensors];
  float* m[kLaunchTensors];
  float* v[kLaunchTensors];
  const float* step[kLaunchTensors];
  __nv_bfloat16* rounded[kLaunchTensors];  // nullptr: none
  int64_t n[kLaunchTensors];
  int32_t first_block[kLaunchTensors + 1];
  int32_t tensors;
};
static_assert(sizeof(AdamWLaunch) < 31 * 1024, "kernel parameters are limited to 32 KB");

struct AdamWScalars {
  const float* lr;
  const float* grad_scale;  // nullptr: none
  float beta1, beta2, eps, weight_decay;
};

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, float decay, float step_size,
                                              float bc2_sqrt, const AdamWScalars& s, float scale) {
  if (s.grad_scale != nullptr) g /= scale;
  p *= decay;
  m = s.beta1 * m + (1.f - s.beta1) * g;
  v = s.beta2 * v + (1.f - s.beta2) * g * g;
  p -= step_size * m / (sqrtf(v) / bc2_sqrt + s.eps);
}

__global__ void __launch_bounds__(kThreads) ablate_adamw(const __grid_constant__ AdamWLaunch a, AdamWScalars s) {
  int t = 0;  // the last tensor whose first block is at or before this one
  for (int hi = a.tensors - 1; t < hi;) {
    const int mid = (t + hi + 1) / 2;
    if (a.first_block[mid] <= static_cast<int32_t>(blockIdx.x))
      t = mid;
    else
      hi = mid - 1;
  }
  const int64_t begin = int64_t(blockIdx.x - a.first_block[t]) * kChunk, end = min(a.n[t], begin + kChunk);
  const double step = *a.step[t];
  const float rate = *s.lr, scale = s.grad_scale != nullptr ? *s.grad_scale : 1.f;
  const float decay = 1.f - rate * s.weight_decay;
  const float step_size = static_cast<float>(rate / (1.0 - pow(double(s.beta1), step)));
  const float bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(double(s.beta2), step)));
  float *p = a.p[t], *m = a.m[t], *v = a.v[t];
  const float* g = a.g[t];
  __nv_bfloat16* const low = a.rounded[t];
  const bool wide = ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(g) | reinterpret_cast<uintptr_t>(m) |
                      reinterpret_cast<uintptr_t>(v)) % 16) == 0 &&
                    reinterpret_cast<uintptr_t>(low) % 8 == 0;  // four bf16 a store
  int64_t i = begin;
  if (wide) {
    // Whole steps of kThreads float4 (the same trip count in every thread); the rest element by element.
    for (; i + int64_t(kThreads) * 4 <= end; i += int64_t(kThreads) * 4) {
      const int64_t at = i + int64_t(threadIdx.x) * 4;
      float4 pp = *reinterpret_cast<const float4*>(p + at), gg = *reinterpret_cast<const float4*>(g + at);
      float4 mm = *reinterpret_cast<const float4*>(m + at), vv = *reinterpret_cast<const float4*>(v + at);
      adamw_element(pp.x, gg.x, mm.x, vv.x, decay, step_size, bc2_sqrt, s, scale);
      adamw_element(pp.y, gg.y, mm.y, vv.y, decay, step_size, bc2_sqrt, s, scale);
      adamw_element(pp.z, gg.z, mm.z, vv.z, decay, step_size, bc2_sqrt, s, scale);
      adamw_element(pp.w, gg.w, mm.w, vv.w, decay, step_size, bc2_sqrt, s, scale);
      *reinterpret_cast<float4*>(p + at) = pp;
      *reinterpret_cast<float4*>(m + at) = mm;
      *reinterpret_cast<float4*>(v + at) = vv;
      if (low != nullptr) {
        const __nv_bfloat162 pair[2] = {__floats2bfloat162_rn(pp.x, pp.y), __floats2bfloat162_rn(pp.z, pp.w)};
        *reinterpret_cast<uint2*>(low + at) = *reinterpret_cast<const uint2*>(pair);
      }
    }
  }
  for (int64_t at = i + threadIdx.x; at < end; at += kThreads) {
    float pp = p[at], mm = m[at], vv = v[at];
    adamw_element(pp, g[at], mm, vv, decay, step_size, bc2_sqrt, s, scale);
    p[at] = pp;
    m[at] = mm;
    v[at] = vv;
    if (low != nullptr) low[at] = __float2bfloat16_rn(pp);
  }
}

void adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
           at::TensorList steps, const torch::Tensor& lr, const torch::Tensor& grad_scale, const AdamWHyper& h,
           at::TensorList rounded) {
  check_optimizer_lists(params, grads, exp_avgs, exp_avg_sqs, steps, grad_scale, rounded);
  if (params.empty()) return;
  const auto device = params[0].device();
  for (size_t i = 0; i < params.size(); ++i)
    for (const auto* t : {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i]})
      TORCH_CHECK(t->is_cuda() && t->device() == device && t->scalar_type() == torch::kFloat && t->is_contiguous() &&
                      t->numel() == params[i].numel(),
                  "optimizer fused_cuda: parameter ", i, "'s tensors must be contiguous fp32 on ", device,
                  " with the parameter's size; use optimizer = \"fused_adamw\" or \"reference\" otherwise");
  for (size_t i = 0; i < rounded.size(); ++i)
    TORCH_CHECK(rounded[i].is_contiguous(), "optimizer fused_cuda: rounded[", i, "] must be contiguous");
  TORCH_CHECK(lr.is_cuda() && lr.scalar_type() == torch::kFloat && lr.numel() == 1,
              "optimizer fused_cuda: lr must be a one-element fp32 CUDA tensor");
  TORCH_CHECK(!grad_scale.defined() || grad_scale.is_cuda(), "optimizer fused_cuda: grad_scale must be a CUDA tensor");
  const c10::cuda::CUDAGuard guard(device);
  torch::NoGradGuard no_grad;
  at::_foreach_add_(steps, 1);
  const AdamWScalars scalars{lr.data_ptr<float>(), grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr,
                             static_cast<float>(h.beta1), static_cast<float>(h.beta2), static_cast<float>(h.eps),
                             static_cast<float>(h.weight_decay)};
  const auto stream = at::cuda::getCurrentCUDAStream();
  AdamWLaunch launch{};
  int tensors = 0;
  int64_t blocks = 0;
  const auto flush = [&] {
    if (blocks > 0) {
      launch.first_block[tensors] = static_cast<int32_t>(blocks);
      launch.tensors = tensors;
      ablate_adamw<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(launch, scalars);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    launch = AdamWLaunch{};
    tensors = 0;
    blocks = 0;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    if (n == 0) continue;
    TORCH_CHECK(steps[i].is_cuda() && steps[i].scalar_type() == torch::kFloat && steps[i].numel() == 1,
                "optimizer fused_cuda: step ", i, " must be a one-element fp32 CUDA tensor");
    const int64_t chunks = ceil_div(n, kChunk);
    if (tensors == kLaunchTensors || blocks + chunks > std::numeric_limits<int32_t>::max()) flush();
    launch.p[tensors] = params[i].data_ptr<float>();
    launch.g[tensors] = grads[i].data_ptr<float>();
    launch.m[tensors] = exp_avgs[i].data_ptr<float>();
    launch.v[tensors] = exp_avg_sqs[i].data_ptr<float>();
    launch.step[tensors] = steps[i].data_ptr<float>();
    launch.rounded[tensors] =
        rounded.empty() ? nullptr : reinterpret_cast<__nv_bfloat16*>(rounded[i].data_ptr<at::BFloat16>());
    launch.n[tensors] = n;
    launch.first_block[tensors] = static_cast<int32_t>(blocks);
    blocks += chunks;
    ++tensors;
  }
  flush();
}

}  // namespace
}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(optimizer_fused_cuda) {
  registry.optimizer("fused_cuda", ABLATE_CUDA_ONLY(&fused::adamw));
}

}  // namespace ablate::kernels
