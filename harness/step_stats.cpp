// harness/step_stats.cpp: see step_stats.h.
#include "harness/step_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ablate::harness {

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  return (upper + *std::max_element(v.begin(), v.begin() + mid)) / 2;
}

double median_absolute_deviation(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::abs(x - m));
  return median(std::move(dev));
}

std::vector<size_t> slow_outliers(const std::vector<double>& v) {
  std::vector<size_t> out;
  if (v.size() < 3) return out;
  const double limit = median(v) + 3 * median_absolute_deviation(v);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] > limit) out.push_back(i);
  return out;
}

double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio) {
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay_steps = std::max<int64_t>(1, total - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double cosine = 0.5 * (1 + std::cos(std::numbers::pi * progress));
  return peak * (min_ratio + (1 - min_ratio) * cosine);
}

std::optional<double> dense_bf16_peak_flops(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  // docs/model.md: H100 SXM and H200 989.4e12 (132 SMs x 4096 dense bf16 FLOP/clk x 1.83 GHz), H100
  // PCIe 756e12 (the H100 whitepaper's dense figure: 114 SMs, 1.62 GHz), A100 312e12. The H100 NVL's
  // figure is not settled across NVIDIA's sheets: it is not guessed (MFU null).
  if (has("H200")) return 989.4e12;
  if (has("H100") && (has("SXM") || has("HBM3"))) return 989.4e12;
  if (has("H100") && has("PCIe")) return 756e12;
  if (has("A100")) return 312e12;
  return std::nullopt;
}

std::optional<double> dense_fp8_peak_flops(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  // docs/model.md: Hopper's FP8 tensor cores run twice the dense bf16 rate (H100 SXM and H200 1978.9e12,
  // H100 PCIe 1513e12); the A100 has none.
  if (has("H200")) return 1978.9e12;
  if (has("H100") && (has("SXM") || has("HBM3"))) return 1978.9e12;
  if (has("H100") && has("PCIe")) return 1513e12;
  return std::nullopt;
}

std::optional<double> flops_utilization(double run_dtype_flops_per_token, double fp8_flops_per_token,
                                        double tokens_per_s, double peak_flops, std::optional<double> fp8_peak_flops) {
  if (fp8_flops_per_token > 0 && !fp8_peak_flops) return std::nullopt;
  return tokens_per_s * (run_dtype_flops_per_token / peak_flops +
                         (fp8_flops_per_token > 0 ? fp8_flops_per_token / *fp8_peak_flops : 0.0));
}

std::optional<double> model_flops_utilization(double flops_per_token, double tokens_per_s, const std::string& gpu) {
  const auto peak = dense_bf16_peak_flops(gpu);
  if (!peak) return std::nullopt;
  return flops_utilization(flops_per_token, tokens_per_s, *peak);
}

double flops_utilization(double flops_per_token, double tokens_per_s, double peak_flops) {
  return flops_per_token * tokens_per_s / peak_flops;
}

}  // namespace ablate::harness
