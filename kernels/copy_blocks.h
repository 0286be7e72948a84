// kernels/copy_blocks.h: dst = src x scale for each (dst, src) pair of 3-d blocks, fp32 <-> bf16, one
// launch on CUDA for every pair of a call. Two users: the grouped MoE dispatch (the expert weights into
// the grouped GEMMs' stacked operands and their gradients back, kernels/moe_dispatch/grouped_mm.cpp),
// and the data-parallel sync, whose hooks copy each gradient into its bucket divided by the ranks
// (harness/train/data_parallel.cpp). LibTorch runs a strided slice copy on its element-wise path (~0.2
// ms an E layer of nam56r-small), and a bf16 gradient divided into an fp32 bucket as a division in
// bf16 then a second pass that widens it (nam56r-large at EP 2, 2 x H200, 2026-11-30: ~1.6 ms of each E
// layer's backward for the experts' gradients). On CUDA (copy_blocks.cu): fp32 arithmetic, one rounding
// into dst, 16-byte accesses where the widths and strides allow; elsewhere the LibTorch ops below.
// Tests: kernels_tests --gtest_filter='CopyBlocks*'. Benchmark: kernels_bench --benchmark_filter=copy_blocks.
#pragma once
#include <torch/torch.h>

#include <utility>
#include <vector>

namespace ablate::kernels {

// dst = src * scale for each (dst, src) pair of one shape. The product in fp32, rounded once into dst
// (scale 1: a plain copy, bit for bit what copy_ gives). On CUDA one launch for every pair when all are
// on one device with one source and one destination dtype (fp32 or bf16) and each is a block: up to 3
// dims with a unit last-dim stride (slices of stacked operands), or contiguous. Elsewhere dst.copy_(src),
// or dst.copy_(src.to(fp32) * scale).
void copy_blocks(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& dst_src, double scale = 1.0);

#if defined(ABLATE_HAVE_CUDA)
namespace fused {
// copy_blocks on CUDA: every pair on one device, one source dtype and one destination dtype (fp32, bf16).
void copy_blocks_cuda(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& dst_src, float scale);
}  // namespace fused
#endif

}  // namespace ablate::kernels
