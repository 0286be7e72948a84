// kernels/join_last_dim.h: the model's projections cut into parts along the last dim (split_last_dim),
// whose backward joins the parts' gradients again (join_last_dim). LibTorch's split backward is at::cat,
// which runs its element-wise path (~1 TB/s on the H100) whenever a part is a strided view, and in the
// A block every part is one (the rope seam's d(q_nope) is a narrow of dq, dv a narrow of the padded
// attention gradient): 0.74 ms of nam56r-small's step on the H100 before 835f4a1 (2026-11-26,
// experiments/results/2026-11-26-h100-cudnn/). join_last_dim is one
// 16-byte-access pass on CUDA (join_last_dim.cu), and no pass at all when the gradients already sit
// side by side in one buffer; elsewhere at::cat. Tests: kernels_tests --gtest_filter='JoinLastDim*'.
// Benchmark: kernels_bench --benchmark_filter=join_last_dim.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace ablate::kernels {

// cat(parts, -1): parts of one leading shape (at most 3 leading dims on the CUDA pass), any strides with
// a unit last-dim stride; an undefined part is zeros of its width (widths[i]; an unused split output has
// no gradient). The result is contiguous, or a view of the parts' own buffer when they are adjacent
// views of it (same strides, each starting where the previous ends): then nothing is copied.
torch::Tensor join_last_dim(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths);
// The first defined part (the one the others' shapes are checked against), or nullptr.
const torch::Tensor* first_defined(const std::vector<torch::Tensor>& parts);
// t.split_with_sizes(sizes, -1) with join_last_dim as the backward.
std::vector<torch::Tensor> split_last_dim(const torch::Tensor& t, const std::vector<int64_t>& sizes);

#if defined(ABLATE_HAVE_CUDA)
namespace fused {
// The CUDA pass: every part defined or not, one dtype of 2 or 4 bytes, at most 8 parts and 3 leading
// dims, fewer than 2^31 output elements (join_last_dim checks and falls back to at::cat otherwise).
bool join_last_dim_cuda_supports(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths);
torch::Tensor join_last_dim_cuda(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths);
}  // namespace fused
#endif

}  // namespace ablate::kernels
