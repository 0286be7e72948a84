// kernels/swiglu/fused_cuda.cu: backend `fused_cuda` of the `swiglu` seam, out = silu(a) * b. The reference
// (kernels/swiglu/reference.cpp) is two LibTorch ops forward (silu, mul: an intermediate
// written and read back) and several backward; here each direction is one element-wise pass:
//   forward  ablate_swiglu_fwd: reads a, b, writes out;
//   backward ablate_swiglu_bwd: reads a, b, dout, writes da = dout * b * silu'(a), db = dout * silu(a),
//            silu'(a) = sig(a) * (1 + a * (1 - sig(a))), recomputed rather than saved.
// fp32 arithmetic, one rounding per output; fp32 or bf16 tensors; 8 elements (16 bytes of bf16) per
// access when the size is a multiple of 8 and the pointers 16-byte aligned, element-wise otherwise.
// Tests: kernels_tests --gtest_filter='*Parity*swiglu*'. Benchmark: build/bench/kernels_bench --benchmark_filter=swiglu.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

// Grid-stride over groups of VEC elements.
template <typename T, int VEC>
__global__ void ablate_swiglu_fwd(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                  int64_t groups) {
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
    float av[VEC], bv[VEC], o[VEC];
    load_vec<VEC>(a + g * VEC, av);
    load_vec<VEC>(b + g * VEC, bv);
#pragma unroll
    for (int i = 0; i < VEC; ++i) o[i] = av[i] * sigmoid(av[i]) * bv[i];
    store_vec<VEC>(out + g * VEC, o);
  }
}

template <typename T, int VEC>
__global__ void ablate_swiglu_bwd(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ dout,
                                  T* __restrict__ da, T* __restrict__ db, int64_t groups) {
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
    float av[VEC], bv[VEC], dv[VEC], dav[VEC], dbv[VEC];
    load_vec<VEC>(a + g * VEC, av);
    load_vec<VEC>(b + g * VEC, bv);
    load_vec<VEC>(dout + g * VEC, dv);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float sig = sigmoid(av[i]);
      dbv[i] = dv[i] * av[i] * sig;
      dav[i] = dv[i] * bv[i] * sig * (1.f + av[i] * (1.f - sig));
    }
    store_vec<VEC>(da + g * VEC, dav);
    store_vec<VEC>(db + g * VEC, dbv);
  }
}

constexpr int kThreads = 256;

// Launches kernel(VEC) over n elements: 8 a group when n and every pointer allow 16-byte accesses.
// The grid is capped at a few waves of resident blocks; the kernels stride over the rest.
template <class Launch>
void elementwise(int64_t n, std::initializer_list<const Tensor*> tensors, Launch&& launch) {
  bool vectorised = n % 8 == 0;
  for (const Tensor* t : tensors) vectorised = vectorised && aligned16(t->data_ptr());
  const int64_t groups = vectorised ? n / 8 : n;
  const int64_t grid = std::min<int64_t>(ceil_div(groups, kThreads), int64_t(sm_count()) * 16);
  if (vectorised)
    launch(std::integral_constant<int, 8>{}, groups, grid);
  else
    launch(std::integral_constant<int, 1>{}, groups, grid);
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& a_in,
                                                const Tensor& b_in) {
    const Tensor a = on_device(a_in, a_in, "a"), b = on_device(b_in, a_in, "b");
    TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(), "swiglu fused_cuda: a ", a.sizes(), " ",
                a.scalar_type(), " and b ", b.sizes(), " ", b.scalar_type(), " must match");
    Tensor out = torch::empty_like(a);
    const int64_t n = a.numel();
    if (n > 0) {
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_float_or_bf16(a.scalar_type(), "a", [&](auto tag) {
        using T = typename decltype(tag)::type;
        elementwise(n, {&a, &b, &out}, [&](auto vec, int64_t groups, int64_t grid) {
          ablate_swiglu_fwd<T, decltype(vec)::value><<<grid, kThreads, 0, stream>>>(
              static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()), static_cast<T*>(out.data_ptr()),
              groups);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
    }
    ctx->save_for_backward({a, b});
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &a = saved[0], &b = saved[1];
    if (!grads[0].defined()) return {Tensor(), Tensor()};
    const Tensor dout = on_device(grads[0].to(a.scalar_type()), a, "dout");
    Tensor da = torch::empty_like(a), db = torch::empty_like(b);
    const int64_t n = a.numel();
    if (n > 0) {
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_float_or_bf16(a.scalar_type(), "a", [&](auto tag) {
        using T = typename decltype(tag)::type;
        elementwise(n, {&a, &b, &dout, &da, &db}, [&](auto vec, int64_t groups, int64_t grid) {
          ablate_swiglu_bwd<T, decltype(vec)::value><<<grid, kThreads, 0, stream>>>(
              static_cast<const T*>(a.data_ptr()), static_cast<const T*>(b.data_ptr()),
              static_cast<const T*>(dout.data_ptr()), static_cast<T*>(da.data_ptr()), static_cast<T*>(db.data_ptr()),
              groups);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        });
      });
    }
    return {da, db};
  }
};

}  // namespace

Tensor swiglu(const Tensor& a, const Tensor& b) { return SwigluFunction::apply(a, b)[0]; }

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(swiglu_fused_cuda) {
  registry.swiglu("fused_cuda", ABLATE_CUDA_ONLY(&fused::swiglu));
}

}  // namespace ablate::kernels
