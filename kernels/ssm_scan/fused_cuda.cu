// kernels/ssm_scan/fused_cuda.cu: backend `fused_cuda` of the `ssm_scan` seam (Mamba-3 SISO, docs/model.md "M";
// contract SsmScanFn in kernels/seams.h): the host side, the autograd function and the registration. It owns
// the launches (shared-memory sizing, the state scans or the SIMT chunk states and state passes, the
// output kernel; the backward chunk and its overlapping finish launch), the argument checks and dtype
// conversions, and the catalog row. The kernels are in the fused_cuda_*.cuh headers beside it, all
// compiled here as one translation unit; kernels/ssm_scan/README.md maps the files and derives the algebra.
// Tests: kernels_tests --gtest_filter='*Parity*ssm_scan*:FusedSsmScan*'.
// Benchmark: bench/kernels_bench --benchmark_filter='ssm/fused_cuda' (kernels/ssm_scan/bench.cpp).
// Without a CUDA compiler this file is compiled as C++ with everything but the registration left out
// (kernels/registry.h): the row stays listed, unavailable as "built without CUDA".
#include "kernels/registry.h"

#if defined(__CUDACC__)
#include <algorithm>
#include <vector>

#include "kernels/ssm_scan/fused_cuda_backward.cuh"
#include "kernels/ssm_scan/fused_cuda_forward.cuh"
#include "kernels/ssm_scan/fused_cuda_state_scans.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

// Raises a kernel's dynamic shared-memory limit to `bytes` where the device allows it.
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what, const Params& p) {
  allow_dynamic_smem(kernel, bytes, "ssm_scan fused_cuda: ", what, " at chunk ", p.L, ", P ", p.P, ", N ", p.N,
                     " (use a smaller chunk, 16, 32 or 48, or the reference backend)");
}

// Shared-memory bytes of a per-chunk kernel: its tensor-core layout (TcLayout, measured by a Carve from
// address 0) or the SIMT path's simt_floats fp32.
template <typename TX, typename TQK, class TcLayout>
size_t smem_bytes(int64_t L, int64_t P, int64_t N, size_t simt_floats) {
  if constexpr (kTensorCores<TX, TQK>) {
    Carve carve;
    const TcLayout layout(carve, L, P, N);
    (void)layout;
    return carve.used;
  } else {
    return simt_floats * sizeof(float);
  }
}

