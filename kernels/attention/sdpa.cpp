// kernels/attention/sdpa.cpp: the vendor backends of seam `attention`: LibTorch's scaled-dot-product
// attention kernels (FlashAttention-2, cuDNN fused attention, CUTLASS memory-efficient attention), each
// called through its own ATen op so the kernel that runs is the one the catalog resolved (no silent
// choice inside LibTorch). Head dims are zero-padded to what the kernel accepts and the output sliced
// back; the explicit `scale` keeps the padding exact. CUDA only.
// Tests: kernels_tests --gtest_filter='Parity*attention*sdpa*' (tests/kernels/parity_test.cpp; run on a
// CUDA machine, skipped with the catalog's reason elsewhere); kernel-name patterns:
// tests/kernels/catalog_test.cpp and tests/profiling/cupti_names_test.cpp.
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention.h>

#include <algorithm>
#include <optional>

#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

enum class SdpaKernel { flash, cudnn, efficient };

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Zero-pads the last dim to `width` (no copy when it already has it) and makes it unit-stride.
torch::Tensor pad_head_dim(const torch::Tensor& t, int64_t width) {
  if (t.size(-1) == width) return t.stride(-1) == 1 ? t : t.contiguous();
  return torch::constant_pad_nd(t, {0, width - t.size(-1)});
}

const char* kernel_name(SdpaKernel kernel) {
  switch (kernel) {
    case SdpaKernel::flash:
      return "sdpa_flash";
    case SdpaKernel::cudnn:
      return "sdpa_cudnn";
    case SdpaKernel::efficient:
      return "sdpa_efficient";
  }
  return "sdpa";
}

torch::Tensor sdpa_attention(SdpaKernel kernel, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale) {
  const char* name = kernel_name(kernel);
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, name, ": q, k, v must be [B, H, T, D]");
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), name, ": needs CUDA tensors");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), name,
              ": q, k, v need one dtype");
  const bool half = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  // cuDNN takes fp32 without an error but returns NaN (LibTorch 2.11, cuDNN 9.19, H100): refuse it here.
  TORCH_CHECK(half || kernel == SdpaKernel::efficient, name, ": needs bf16 or fp16 inputs, got ", q.scalar_type());
  TORCH_CHECK(kernel != SdpaKernel::efficient || half || q.scalar_type() == at::kFloat, name,
              ": needs fp32, bf16 or fp16 inputs, got ", q.scalar_type());

  // Every kernel wants head dims that are multiples of 8; flash also wants v's head dim equal to
  // q/k's. Zero columns add nothing to q.k or to the output columns we keep.
  const int64_t dv = v.size(-1);
  int64_t width_qk = round_up(q.size(-1), 8);
  int64_t width_v = round_up(dv, 8);
  if (kernel == SdpaKernel::flash) width_qk = width_v = std::max(width_qk, width_v);
  auto qp = pad_head_dim(q, width_qk), kp = pad_head_dim(k, width_qk), vp = pad_head_dim(v, width_v);
  // cuDNN's backward rejects a one-position sequence (s_q = s_kv = 1). A trailing zero position is
  // exact under the causal mask: position 0 never sees it, and its own output is sliced away.
  const int64_t T = q.size(-2);
  const bool pad_sequence = kernel == SdpaKernel::cudnn && T == 1;
  if (pad_sequence) {
    qp = torch::constant_pad_nd(qp, {0, 0, 0, 1});
    kp = torch::constant_pad_nd(kp, {0, 0, 0, 1});
    vp = torch::constant_pad_nd(vp, {0, 0, 0, 1});
  }
  const bool need_logsumexp = torch::GradMode::is_enabled() &&
                              (q.requires_grad() || k.requires_grad() || v.requires_grad());  // backward needs it

  torch::Tensor out;
  switch (kernel) {
    case SdpaKernel::flash:
      out = std::get<0>(at::_scaled_dot_product_flash_attention(qp, kp, vp, /*dropout_p=*/0.0, /*is_causal=*/true,
                                                                /*return_debug_mask=*/false, scale));
      break;
    case SdpaKernel::cudnn:
      out = std::get<0>(at::_scaled_dot_product_cudnn_attention(
          qp, kp, vp, /*attn_bias=*/std::nullopt, need_logsumexp, /*dropout_p=*/0.0,
          /*is_causal=*/true, /*return_debug_mask=*/false, scale));
      break;
    case SdpaKernel::efficient:
      out = std::get<0>(at::_scaled_dot_product_efficient_attention(qp, kp, vp, /*attn_bias=*/std::nullopt,
                                                                    need_logsumexp, /*dropout_p=*/0.0,
                                                                    /*is_causal=*/true, scale));
      break;
  }
  if (pad_sequence) out = out.narrow(-2, 0, T);
  return out.size(-1) == dv ? out : out.narrow(-1, 0, dv);
}

// The AttentionFn of one SDPA kernel.
template <SdpaKernel kernel>
torch::Tensor sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  return sdpa_attention(kernel, q, k, v, scale);
}

}  // namespace

ABLATE_REGISTER_BACKENDS(attention_sdpa) {
  registry.attention("sdpa_flash", &sdpa<SdpaKernel::flash>);
  registry.attention("sdpa_cudnn", &sdpa<SdpaKernel::cudnn>);
  registry.attention("sdpa_efficient", &sdpa<SdpaKernel::efficient>);
}

}  // namespace ablate::kernels
