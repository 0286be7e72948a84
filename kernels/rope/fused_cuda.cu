// kernels/rope/fused_cuda.cu: backend `fused_cuda` of the `rope` seam, MLA layout (docs/model.md "A": per-head
// q_r, one k_r shared by all heads). The reference (kernels/rope/reference.cpp) rotates in
// LibTorch ops (casts, unflatten, two products per component, stack), expands k_r over the heads and
// concatenates [nope ; rope] for q and for k: a chain of intermediates through memory. Here:
//   forward  ablate_rope_fwd: one launch writes both concatenated outputs, q = [q_nope ; Rot(q_rope)]
//            and k = [k_nope ; Rot(k_rope)] ([B,T,H,dn+dr], contiguous), reading the strided views the
//            projections produce (q_nope and q_rope are narrows of one tensor: no copy before);
//   backward ablate_rope_bwd: one launch for d(q_rope) = Rot^T(dq[..., dn:]) and d(k_rope) =
//            Rot^T(sum over heads of dk[..., dn:]) (the rotation is the same for every head of a
//            position, so the heads are summed first); d(q_nope), d(k_nope) are views of dq, dk.
// Rot rotates adjacent pairs (2i, 2i+1) by angle i of the position: (a, b) -> (a c - b s, a s + b c).
// fp32 arithmetic (cos/sin in fp32), one rounding per output; fp32 or bf16 q/k. 8 columns a thread
// (16-byte accesses of bf16) when dn, dr, every base pointer and every stride allow it, one column a
// thread otherwise (which then reads its pair partner).
// Tests: kernels_tests --gtest_filter='*Parity*rope*'. Benchmark: build/bench/kernels_bench --benchmark_filter=rope.
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

// A [B, T, H, width] view whose last dim is contiguous: base pointer and element strides of B, T, H.
template <typename T>
struct RowsView {
  T* data;
  int64_t stride_b, stride_t, stride_h;
};

template <typename T>
RowsView<T> rows_view(const Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), t.stride(0), t.stride(1), t.size(2) == 1 ? 0 : t.stride(2)};
}

struct RopeShape {
  int64_t batch, seq, heads;
  int nope, rope;  // dn, dr
};

