// kernels/copy_blocks.cu: copy_blocks' CUDA pass (copy_blocks.h): every (dst, src) pair of a call, up to
// kMaxBlocks a launch, as one flat space of units walked by a grid-stride loop; dst = src x scale in
// fp32, one rounding into dst. 8 elements a unit (16-byte accesses: bf16 one word, fp32 two) when every
// width, leading stride and pointer allows it, else one.
// Tests: kernels_tests --gtest_filter='CopyBlocks*'. Benchmark: kernels_bench --benchmark_filter=copy_blocks.
#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "kernels/copy_blocks.h"
#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

// The copy_blocks pairs as the kernel reads them: block b is rows of `row_units` VEC-element units (every
// dim but the last, as outer x rows_inner rows); row r of block b starts at src + (r / rows_inner) *
// src_outer + (r % rows_inner) * src_inner, likewise dst. The grid walks one flat space of units
// (first_unit[b]: block b's first), kCopyUnroll units a thread in flight: every load of a round before
// its stores, each value times `scale` in fp32 (1: exact). A block of threads a row with one 16-byte
// load a thread in flight ran the E layer's backward copy at 1.9 TB/s. Unit indices are 32-bit (checked
// on the host).
constexpr int kMaxBlocks = 4;
constexpr int kCopyThreads = 256;
constexpr int kCopyUnroll = 4;
struct CopyBlock {
  const void* src;
  void* dst;
  int64_t src_outer, src_inner, dst_outer, dst_inner;
  uint32_t rows_inner, row_units;
};
struct CopyBlocks {
  CopyBlock block[kMaxBlocks];
  uint32_t first_unit[kMaxBlocks + 1];
  int count;
  float scale;
};

template <typename TIn, typename TOut, int VEC>
__global__ void __launch_bounds__(kCopyThreads) ablate_copy_blocks(const __grid_constant__ CopyBlocks blocks) {
  const uint32_t units = blocks.first_unit[blocks.count];
  const uint32_t stride = gridDim.x * kCopyThreads * kCopyUnroll;
  for (uint32_t base = blockIdx.x * kCopyThreads * kCopyUnroll + threadIdx.x; base < units; base += stride) {
    float v[kCopyUnroll][VEC];
    TOut* dst[kCopyUnroll];
#pragma unroll
    for (int k = 0; k < kCopyUnroll; ++k) {
      const uint32_t unit = base + k * kCopyThreads;
      dst[k] = nullptr;
      if (unit >= units) continue;
      int b = 0;
      while (unit >= blocks.first_unit[b + 1]) ++b;
      const CopyBlock& cb = blocks.block[b];
      const uint32_t local = unit - blocks.first_unit[b], row = local / cb.row_units;
      const uint32_t col = (local - row * cb.row_units) * VEC, outer = row / cb.rows_inner;
      const uint32_t inner = row - outer * cb.rows_inner;
      load_vec<VEC>(static_cast<const TIn*>(cb.src) + outer * cb.src_outer + inner * cb.src_inner + col, v[k]);
      dst[k] = static_cast<TOut*>(cb.dst) + outer * cb.dst_outer + inner * cb.dst_inner + col;
    }
#pragma unroll
    for (int k = 0; k < kCopyUnroll; ++k) {
      if (dst[k] == nullptr) continue;
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[k][i] *= blocks.scale;
      store_vec<VEC>(dst[k], v[k]);
    }
  }
}

}  // namespace

void copy_blocks_cuda(const std::vector<std::pair<Tensor, Tensor>>& dst_src, float scale) {
  // Named references, not a structured binding: the launch lambdas below capture them (nvcc #3357).
  const Tensor& dst0 = dst_src.front().first;
  const Tensor& src0 = dst_src.front().second;
  for (size_t first = 0; first < dst_src.size(); first += kMaxBlocks) {  // kMaxBlocks pairs a launch
    const size_t last = std::min(dst_src.size(), first + kMaxBlocks);
    bool vectorised = true;
    for (size_t i = first; i < last; ++i) {
      const auto& [dst, src] = dst_src[i];
      TORCH_CHECK(dst.dim() == 3 && src.sizes() == dst.sizes() && dst.stride(2) == 1 && src.stride(2) == 1,
                  "copy_blocks: each pair must be two 3-d tensors of one shape with unit last-dim stride, got ",
                  dst.sizes(), " and ", src.sizes());
      TORCH_CHECK(dst.device() == dst0.device() && src.device() == dst0.device(), "copy_blocks: one device");
      for (const int64_t n : {dst.size(2), src.stride(0), src.stride(1), dst.stride(0), dst.stride(1)})
        vectorised = vectorised && n % 8 == 0;
      vectorised = vectorised && aligned16(src.data_ptr()) && aligned16(dst.data_ptr());
    }
    const int64_t vec = vectorised ? 8 : 1;
    CopyBlocks blocks{};
    blocks.scale = scale;
    int64_t units = 0;
    for (size_t i = first; i < last; ++i) {
      const auto& [dst, src] = dst_src[i];
      const int64_t row_units = dst.size(2) / vec, block_units = dst.size(0) * dst.size(1) * row_units;
      TORCH_CHECK(units + block_units <= int64_t{std::numeric_limits<int32_t>::max()},
                  "copy_blocks: ", units + block_units, " units of ", vec,
                  " elements in one launch overflow its 32-bit indices; pass fewer pairs a call");
      blocks.block[blocks.count] =
          CopyBlock{src.data_ptr(),  dst.data_ptr(),  src.stride(0), src.stride(1), dst.stride(0),
                    dst.stride(1),   static_cast<uint32_t>(dst.size(1)), static_cast<uint32_t>(row_units)};
      blocks.first_unit[blocks.count] = static_cast<uint32_t>(units);
      units += block_units;
      blocks.first_unit[++blocks.count] = static_cast<uint32_t>(units);
    }
    if (units == 0) continue;
    const auto stream = at::cuda::getCurrentCUDAStream();
    const auto grid = static_cast<unsigned>(
        std::min<int64_t>(ceil_div(units, int64_t{kCopyThreads} * kCopyUnroll), int64_t(sm_count()) * 8));
    with_float_or_bf16(src0.scalar_type(), "copy_blocks source", [&](auto in_tag) {
      with_float_or_bf16(dst0.scalar_type(), "copy_blocks destination", [&](auto out_tag) {
        using TIn = typename decltype(in_tag)::type;
        using TOut = typename decltype(out_tag)::type;
        if (vectorised)
          ablate_copy_blocks<TIn, TOut, 8><<<grid, kCopyThreads, 0, stream>>>(blocks);
        else
          ablate_copy_blocks<TIn, TOut, 1><<<grid, kCopyThreads, 0, stream>>>(blocks);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  }
}

}  // namespace ablate::kernels::fused
