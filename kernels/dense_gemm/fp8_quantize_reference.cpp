// kernels/dense_gemm/fp8_quantize_reference.cpp: quantize_reference, quantize_stacked_reference,
// quantize_grouped_reference, padded_group_ends and max_finite (fp8_quantize.h): the arithmetic the CUDA
// kernels of fp8_quantize.cu reproduce bit for bit.
#include <limits>

#include "kernels/dense_gemm/fp8_quantize.h"

namespace ablate::kernels::fp8 {
namespace {

using torch::Tensor;

// scale from amax (fp32), as fp8_quantize.cu's scale_from_amax.
Tensor scale_from_amax(const Tensor& amax, float fp8_max, bool power_of_two) {
  auto scale = torch::where(amax > 0, fp8_max / amax, torch::ones_like(amax));
  // Rounding down to a power of two keeps the sign and exponent bits of a positive normal float.
  if (power_of_two) scale = scale.view(torch::kInt32).bitwise_and(static_cast<int32_t>(0xff800000u)).view(torch::kFloat);
  return torch::where(torch::isfinite(amax), scale, torch::full_like(scale, std::numeric_limits<float>::quiet_NaN()));
}

Tensor cast(const Tensor& x, const Tensor& scale, const QuantizeOptions& o) {
  const float fp8_max = max_finite(o.dtype);
  return (x * scale).clamp(-fp8_max, fp8_max).to(o.dtype);
}

void check_rowwise(const QuantizeOptions& o, const char* what) {
  TORCH_CHECK(o.scaling == Scaling::rowwise, "fp8 ", what, ": only rowwise scaling");
}

// Float bits of a non-negative fp32 amax as int32 (the history's entries): integer order is float order.
Tensor amax_bits(const Tensor& x) { return x.abs().amax().reshape({1}).contiguous().view(torch::kInt32); }

}  // namespace

float max_finite(at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat8_e4m3fn || dtype == at::kFloat8_e5m2,
              "fp8: the FP8 dtype must be float8_e4m3fn or float8_e5m2, got ", dtype);
  return dtype == at::kFloat8_e4m3fn ? 448.0f : 57344.0f;
}

Quantized quantize_reference(const Tensor& x_in, const QuantizeOptions& o) {
  TORCH_CHECK(x_in.dim() == 2, "fp8 quantize: x must be 2-D, got ", x_in.sizes());
  const float fp8_max = max_finite(o.dtype);
  const auto x = x_in.to(torch::kFloat);
  const auto magnitude = x.abs();
  Quantized q;
  if (o.scaling == Scaling::tensorwise) {
    const auto scale = scale_from_amax(magnitude.amax().reshape({1}), fp8_max, o.power_of_two_scales);
    if (o.rows) q.rows = cast(x, scale, o), q.rows_inverse = scale.reciprocal();
    if (o.cols) q.cols = cast(x, scale, o).t().contiguous(), q.cols_inverse = scale.reciprocal();
    return q;
  }
  if (o.rows) {
    const auto scale = scale_from_amax(magnitude.amax(1), fp8_max, o.power_of_two_scales);
    q.rows = cast(x, scale.unsqueeze(1), o);
    q.rows_inverse = scale.reciprocal();
  }
  if (o.cols) {
    const auto scale = scale_from_amax(magnitude.amax(0), fp8_max, o.power_of_two_scales);
    q.cols = cast(x, scale.unsqueeze(0), o).t().contiguous();
    q.cols_inverse = scale.reciprocal();
  }
  return q;
}

Tensor new_amax_history(const torch::Device& device) {
  return torch::zeros({kAmaxHistory + 2}, torch::dtype(torch::kInt32).device(device));
}

void check_amax_history(const Tensor& history, const Tensor& x, const QuantizeOptions& o) {
  TORCH_CHECK(o.scaling == Scaling::tensorwise, "fp8 quantize_delayed: delayed scaling is tensorwise only");
  TORCH_CHECK(history.dim() == 1 && history.size(0) == kAmaxHistory + 2 && history.scalar_type() == torch::kInt32 &&
                  history.is_contiguous() && history.device() == x.device(),
              "fp8 quantize_delayed: the amax history must be new_amax_history()'s int32 [", kAmaxHistory + 2,
              "] on x's device, got ", history.scalar_type(), " ", history.sizes(), " on ", history.device());
}

