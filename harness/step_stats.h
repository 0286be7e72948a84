// harness/step_stats.h: run-level statistics of a run's steps (docs/architecture.md "Goodput ledger",
// "Comparability and statistics"): the median of steady-state step times, outliers by median + 3*MAD,
// the learning-rate schedule of docs/model.md, and MFU against the dense bf16 peak of known GPU models
// (null for unknown ones: never guess a peak). Plain C++ so it is tested without LibTorch.
// Tests: tests/harness/step_stats_test.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ablate::harness {

double median(std::vector<double> v);  // NaN for an empty vector
// Median absolute deviation from the median.
double median_absolute_deviation(const std::vector<double>& v);
// Indices i with v[i] > median + 3 * MAD (slow steps; a fast step is never an outlier worth a flag).
std::vector<size_t> slow_outliers(const std::vector<double>& v);

// Linear warm-up to `peak` over `warmup` steps, then cosine down to peak * min_ratio at `total`.
double learning_rate(int64_t step, int64_t total, int64_t warmup, double peak, double min_ratio);

// Dense bf16 tensor-core peak in FLOP/s for a GPU model name as CUDA reports it, or nullopt.
std::optional<double> dense_bf16_peak_flops(const std::string& gpu_name);
// Dense FP8 tensor-core peak in FLOP/s (twice the bf16 one on Hopper), or nullopt (no FP8 tensor cores,
// or an unknown GPU).
std::optional<double> dense_fp8_peak_flops(const std::string& gpu_name);
// training FLOPs per token * tokens/s / peak_flops.
double flops_utilization(double training_flops_per_token, double tokens_per_s, double peak_flops);
// flops-v2: each precision's FLOPs against its own peak, tokens/s x (run_dtype / peak + fp8 / fp8_peak):
// the share of the time the GPU's peaks would need, so never over 1 while the peaks hold. nullopt when
// FP8 FLOPs are counted but no FP8 peak is known.
std::optional<double> flops_utilization(double run_dtype_flops_per_token, double fp8_flops_per_token,
                                        double tokens_per_s, double peak_flops, std::optional<double> fp8_peak_flops);
// The same against the dense bf16 peak of `gpu_name`; nullopt when the peak is unknown.
std::optional<double> model_flops_utilization(double training_flops_per_token, double tokens_per_s,
                                              const std::string& gpu_name);

}  // namespace ablate::harness
