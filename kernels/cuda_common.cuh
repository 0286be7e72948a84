// kernels/cuda_common.cuh: what the fused CUDA backends (kernels/<seam>/fused_cuda.cu) share: fp32 <-> storage-type
// conversion, 16-byte vector loads/stores into fp32 registers, cp.async copies, sigmoid, the warp sum, and host
// helpers (dtype dispatch, alignment, grid sizing, the dynamic shared-memory opt-in). Included only by .cu files, under __CUDACC__.
#pragma once
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <torch/torch.h>

#include <cstdint>
#include <type_traits>

namespace ablate::kernels::fused {

// ---- device side -------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return __float2bfloat16_rn(v);  // round to nearest even, as LibTorch's .to(kBFloat16)
  }
}

// VEC consecutive elements at p into fp32 registers. When VEC elements fill whole 16-byte words the
// load is done as 16-byte accesses (the caller guarantees 16-byte alignment); otherwise element-wise.
template <int VEC, typename T>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[VEC]) {
  if constexpr (VEC * sizeof(T) % 16 == 0) {
    constexpr int kWords = VEC * sizeof(T) / 16;
    union {
      int4 words[kWords];
      T elems[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < kWords; ++k) u.words[k] = reinterpret_cast<const int4*>(p)[k];
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float(u.elems[i]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float(p[i]);
  }
}

template <int VEC, typename T>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[VEC]) {
  if constexpr (VEC * sizeof(T) % 16 == 0) {
    constexpr int kWords = VEC * sizeof(T) / 16;
    union {
      int4 words[kWords];
      T elems[VEC];
    } u;
#pragma unroll
    for (int i = 0; i < VEC; ++i) u.elems[i] = from_float<T>(in[i]);
#pragma unroll
    for (int k = 0; k < kWords; ++k) reinterpret_cast<int4*>(p)[k] = u.words[k];
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = from_float<T>(in[i]);
  }
}

// 16 bytes from global to shared memory without a trip through registers (cp.async): the copy proceeds
// while the thread goes on, so every tile of a kernel is in flight at once. fill = false writes 16 zero
// bytes (source size 0: nothing is read, src only has to be a valid address). A thread's copies are
// complete after cp_async_wait_all(); the barrier after it publishes them to the block.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool fill) {
  const uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src), "r"(fill ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// The logistic function in IEEE fp32 (expf, an exact division): what the reference's torch.sigmoid computes
// to within rounding. Paths that trade an ulp for speed name their own (ssm_scan's sigmoid_tc).
__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + expf(-v)); }

// Sum over the 32 lanes, every lane gets the total (butterfly: the same order on every lane).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// ---- host side ---------------------------------------------------------------------------------

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<float>) or fn(TypeTag<__nv_bfloat16>) for `t`; any other dtype is an error that
// names the tensor (the catalog keeps other dtypes on the reference, so this is a caller bug).
template <class Fn>
void with_float_or_bf16(at::ScalarType t, const char* what, Fn&& fn) {
  if (t == at::kFloat)
    fn(TypeTag<float>{});
  else if (t == at::kBFloat16)
    fn(TypeTag<__nv_bfloat16>{});
  else
    TORCH_CHECK(false, "fused_cuda: ", what, " must be fp32 or bf16, got ", t);
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int sm_count() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

// Lets `kernel` launch with `bytes` of dynamic shared memory (above the default 48 KB needs this opt-in),
// after checking the device's opt-in limit: past it the launch would fail with a bare "invalid argument",
// so the error says which kernel at which shape needed how much; `context...` names the kernel and the
// shape (and the way out), streamed into the message in order.
template <class Kernel, class... Context>
void allow_dynamic_smem(Kernel kernel, size_t bytes, const Context&... context) {
  const size_t limit = at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin;
  TORCH_CHECK(bytes <= limit, context..., ": needs ", bytes, " bytes of shared memory a block; this device allows ", limit);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// The tensors a fused kernel is given: on one CUDA device, contiguous (a no-op when they already are).
inline torch::Tensor on_device(const torch::Tensor& t, const torch::Tensor& like, const char* what) {
  TORCH_CHECK(t.is_cuda(), "fused_cuda: ", what, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == like.device(), "fused_cuda: ", what, " is on ", t.device(), ", expected ", like.device());
  return t.contiguous();
}

}  // namespace ablate::kernels::fused