Quantized quantize_delayed_reference(const Tensor& x_in, Tensor& history, const QuantizeOptions& o) {
  TORCH_CHECK(x_in.dim() == 2, "fp8 quantize_delayed: x must be 2-D, got ", x_in.sizes());
  check_amax_history(history, x_in, o);
  const float fp8_max = max_finite(o.dtype);
  const auto x = x_in.to(torch::kFloat);
  const auto past = history.narrow(0, 0, kAmaxHistory);
  const auto scale = scale_from_amax(past.amax().reshape({1}).view(torch::kFloat), fp8_max, o.power_of_two_scales);
  const auto scaled = torch::where(torch::isfinite(x), x * scale, torch::full_like(x, std::numeric_limits<float>::quiet_NaN()));
  const auto quantized = scaled.clamp(-fp8_max, fp8_max).to(o.dtype);
  Quantized q;
  if (o.rows) q.rows = quantized, q.rows_inverse = scale.reciprocal();
  if (o.cols) q.cols = quantized.t().contiguous(), q.cols_inverse = scale.reciprocal();
  if (x.numel() == 0) return q;  // no pass ran: the history stays
  past.copy_(torch::cat({amax_bits(x), past.narrow(0, 0, kAmaxHistory - 1)}));
  history.narrow(0, kAmaxHistory, 2).zero_();
  return q;
}

Quantized quantize_stacked_reference(const Tensor& x_in, const Tensor& below, const QuantizeOptions& o) {
  check_rowwise(o, "quantize_stacked");
  TORCH_CHECK(x_in.dim() == 3 && (!below.defined() || (below.dim() == 3 && below.size(0) == x_in.size(0) &&
                                                         below.size(2) == x_in.size(2))),
              "fp8 quantize_stacked: x must be [B, R1, C] and below [B, R2, C], got ", x_in.sizes(), " and ",
              below.defined() ? below.sizes() : at::IntArrayRef{});
  const float fp8_max = max_finite(o.dtype);
  const auto x = (below.defined() ? torch::cat({x_in, below.to(x_in.scalar_type())}, 1) : x_in).to(torch::kFloat);
  const auto magnitude = x.abs();
  Quantized q;
  if (o.rows) {
    const auto scale = scale_from_amax(magnitude.amax(2), fp8_max, o.power_of_two_scales);  // [B, R]
    q.rows = cast(x, scale.unsqueeze(2), o);
    q.rows_inverse = scale.reciprocal();
  }
  if (o.cols) {
    const auto scale = scale_from_amax(magnitude.amax(1), fp8_max, o.power_of_two_scales);  // [B, C]
    q.cols = cast(x, scale.unsqueeze(1), o).transpose(1, 2).contiguous();
    q.cols_inverse = scale.reciprocal();
  }
  return q;
}

Tensor padded_group_ends(const Tensor& group_end) {
  TORCH_CHECK(group_end.dim() == 1 && group_end.size(0) > 0 && group_end.scalar_type() == torch::kInt,
              "fp8 padded_group_ends: group_end must be a non-empty 1-D int32 tensor");
  const auto end = group_end.to(torch::kLong);
  const auto load = end - torch::cat({torch::zeros({1}, end.options()), end.narrow(0, 0, end.size(0) - 1)});
  const auto padded = torch::where(load > 0, (load + 15).div(16, "floor") * 16, torch::full_like(load, 16));
  return padded.cumsum(0).to(torch::kInt);
}

int64_t padded_rows(int64_t rows, int64_t groups) { return (rows + 15) / 16 * 16 + 16 * groups; }

Quantized quantize_grouped_reference(const Tensor& x_in, const Tensor& group_end, const Tensor& padded_end,
                                     int64_t rows_out, const QuantizeOptions& o) {
  check_rowwise(o, "quantize_grouped");
  TORCH_CHECK(x_in.dim() == 2, "fp8 quantize_grouped: x must be 2-D, got ", x_in.sizes());
  QuantizeOptions rows_only = o;
  rows_only.cols = false;
  Quantized q = o.rows ? quantize_reference(x_in, rows_only) : Quantized{};
  if (!o.cols) return q;
  const float fp8_max = max_finite(o.dtype);
  const int64_t C = x_in.size(1), groups = group_end.size(0);
  const auto x = x_in.to(torch::kFloat);
  const auto ends = group_end.to(torch::kCPU, torch::kLong), padded = padded_end.to(torch::kCPU, torch::kLong);
  q.cols = torch::zeros({C, rows_out}, x.options().dtype(o.dtype));
  q.cols_inverse = torch::ones({groups, C}, x.options());
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t start = g == 0 ? 0 : ends[g - 1].item<int64_t>(), n = ends[g].item<int64_t>() - start;
    if (n == 0) continue;  // amax 0: scale 1, nothing to place
    const int64_t column = g == 0 ? 0 : padded[g - 1].item<int64_t>();
    const auto group = x.narrow(0, start, n);
    const auto scale = scale_from_amax(group.abs().amax(0), fp8_max, o.power_of_two_scales);  // [C]
    q.cols.narrow(1, column, n).copy_(cast(group, scale.unsqueeze(0), o).t());
    q.cols_inverse[g].copy_(scale.reciprocal());
  }
  return q;
}

}  // namespace ablate::kernels::fp8