// One launch of a per-chunk kernel (grid = chunks x heads x batch, kThreads each) with `bytes` of shared memory.
template <class Kernel>
void launch_chunks(Kernel kernel, size_t bytes, const char* what, const Params& p, cudaStream_t stream) {
  allow_smem(kernel, bytes, what, p);
  kernel<<<dim3(p.nC, p.H, p.B), kThreads, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// A launch that may start while the kernel before it on the stream still runs (programmatic dependent
// launch: once every block of that kernel has run griddepcontrol.launch_dependents); the kernel itself
// waits for what it reads (the finish launch: wait_for_chunks). Capturable in a CUDA graph.
template <class Kernel>
void launch_overlapping_previous(Kernel kernel, int64_t blocks, int threads, const Params& p, cudaStream_t stream) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

// The state elements a thread of a SIMT state pass takes (a thread per state element (b, h, p, n) or
// four): 4 (16-byte accesses) when every state pointer it touches is 16-byte aligned (the buffers this
// file allocates are; h0, dh_last come from the caller), else 1.
int state_pass_width(const Params& p) {
  const void* pointers[] = {p.h0, p.h_last, p.states, p.dh_last, p.h_last_saved, p.dstates, p.dh0};
  const bool aligned = std::all_of(std::begin(pointers), std::end(pointers),
                                   [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; });
  return aligned ? 4 : 1;
}

// One launch of a state-passing kernel (forward or reverse).
void launch_state_pass(bool forward, const Params& p, cudaStream_t stream) {
  const int V = state_pass_width(p);
  const bool aligned = V == 4;
  const dim3 grid(ceil_div(int64_t(p.P) * p.N / V, kThreads), p.B * p.H);
  auto* kernel = forward ? (aligned ? ablate_ssm_scan_fwd_state_pass<4> : ablate_ssm_scan_fwd_state_pass<1>)
                         : (aligned ? ablate_ssm_scan_bwd_state_pass<4> : ablate_ssm_scan_bwd_state_pass<1>);
  kernel<<<grid, kThreads, 0, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One launch of a chunk-state scan (tensor-core path): a block per (slice of kScanRows rows of P, head, batch).
template <class Kernel>
void launch_state_scan(Kernel kernel, bool backward, const char* what, const Params& p, cudaStream_t stream) {
  Carve carve;
  const StateScanTc layout(carve, p.L, std::min<int>(kScanRows, p.P), p.N, backward);
  (void)layout;
  allow_smem(kernel, carve.used, what, p);
  kernel<<<dim3(ceil_div(p.P, kScanRows), p.H, p.B), kThreads, carve.used, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Whether the tensor-core kernels run their kFixedShape instantiation: bf16 x at that shape.
template <typename TX, typename TQK>
bool runs_fixed_shape(int64_t L, int64_t P, int64_t N) {
  return kTensorCores<TX, TQK> && is_fixed_shape(static_cast<int>(L), static_cast<int>(P), static_cast<int>(N));
}

// The states at chunk boundaries, forward (S_c) or backward (the adjoints dS_end(c)): one state scan on the
// tensor-core path; per-chunk products then a state pass on the SIMT path.
template <typename TX, typename TQK>
void launch_chunk_states(bool backward, const Params& p, cudaStream_t stream) {
  if constexpr (kTensorCores<TX, TQK>) {
    const bool fixed = runs_fixed_shape<TX, TQK>(p.L, p.P, p.N);
    const auto kernel = backward ? (fixed ? ablate_ssm_scan_bwd_state_scan<TQK, true> : ablate_ssm_scan_bwd_state_scan<TQK>)
                                 : (fixed ? ablate_ssm_scan_fwd_state_scan<TQK, true> : ablate_ssm_scan_fwd_state_scan<TQK>);
    launch_state_scan(kernel, backward, backward ? "the backward state scan" : "the forward state scan", p, stream);
  } else {
    const size_t floats = backward ? chunk_dstate_smem_floats(p.L, p.P, p.N) : chunk_state_smem_floats(p.L, p.P, p.N);
    const char* what = backward ? "the backward chunk-state kernel" : "the forward chunk-state kernel";
    launch_chunks(backward ? ablate_ssm_scan_bwd_chunk_dstate<TX, TQK> : ablate_ssm_scan_fwd_chunk_state<TX, TQK>,
                  floats * sizeof(float), what, p, stream);
    launch_state_pass(/*forward=*/!backward, p, stream);
  }
}

void check_supported(int64_t P, int64_t N, int64_t L) {
  TORCH_CHECK(P % 16 == 0 && P >= 16 && P <= kMaxDim && N % 16 == 0 && N >= 16 && N <= kMaxDim,
              "ssm_scan fused_cuda: head dim P and state N must be multiples of 16 in [16, 128], got P ", P, ", N ", N,
              "; use the reference backend for other shapes");
  TORCH_CHECK(L % 16 == 0 && L >= 16 && L <= kMaxChunk, "ssm_scan fused_cuda: chunk must be 16, 32, 48 or 64, got ", L,
              "; use the reference backend for other chunks");
}

template <class Fn>
void with_io_types(at::ScalarType tx, at::ScalarType tqk, Fn&& fn) {
  with_float_or_bf16(tx, "x", [&](auto xtag) {
    with_float_or_bf16(tqk, "q", [&](auto qtag) { fn(xtag, qtag); });
  });
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// A [B,T,H,P] tensor's batch and token strides (elements); rows_in_place has checked the rest.
RowStrides strides_of(const Tensor& t) { return t.defined() ? RowStrides{t.stride(0), t.stride(1)} : RowStrides{0, 0}; }

// Whether the kernels read a [B,T,H,P] view in place: heads P apart and elements adjacent (rows of H P
// contiguous elements), the pointer 16-byte aligned and the batch and token strides multiples of 8
// elements, so each access of a contiguous tensor's width stays aligned (RowStrides). The M block's x
// and z (slices of its input projection) qualify; anything else is copied once.
bool rows_in_place(const Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) == t.size(3) && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 &&
         t.stride(1) % 8 == 0 && t.stride(0) % 8 == 0;
}

// Params with the inputs and sizes filled in: in = {x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}.
Params input_params(const std::vector<Tensor>& in, int64_t L) {
  const Tensor &x = in[0], &q = in[1], &z = in[7];
  Params p{};
  p.x = x.data_ptr(), p.z = z.defined() ? z.data_ptr() : nullptr, p.q = q.data_ptr(), p.k = in[2].data_ptr();
  p.log_alpha = in[3].data_ptr<float>(), p.beta = in[4].data_ptr<float>(), p.gamma = in[5].data_ptr<float>();
  p.D = in[6].data_ptr<float>(), p.h0 = ptr_or_null(in[8]), p.x_prev = ptr_or_null(in[9]), p.k_prev = ptr_or_null(in[10]);
  p.B = x.size(0), p.T = x.size(1), p.H = x.size(2), p.P = x.size(3), p.N = q.size(3), p.L = L;
  p.xs = strides_of(x), p.zs = strides_of(z);
  p.nC = (p.T + L - 1) / L;
  return p;
}

class SsmScanFunction : public torch::autograd::Function<SsmScanFunction> {
 public:
  // Inputs already converted (by ssm_scan below): x, z one dtype; q, k one dtype; the rest fp32.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                                                const Tensor& q, const Tensor& k, const Tensor& log_alpha,
                                                const Tensor& beta, const Tensor& gamma, const Tensor& D,
                                                const Tensor& z_in, const Tensor& h0_in, const Tensor& x_prev_in,
                                                const Tensor& k_prev_in, int64_t chunk, bool has_z, bool has_h0,
                                                bool has_prev) {
    const Tensor z = has_z ? z_in : Tensor(), h0 = has_h0 ? h0_in : Tensor();
    const Tensor x_prev = has_prev ? x_prev_in : Tensor(), k_prev = has_prev ? k_prev_in : Tensor();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = q.size(3);
    const int64_t L = chunk, nC = (T + L - 1) / L;
    // An output without a gradient reaches the backward undefined, not as zeros: the model never uses
    // h_last, and autograd would otherwise fill a [B,H,P,N] fp32 zero gradient for it on every call.
    ctx->set_materialize_grads(false);
    const auto f32 = x.options().dtype(torch::kFloat);
    Tensor y = torch::empty({B, T, H, P}, x.options());  // in x's dtype, as the contract says
    Tensor h_last = torch::empty({B, H, P, N}, f32);
    // The tensor-core path keeps S_c in bf16 (Params::states_lo), written by the state scan; the SIMT path
    // carries Z_c, then S_c, in the fp32 buffer.
    const bool tensor_cores = x.scalar_type() == torch::kBFloat16;
    // Lam_c (the chunks' summed log alpha) only for the SIMT path's state passes: the state scans form it.
    Tensor states = tensor_cores ? Tensor() : torch::empty({B, H, nC, P, N}, f32);
    Tensor lam = tensor_cores ? Tensor() : torch::empty({B, H, nC}, f32);
    Tensor states_lo = tensor_cores ? torch::empty({B, H, nC, P, N}, x.options()) : Tensor();
    if (T == 0) {
      h_last = h0.defined() ? h0.clone() : torch::zeros({B, H, P, N}, f32);
    } else {
      Params p = input_params({x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}, L);
      p.states = tensor_cores ? nullptr : states.data_ptr<float>(), p.lam = const_cast<float*>(ptr_or_null(lam));
      p.states_lo = tensor_cores ? static_cast<bf16*>(states_lo.data_ptr()) : nullptr;
      p.y = y.data_ptr(), p.h_last = h_last.data_ptr<float>();
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_io_types(x.scalar_type(), q.scalar_type(), [&](auto xtag, auto qtag) {
        using TX = typename decltype(xtag)::type;
        using TQK = typename decltype(qtag)::type;
        launch_chunk_states<TX, TQK>(/*backward=*/false, p, stream);
        launch_chunks(runs_fixed_shape<TX, TQK>(L, P, N) ? ablate_ssm_scan_fwd_output<TX, TQK, true>
                                                        : ablate_ssm_scan_fwd_output<TX, TQK>,
                      smem_bytes<TX, TQK, OutputTc>(L, P, N, output_smem_floats(L, P, N)), "the forward output kernel",
                      p, stream);
      });
    }
    ctx->save_for_backward({x, q, k, log_alpha, beta, gamma, D, z_in, h0_in, x_prev_in, k_prev_in,
                            tensor_cores ? states_lo : states, lam, h_last});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["has_z"] = has_z;
    ctx->saved_data["has_h0"] = has_h0;
    ctx->saved_data["has_prev"] = has_prev;
    return {y, h_last};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const Tensor &x = s[0], &q = s[1], &k = s[2], &log_alpha = s[3], &beta = s[4], &gamma = s[5], &D = s[6];
    const bool has_prev = ctx->saved_data["has_prev"].toBool();
    const Tensor z = ctx->saved_data["has_z"].toBool() ? s[7] : Tensor();
    const Tensor h0 = ctx->saved_data["has_h0"].toBool() ? s[8] : Tensor();
    const Tensor x_prev = has_prev ? s[9] : Tensor(), k_prev = has_prev ? s[10] : Tensor();
    const Tensor &states = s[11], &lam = s[12], &h_last = s[13];
    const int64_t L = ctx->saved_data["chunk"].toInt();
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = q.size(3);
    const int64_t nC = (T + L - 1) / L;
    const auto f32 = x.options().dtype(torch::kFloat);
    // The gradient of y in y's dtype (x's), as autograd hands it: the kernels read it so.
    Tensor dout = grads[0].defined() ? on_device(grads[0].to(x.scalar_type()), x, "grad of y")
                                     : torch::zeros({B, T, H, P}, x.options());
    Tensor dh_last = grads[1].defined() ? on_device(grads[1].to(torch::kFloat), x, "grad of h_last") : Tensor();
    // dx and dz contiguous whatever x's and z's layout (the kernels write them at row_index).
    Tensor dx = torch::empty(x.sizes(), x.options()), dq = torch::empty_like(q), dk = torch::empty_like(k);
    Tensor dz = z.defined() ? torch::empty(z.sizes(), z.options()) : Tensor();
    Tensor dla = torch::empty_like(log_alpha), dbeta = torch::empty_like(beta), dgamma = torch::empty_like(gamma);
    Tensor dh0 = h0.defined() ? torch::empty_like(h0) : Tensor();
    Tensor dx_prev = x_prev.defined() ? torch::empty_like(x_prev) : Tensor();
    Tensor dk_prev = k_prev.defined() ? torch::empty_like(k_prev) : Tensor();
    Tensor dD;
    if (T == 0) {
      if (h0.defined()) dh0 = dh_last.defined() ? dh_last.clone() : torch::zeros_like(h0);
      if (x_prev.defined()) dx_prev.zero_(), dk_prev.zero_();
      dD = torch::zeros_like(D);
    } else {
      const bool tensor_cores = states.scalar_type() == torch::kBFloat16;  // saved as S_c in bf16
      // dZ_c, then the adjoints, in fp32 on the SIMT path; the tensor-core path's state scan writes the
      // adjoints in bf16 (dstates_lo) only.
      Tensor dstates = tensor_cores ? Tensor() : torch::empty({B, H, nC, P, N}, f32), r = torch::empty({B, T, H}, f32);
      Tensor dstates_lo = tensor_cores ? torch::empty({B, H, nC, P, N}, states.options()) : Tensor();
      Tensor gprev_x = torch::empty({B, H, nC, P}, f32), gprev_k = torch::empty({B, H, nC, N}, f32);
      Tensor last_x = torch::empty({B, H, nC, P}, f32), last_k = torch::empty({B, H, nC, N}, f32);
      // <dh_last, h_last> (d log alpha's start) only when h_last has a gradient (below).
      Tensor dD_part = torch::empty({B, H, nC}, f32), last_dot;
      Tensor r_half_sums = torch::empty({B, H, nC, kRowHalves}, f32.dtype(torch::kDouble));
      Tensor chunks_done = torch::empty({B, H}, f32.dtype(torch::kInt));  // zeroed on the stream below
      dD = torch::empty_like(D);
      Params p = input_params({x, q, k, log_alpha, beta, gamma, D, z, h0, x_prev, k_prev}, L);
      if (tensor_cores) {
        p.states_lo = static_cast<bf16*>(const_cast<void*>(states.data_ptr()));
        p.dstates_lo = static_cast<bf16*>(dstates_lo.data_ptr());
      } else {
        p.states = const_cast<float*>(states.data_ptr<float>());
      }
      p.lam = const_cast<float*>(ptr_or_null(lam));
      p.dout = dout.data_ptr(), p.dh_last = dh_last.defined() ? dh_last.data_ptr<float>() : nullptr;
      p.h_last_saved = h_last.data_ptr<float>();
      p.dstates = tensor_cores ? nullptr : dstates.data_ptr<float>();
      p.dh0 = dh0.defined() ? dh0.data_ptr<float>() : nullptr;
      p.dx = dx.data_ptr(), p.dz = dz.defined() ? dz.data_ptr() : nullptr, p.dq = dq.data_ptr(), p.dk = dk.data_ptr();
      p.dbeta = dbeta.data_ptr<float>(), p.dgamma = dgamma.data_ptr<float>(), p.r = r.data_ptr<float>();
      p.r_half_sums = r_half_sums.data_ptr<double>(), p.chunks_done = chunks_done.data_ptr<int>();
      p.dlog_alpha = dla.data_ptr<float>();
      p.gprev_x = gprev_x.data_ptr<float>(), p.gprev_k = gprev_k.data_ptr<float>();
      p.last_x = last_x.data_ptr<float>(), p.last_k = last_k.data_ptr<float>(), p.dD_part = dD_part.data_ptr<float>();
      p.dD = dD.data_ptr<float>();
      if (dh_last.defined()) {  // <dh_last, h_last> in parts, one per warp of the backward state scan or pass
        p.dot_parts = tensor_cores ? static_cast<int>(ceil_div(P, kScanRows)) * (kThreads / 32)
                                   : static_cast<int>(P * N / state_pass_width(p) / 32);
        last_dot = torch::empty({B, H, p.dot_parts}, f32);
        p.last_dot = last_dot.data_ptr<float>();
      }
      p.dx_prev = dx_prev.defined() ? dx_prev.data_ptr<float>() : nullptr;
      p.dk_prev = dk_prev.defined() ? dk_prev.data_ptr<float>() : nullptr;
      const auto stream = at::cuda::getCurrentCUDAStream();
      with_io_types(x.scalar_type(), q.scalar_type(), [&](auto xtag, auto qtag) {
        using TX = typename decltype(xtag)::type;
        using TQK = typename decltype(qtag)::type;
        launch_chunk_states<TX, TQK>(/*backward=*/true, p, stream);
        C10_CUDA_CHECK(cudaMemsetAsync(p.chunks_done, 0, chunks_done.nbytes(), stream));
        launch_chunks(runs_fixed_shape<TX, TQK>(L, P, N) ? ablate_ssm_scan_bwd_chunk<TX, TQK, true>
                                                        : ablate_ssm_scan_bwd_chunk<TX, TQK>,
                      smem_bytes<TX, TQK, BwdChunkTc>(L, P, N, bwd_chunk_smem_floats(L, P, N)),
                      "the backward chunk kernel", p, stream);
        launch_overlapping_previous(ablate_ssm_scan_bwd_finish<TX, TQK>, finish_blocks(B, H, nC), kFinishThreads, p, stream);
      });
    }
    return {dx, dq, dk, dla, dbeta, dgamma, dD, dz, dh0, dx_prev, dk_prev, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

SsmScanOutputs ssm_scan(const SsmScanInputs& in) {
  const auto& x = in.x;
  TORCH_CHECK(x.defined() && x.dim() == 4, "ssm_scan fused_cuda: x must be [B,T,H,P]");
  TORCH_CHECK(in.q.defined() && in.q.dim() == 4 && in.k.defined() && in.k.sizes() == in.q.sizes() &&
                  in.q.size(0) == x.size(0) && in.q.size(1) == x.size(1) && in.q.size(2) == x.size(2),
              "ssm_scan fused_cuda: q and k must be [B,T,H,N] matching x ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), P = x.size(3), N = in.q.size(3);
  check_supported(P, N, in.chunk);
  for (const auto* t : {&in.log_alpha, &in.beta, &in.gamma})
    TORCH_CHECK(t->defined() && t->sizes() == at::IntArrayRef({B, T, H}),
                "ssm_scan fused_cuda: log_alpha, beta, gamma must be [B,T,H]");
  TORCH_CHECK(in.D.defined() && in.D.sizes() == at::IntArrayRef({H}), "ssm_scan fused_cuda: D must be [H]");
  TORCH_CHECK(!in.z.defined() || in.z.sizes() == x.sizes(), "ssm_scan fused_cuda: z must be [B,T,H,P] like x");
  TORCH_CHECK(!in.h0.defined() || in.h0.sizes() == at::IntArrayRef({B, H, P, N}),
              "ssm_scan fused_cuda: h0 must be [B,H,P,N]");
  TORCH_CHECK(in.x_prev.defined() == in.k_prev.defined(), "ssm_scan fused_cuda: x_prev and k_prev come together");
  if (in.x_prev.defined())
    TORCH_CHECK(in.x_prev.sizes() == at::IntArrayRef({B, H, P}) && in.k_prev.sizes() == at::IntArrayRef({B, H, N}),
                "ssm_scan fused_cuda: x_prev must be [B,H,P] and k_prev [B,H,N]");
  TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16,
              "ssm_scan fused_cuda: x must be fp32 or bf16, got ", x.scalar_type());
  TORCH_CHECK(in.q.scalar_type() == torch::kFloat || in.q.scalar_type() == torch::kBFloat16,
              "ssm_scan fused_cuda: q must be fp32 or bf16, got ", in.q.scalar_type());
  // Conversions happen here, under autograd, so their backward returns each gradient in its input's dtype.
  auto fp32 = [&](const Tensor& t, const char* what) {
    return t.defined() ? on_device(t.to(torch::kFloat), x, what) : Tensor();
  };
  // x and z as the M block hands them (views into its input projection) are read in place.
  auto rows_ready = [&](const Tensor& t, const char* what) {
    TORCH_CHECK(t.is_cuda(), "fused_cuda: ", what, " must be a CUDA tensor");
    TORCH_CHECK(t.device() == x.device(), "fused_cuda: ", what, " is on ", t.device(), ", expected ", x.device());
    return rows_in_place(t) ? t : t.contiguous();
  };
  const Tensor xc = rows_ready(x, "x");
  const Tensor zc = in.z.defined() ? rows_ready(in.z.to(x.scalar_type()), "z") : Tensor();
  const Tensor qc = on_device(in.q, x, "q"), kc = on_device(in.k.to(in.q.scalar_type()), x, "k");
  // Autograd functions take no undefined tensors: an absent optional input travels as an empty
  // placeholder, with a flag saying it is absent.
  const auto placeholder = torch::empty({0}, x.options().dtype(torch::kFloat));
  auto or_placeholder = [&](const Tensor& t) { return t.defined() ? t : placeholder; };
  auto out = SsmScanFunction::apply(xc, qc, kc, fp32(in.log_alpha, "log_alpha"), fp32(in.beta, "beta"),
                                    fp32(in.gamma, "gamma"), fp32(in.D, "D"), or_placeholder(zc),
                                    or_placeholder(fp32(in.h0, "h0")), or_placeholder(fp32(in.x_prev, "x_prev")),
                                    or_placeholder(fp32(in.k_prev, "k_prev")), in.chunk, in.z.defined(),
                                    in.h0.defined(), in.x_prev.defined());
  return {out[0], out[1]};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__

namespace ablate::kernels {
ABLATE_REGISTER_BACKENDS(ssm_scan_fused_cuda) {
  registry.ssm_scan("fused_cuda", ABLATE_CUDA_ONLY(&fused::ssm_scan));
}

}  // namespace ablate::kernels