// n / d for 32-bit n < 2^31 by a multiply-high and a shift (Granlund-Montgomery, as LibTorch's
// IntDivider): a hardware-free division, where a 32-bit `/` is ~20 instructions and a 64-bit one more.
// The forward kernel divides three times per 16 bytes it moves, which otherwise costs it ~25 % of
// the copy ceiling.
struct FastDivider {
  uint32_t divisor, magic, shift;
  explicit FastDivider(uint32_t d = 1) : divisor(d), shift(0) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// Rotates VEC consecutive rope columns starting at rope column rc (even) of position t by +angle
// (forward) or -angle (backward: the transpose of a rotation is its inverse).
template <int VEC, bool INVERSE>
__device__ __forceinline__ void rotate(float (&v)[VEC], const float* __restrict__ cos, const float* __restrict__ sin,
                                       int64_t t, int half, int rc) {
#pragma unroll
  for (int i = 0; i < VEC; i += 2) {
    const int64_t k = t * half + (rc + i) / 2;
    const float c = cos[k], s = INVERSE ? -sin[k] : sin[k];
    const float a = v[i], b = v[i + 1];
    v[i] = a * c - b * s;
    v[i + 1] = a * s + b * c;
  }
}

struct RopeFwdArgs {
  RopeShape shape;
  FastDivider by_vectors, by_heads, by_seq;  // vectors a row, H, T
};

// One launch for both outputs: items [0, per_tensor) write q, [per_tensor, 2 per_tensor) write k; an
// item is VEC consecutive columns of one output row (grid-stride, consecutive items on consecutive
// lanes: every access coalesced). Indices are 32-bit (the host checks 2 per_tensor < 2^31) and divide
// through FastDivider. The q/k choice selects scalars (pointers, strides), never a kernel-parameter
// struct by reference, which would force the parameters into local memory. VEC == 1 reads the pair
// partner of its column.
template <typename T, int VEC>
__global__ void ablate_rope_fwd(RowsView<const T> q_nope_v, RowsView<const T> q_rope_v, RowsView<const T> k_nope_v,
                                RowsView<const T> k_rope_v, const float* __restrict__ cos,
                                const float* __restrict__ sin, T* __restrict__ q_out, T* __restrict__ k_out,
                                RopeFwdArgs args) {
  const RopeShape& shape = args.shape;
  const uint32_t width = shape.nope + shape.rope, vectors_per_row = args.by_vectors.divisor;
  const uint32_t per_tensor = uint32_t(shape.batch * shape.seq * shape.heads) * vectors_per_row;
  for (uint32_t item = blockIdx.x * blockDim.x + threadIdx.x; item < 2 * per_tensor; item += gridDim.x * blockDim.x) {
    const bool is_k = item >= per_tensor;
    const uint32_t i = is_k ? item - per_tensor : item;
    const uint32_t row = args.by_vectors.div(i);
    const int col = static_cast<int>(i - row * vectors_per_row) * VEC;
    const uint32_t bt = args.by_heads.div(row), h = row - bt * uint32_t(shape.heads);
    const uint32_t b = args.by_seq.div(bt), t = bt - b * uint32_t(shape.seq);
    float v[VEC];
    if (col < shape.nope) {
      const T* base = is_k ? k_nope_v.data : q_nope_v.data;
      const int64_t sb = is_k ? k_nope_v.stride_b : q_nope_v.stride_b, st = is_k ? k_nope_v.stride_t : q_nope_v.stride_t,
                    sh = is_k ? k_nope_v.stride_h : q_nope_v.stride_h;
      load_vec<VEC>(base + b * sb + t * st + h * sh + col, v);
    } else {
      const int rc = col - shape.nope;
      // k_rope's head stride is 0: one head shared by all H.
      const T* base = is_k ? k_rope_v.data : q_rope_v.data;
      const int64_t sb = is_k ? k_rope_v.stride_b : q_rope_v.stride_b, st = is_k ? k_rope_v.stride_t : q_rope_v.stride_t,
                    sh = is_k ? 0 : q_rope_v.stride_h;
      const T* src = base + b * sb + t * st + h * sh;
      if constexpr (VEC == 1) {
        const int even = rc & ~1;
        float pair[2] = {to_float(src[even]), to_float(src[even + 1])};
        rotate<2, false>(pair, cos, sin, t, shape.rope / 2, even);
        v[0] = pair[rc & 1];
      } else {
        load_vec<VEC>(src + rc, v);
        rotate<VEC, false>(v, cos, sin, t, shape.rope / 2, rc);
      }
    }
    store_vec<VEC>((is_k ? k_out : q_out) + int64_t(row) * width + col, v);
  }
}

// Items [0, q_items) write d(q_rope) [B,T,H,dr], [q_items, q_items + k_items) write d(k_rope) [B,T,1,dr].
// dq, dk are contiguous [B,T,H,dn+dr]; only their rope columns are read.
template <typename T, int VEC>
__global__ void ablate_rope_bwd(const T* __restrict__ dq, const T* __restrict__ dk, const float* __restrict__ cos,
                                const float* __restrict__ sin, T* __restrict__ dq_rope, T* __restrict__ dk_rope,
                                RopeShape shape) {
  const int width = shape.nope + shape.rope, vectors_per_row = shape.rope / VEC;
  const int64_t q_items = shape.batch * shape.seq * shape.heads * vectors_per_row;
  const int64_t k_items = shape.batch * shape.seq * vectors_per_row;
  for (int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; item < q_items + k_items;
       item += int64_t(gridDim.x) * blockDim.x) {
    const bool is_k = item >= q_items;
    const int64_t i = is_k ? item - q_items : item;
    const int64_t row = i / vectors_per_row;  // (b, t, h) for q, (b, t) for k
    const int rc = static_cast<int>(i - row * vectors_per_row) * VEC;
    const int64_t t = (is_k ? row : row / shape.heads) % shape.seq;
    const int even = VEC == 1 ? rc & ~1 : rc;
    constexpr int kLoad = VEC == 1 ? 2 : VEC;  // VEC == 1 loads its pair
    float g[kLoad];
    if (!is_k) {
      load_vec<kLoad>(dq + row * width + shape.nope + even, g);
    } else {
#pragma unroll
      for (int j = 0; j < kLoad; ++j) g[j] = 0.f;
      for (int64_t h = 0; h < shape.heads; ++h) {
        float gh[kLoad];
        load_vec<kLoad>(dk + (row * shape.heads + h) * width + shape.nope + even, gh);
#pragma unroll
        for (int j = 0; j < kLoad; ++j) g[j] += gh[j];
      }
    }
    rotate<kLoad, true>(g, cos, sin, t, shape.rope / 2, even);
    float out[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = g[VEC == 1 ? (rc & 1) : j];
    store_vec<VEC>((is_k ? dk_rope : dq_rope) + row * shape.rope + rc, out);
  }
}

constexpr int kThreads = 256;

int64_t grid_for(int64_t items) { return std::min<int64_t>(ceil_div(items, kThreads), int64_t(sm_count()) * 16); }

// 16-byte accesses need every row start of every view on a 16-byte boundary and whole vectors inside
// the nope and rope parts.
bool vectorisable(const RopeShape& shape, std::initializer_list<const Tensor*> views) {
  if (shape.nope % 8 != 0 || shape.rope % 8 != 0) return false;
  for (const Tensor* v : views) {
    if (!aligned16(v->data_ptr())) return false;
    for (int dim = 0; dim < 3; ++dim)
      if (v->size(dim) > 1 && v->stride(dim) * v->element_size() % 16 != 0) return false;
  }
  return true;
}

// A view usable by the kernels: last dim contiguous (other strides arbitrary), else a contiguous copy.
Tensor last_dim_contiguous(const Tensor& t, const Tensor& like, const char* what) {
  TORCH_CHECK(t.is_cuda() && t.device() == like.device(), "rope fused_cuda: ", what, " must be on ", like.device());
  return t.stride(-1) == 1 ? t : t.contiguous();
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& q_nope_in,
                                                const Tensor& q_rope_in, const Tensor& k_nope_in,
                                                const Tensor& k_rope_in, const Tensor& cos_in, const Tensor& sin_in) {
    TORCH_CHECK(q_nope_in.dim() == 4 && q_rope_in.dim() == 4 && k_nope_in.dim() == 4 && k_rope_in.dim() == 4,
                "rope fused_cuda: q_nope, q_rope, k_nope, k_rope must be 4-d [B,T,H,*]");
    const Tensor q_nope = last_dim_contiguous(q_nope_in, q_rope_in, "q_nope");
    const Tensor q_rope = last_dim_contiguous(q_rope_in, q_rope_in, "q_rope");
    const Tensor k_nope = last_dim_contiguous(k_nope_in, q_rope_in, "k_nope");
    const Tensor k_rope = last_dim_contiguous(k_rope_in, q_rope_in, "k_rope");
    const RopeShape shape{q_rope.size(0), q_rope.size(1), q_rope.size(2), static_cast<int>(q_nope.size(3)),
                          static_cast<int>(q_rope.size(3))};
    TORCH_CHECK(q_nope.sizes().slice(0, 3) == q_rope.sizes().slice(0, 3) &&
                    k_nope.sizes() == q_nope.sizes() && k_rope.size(0) == shape.batch &&
                    k_rope.size(1) == shape.seq && k_rope.size(2) == 1 && k_rope.size(3) == shape.rope,
                "rope fused_cuda: expected q_nope/k_nope [B,T,H,dn], q_rope [B,T,H,dr], k_rope [B,T,1,dr]; got ",
                q_nope.sizes(), ", ", q_rope.sizes(), ", ", k_nope.sizes(), ", ", k_rope.sizes());
    TORCH_CHECK(shape.rope % 2 == 0 && cos_in.dim() == 2 && cos_in.size(0) == shape.seq &&
                    cos_in.size(1) == shape.rope / 2 && sin_in.sizes() == cos_in.sizes(),
                "rope fused_cuda: cos/sin must be [T, dr/2] = [", shape.seq, ", ", shape.rope / 2, "], got ",
                cos_in.sizes());
    const auto dtype = q_rope.scalar_type();
    TORCH_CHECK(q_nope.scalar_type() == dtype && k_nope.scalar_type() == dtype && k_rope.scalar_type() == dtype,
                "rope fused_cuda: q and k parts must share one dtype");
    const Tensor cos = on_device(cos_in.to(torch::kFloat), q_rope, "cos");
    const Tensor sin = on_device(sin_in.to(torch::kFloat), q_rope, "sin");
    const auto out_opts = q_rope.options().memory_format(c10::MemoryFormat::Contiguous);
    const std::vector<int64_t> out_sizes = {shape.batch, shape.seq, shape.heads, shape.nope + shape.rope};
    Tensor q_out = torch::empty(out_sizes, out_opts), k_out = torch::empty(out_sizes, out_opts);
    const int64_t rows = shape.batch * shape.seq * shape.heads;
    if (rows > 0) {
      const bool vec = vectorisable(shape, {&q_nope, &q_rope, &k_nope, &k_rope, &q_out});
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_float_or_bf16(dtype, "q", [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto launch = [&](auto vec_c) {
          constexpr int VEC = decltype(vec_c)::value;
          const int64_t vectors = (shape.nope + shape.rope) / VEC, items = 2 * rows * vectors;
          TORCH_CHECK(items < (int64_t{1} << 31) - int64_t(kThreads) * sm_count() * 16,
                      "rope fused_cuda: ", rows, " rows of ", shape.nope + shape.rope,
                      " columns exceed the kernel's 32-bit indexing (2^31 vectors)");
          const RopeFwdArgs args{shape, FastDivider(static_cast<uint32_t>(vectors)),
                                 FastDivider(static_cast<uint32_t>(shape.heads)),
                                 FastDivider(static_cast<uint32_t>(shape.seq))};
          ablate_rope_fwd<T, VEC><<<grid_for(items), kThreads, 0, stream>>>(
              rows_view<const T>(q_nope), rows_view<const T>(q_rope), rows_view<const T>(k_nope),
              rows_view<const T>(k_rope), cos.data_ptr<float>(), sin.data_ptr<float>(),
              static_cast<T*>(q_out.data_ptr()), static_cast<T*>(k_out.data_ptr()), args);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        if (vec)
          launch(std::integral_constant<int, 8>{});
        else
          launch(std::integral_constant<int, 1>{});
      });
    }
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["nope"] = static_cast<int64_t>(shape.nope);
    return {q_out, k_out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &cos = saved[0], &sin = saved[1];
    const int64_t nope = ctx->saved_data["nope"].toInt();
    const Tensor& some = grads[0].defined() ? grads[0] : grads[1];
    if (!some.defined()) return {Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
    // An unused output has an undefined gradient: zeros keep one kernel for all cases (rare).
    const Tensor dq = (grads[0].defined() ? grads[0] : torch::zeros_like(some)).contiguous();
    const Tensor dk = (grads[1].defined() ? grads[1].to(dq.scalar_type()) : torch::zeros_like(dq)).contiguous();
    const RopeShape shape{dq.size(0), dq.size(1), dq.size(2), static_cast<int>(nope),
                          static_cast<int>(dq.size(3) - nope)};
    Tensor dq_rope = torch::empty({shape.batch, shape.seq, shape.heads, shape.rope}, dq.options());
    Tensor dk_rope = torch::empty({shape.batch, shape.seq, 1, shape.rope}, dq.options());
    const int64_t rows = shape.batch * shape.seq * shape.heads;
    if (rows > 0) {
      const bool vec = shape.nope % 8 == 0 && shape.rope % 8 == 0 && aligned16(dq.data_ptr()) &&
                       aligned16(dk.data_ptr());
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_float_or_bf16(dq.scalar_type(), "dq", [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto launch = [&](auto vec_c) {
          constexpr int VEC = decltype(vec_c)::value;
          const int64_t items = (rows + shape.batch * shape.seq) * (shape.rope / VEC);
          ablate_rope_bwd<T, VEC><<<grid_for(items), kThreads, 0, stream>>>(
              static_cast<const T*>(dq.data_ptr()), static_cast<const T*>(dk.data_ptr()), cos.data_ptr<float>(),
              sin.data_ptr<float>(), static_cast<T*>(dq_rope.data_ptr()), static_cast<T*>(dk_rope.data_ptr()), shape);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        };
        if (vec)
          launch(std::integral_constant<int, 8>{});
        else
          launch(std::integral_constant<int, 1>{});
      });
    }
    return {dq.narrow(-1, 0, nope), dq_rope, dk.narrow(-1, 0, nope), dk_rope, Tensor(), Tensor()};
  }
};

}  // namespace

std::pair<Tensor, Tensor> rope(const Tensor& q_nope, const Tensor& q_rope, const Tensor& k_nope, const Tensor& k_rope,
                               const Tensor& cos, const Tensor& sin) {
  auto out = RopeFunction::apply(q_nope, q_rope, k_nope, k_rope, cos, sin);
  return {out[0], out[1]};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {

ABLATE_REGISTER_BACKENDS(rope_fused_cuda) {
  registry.rope("fused_cuda", ABLATE_CUDA_ONLY(&fused::rope));
}

}  // namespace ablate::kernels
