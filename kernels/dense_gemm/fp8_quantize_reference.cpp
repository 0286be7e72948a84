// kernels/dense_gemm/fp8_quantize_reference.cpp: quantize_reference and max_finite (fp8_quantize.h), the
// arithmetic the CUDA kernels of fp8_quantize.cu reproduce bit for bit.
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

}  // namespace ablate::kernels::fp8
