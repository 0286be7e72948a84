// kernels/dense_gemm/fp8_quantize.cu: quantize() of fp8_quantize.h, two passes over x [R, C] in 64 x 64
// tiles (what each pass does: fp8_quantize.h). Memory-bound: pass 1 reads x once, pass 2 reads it again
// and writes both FP8 orientations (1 byte an element each), every global access 8 or 16 bytes a thread;
// nam56r-small's largest activation, 16384 x 4352 bf16 (143 MB), moves 428 MB: ~0.14 ms at the H100's
// ~3 TB/s. Two passes because current scaling needs a tensor's (row's, column's) amax before the first
// value is cast; one pass would take the scale from an earlier step (delayed scaling), another recipe.
// Tests: kernels_tests --gtest_filter='Fp8*'. Benchmark: build/bench/kernels_bench --benchmark_filter=fp8_quantize.
// Without a CUDA compiler this file is compiled as C++ and leaves everything out (fp8_quantize.h
// declares quantize() only for CUDA builds).
#include "kernels/dense_gemm/fp8_quantize.h"

#if defined(__CUDACC__)
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda_common.cuh"

namespace ablate::kernels::fp8 {
namespace {

using fused::ceil_div;
using torch::Tensor;

// Tile shape and threads: a 64 x 64 tile of x, 256 threads; a thread moves 8 consecutive elements of a row
// (one 16-byte load of bf16, two of fp32; 8 bytes of FP8 out), so 8 threads span the tile's 64 columns,
// 32 rows a sweep, 2 sweeps.
constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kVec = 8;                                     // elements a thread moves at once
constexpr int kThreadsPerRow = kTile / kVec;                // 8, consecutive lanes of one warp
constexpr int kRowsPerSweep = kThreads / kThreadsPerRow;    // 32
constexpr int kSweeps = kTile / kRowsPerSweep;              // 2
constexpr int kWarps = kThreads / 32;                       // 8
constexpr int kSharedStride = kTile + 1;                    // a padded row of the shared tile (column reads)

// |v| as ordered bits: for non-negative floats (and +NaN, above +inf) integer order is float order, and a
// NaN wins every max (fmaxf would drop it).
__device__ __forceinline__ int magnitude_bits(float v) { return __float_as_int(fabsf(v)); }

// fp8_max / amax (1 for amax 0), optionally rounded down to a power of two; NaN for a non-finite amax.
__device__ __forceinline__ float scale_from_amax(float amax, float fp8_max, bool power_of_two) {
  float scale = amax > 0.f ? fp8_max / amax : 1.f;
  if (power_of_two) scale = __int_as_float(__float_as_int(scale) & 0xff800000);
  return isfinite(amax) ? scale : __int_as_float(0x7fc00000);
}

// kVec values times scale, round-to-nearest-even with saturation, packed little-endian into 8 bytes.
template <bool kE4M3>
__device__ __forceinline__ uint2 cast8(const float (&v)[kVec], float scale) {
  uint32_t word[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const __nv_fp8_storage_t b =
        __nv_cvt_float_to_fp8(v[i] * scale, __NV_SATFINITE, kE4M3 ? __NV_E4M3 : __NV_E5M2);
    word[i / 4] |= uint32_t(b) << (8 * (i % 4));
  }
  return make_uint2(word[0], word[1]);
}

// This thread's kVec elements of tile row r (sweep s) as fp32, 0 outside x; C is a multiple of 16, so a
// group of 8 is wholly inside or outside, and x's rows start 16-byte aligned (quantize() sees to it).
template <typename T>
__device__ __forceinline__ void load_row_group(const T* __restrict__ x, int64_t R, int64_t C, int64_t gr, int64_t gc,
                                               float (&v)[kVec]) {
  if (gr < R && gc < C) {
    fused::load_vec<kVec>(x + gr * C + gc, v);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = 0.f;
  }
}

// Pass 1. rowwise: atomic max of each tile row's and column's amax into row_amax [R] and col_amax [C];
// tensorwise: of the tile's amax into tensor_amax [1]. The amax buffers start at 0. Rows reduce across
// their 8 lanes by shuffles, columns (and the tensorwise tile) across a warp by shuffles and the 8 warps
// through shared memory.
template <typename T, bool kRowwise>
__device__ __forceinline__ void amax_tile(const T* __restrict__ x, int64_t R, int64_t C, int* __restrict__ row_amax,
                                          int* __restrict__ col_amax, int* __restrict__ tensor_amax) {
  __shared__ int col_partial[kWarps][kTile];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, c = (t % kThreadsPerRow) * kVec;
  int col_m[kVec] = {};
  int all_m = 0;
#pragma unroll
  for (int s = 0; s < kSweeps; ++s) {
    const int64_t gr = row0 + t / kThreadsPerRow + s * kRowsPerSweep;
    float v[kVec];
    load_row_group(x, R, C, gr, col0 + c, v);
    int row_m = 0;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int b = magnitude_bits(v[i]);
      row_m = max(row_m, b);
      col_m[i] = max(col_m[i], b);
    }
    if constexpr (kRowwise) {
#pragma unroll
      for (int offset = kThreadsPerRow / 2; offset > 0; offset >>= 1)
        row_m = max(row_m, __shfl_xor_sync(0xffffffffu, row_m, offset));
      if (t % kThreadsPerRow == 0 && gr < R) atomicMax(row_amax + gr, row_m);
    } else {
      all_m = max(all_m, row_m);
    }
  }
  if constexpr (kRowwise) {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
#pragma unroll
      for (int offset = kThreadsPerRow; offset < 32; offset <<= 1)
        col_m[i] = max(col_m[i], __shfl_xor_sync(0xffffffffu, col_m[i], offset));
    if (lane < kThreadsPerRow)
#pragma unroll
      for (int i = 0; i < kVec; ++i) col_partial[warp][c + i] = col_m[i];
    __syncthreads();
    if (t < kTile && col0 + t < C) {
      int m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = max(m, col_partial[w][t]);
      atomicMax(col_amax + col0 + t, m);
    }
  } else {
    // One atomic a block: every block's atomics meet at one address, where they run one at a time.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) all_m = max(all_m, __shfl_xor_sync(0xffffffffu, all_m, offset));
    if (lane == 0) col_partial[0][warp] = all_m;
    __syncthreads();
    if (t == 0) {
      int m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) m = max(m, col_partial[0][w]);
      atomicMax(tensor_amax, m);
    }
  }
}

// Pass 2: rows [R, C] and cols [C, R] (either may be null), their inverse scales written by the first
// tile column (rows) and the first tile row (cols). Rows are cast from the loaded registers; columns
// from the tile in shared memory, 8 consecutive rows of one column a thread (8 threads a column's 64
// bytes, so the writes coalesce).
template <typename T, bool kRowwise, bool kE4M3>
__device__ __forceinline__ void cast_tile(const T* __restrict__ x, int64_t R, int64_t C, const int* __restrict__ row_amax,
                                          const int* __restrict__ col_amax, const int* __restrict__ tensor_amax,
                                          float fp8_max, bool power_of_two, uint8_t* __restrict__ rows,
                                          float* __restrict__ rows_inverse, uint8_t* __restrict__ cols,
                                          float* __restrict__ cols_inverse) {
  __shared__ float tile[kTile][kSharedStride];
  __shared__ float row_scale[kTile], col_scale[kTile];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int t = threadIdx.x, c = (t % kThreadsPerRow) * kVec;
  float v[kSweeps][kVec];
#pragma unroll
  for (int s = 0; s < kSweeps; ++s) {
    const int r = t / kThreadsPerRow + s * kRowsPerSweep;
    load_row_group(x, R, C, row0 + r, col0 + c, v[s]);
    if (cols != nullptr)
#pragma unroll
      for (int i = 0; i < kVec; ++i) tile[r][c + i] = v[s][i];
  }
  if (t < kTile) {
    const float amax = __int_as_float(kRowwise ? (row0 + t < R ? row_amax[row0 + t] : 0) : *tensor_amax);
    row_scale[t] = scale_from_amax(amax, fp8_max, power_of_two);
  } else if (t < 2 * kTile) {
    const int cc = t - kTile;
    const float amax = __int_as_float(kRowwise ? (col0 + cc < C ? col_amax[col0 + cc] : 0) : *tensor_amax);
    col_scale[cc] = scale_from_amax(amax, fp8_max, power_of_two);
  }
  __syncthreads();
  if (rows_inverse != nullptr && blockIdx.x == 0 && t < kTile && (kRowwise ? row0 + t < R : blockIdx.y == 0 && t == 0))
    rows_inverse[kRowwise ? row0 + t : 0] = 1.f / row_scale[t];
  if (cols_inverse != nullptr && blockIdx.y == 0 && t >= kTile && t < 2 * kTile &&
      (kRowwise ? col0 + (t - kTile) < C : blockIdx.x == 0 && t == kTile))
    cols_inverse[kRowwise ? col0 + (t - kTile) : 0] = 1.f / col_scale[t - kTile];
  if (rows != nullptr)
#pragma unroll
    for (int s = 0; s < kSweeps; ++s) {
      const int r = t / kThreadsPerRow + s * kRowsPerSweep;
      const int64_t gr = row0 + r, gc = col0 + c;
      if (gr < R && gc < C) *reinterpret_cast<uint2*>(rows + gr * C + gc) = cast8<kE4M3>(v[s], row_scale[r]);
    }
  if (cols != nullptr)
    for (int u = t; u < kTile * kThreadsPerRow; u += kThreads) {
      const int cc = u / kThreadsPerRow, r = (u % kThreadsPerRow) * kVec;
      const int64_t gc = col0 + cc, gr = row0 + r;
      if (gc >= C || gr >= R) continue;  // R is a multiple of 16: 8 rows are wholly inside or outside
      float w[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) w[i] = tile[r + i][cc];
      *reinterpret_cast<uint2*>(cols + gc * R + gr) = cast8<kE4M3>(w, col_scale[cc]);
    }
}

// The kernels, named after their scaling so that the catalog's CUPTI patterns tell the two backends apart.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ablate_fp8_rowwise_amax(const T* x, int64_t R, int64_t C, int* row_amax, int* col_amax, int* tensor_amax) {
  amax_tile<T, true>(x, R, C, row_amax, col_amax, tensor_amax);
}
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ablate_fp8_tensorwise_amax(const T* x, int64_t R, int64_t C, int* row_amax, int* col_amax, int* tensor_amax) {
  amax_tile<T, false>(x, R, C, row_amax, col_amax, tensor_amax);
}
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreads)
    ablate_fp8_rowwise_cast(const T* x, int64_t R, int64_t C, const int* row_amax, const int* col_amax,
                            const int* tensor_amax, float fp8_max, bool power_of_two, uint8_t* rows,
                            float* rows_inverse, uint8_t* cols, float* cols_inverse) {
  cast_tile<T, true, kE4M3>(x, R, C, row_amax, col_amax, tensor_amax, fp8_max, power_of_two, rows, rows_inverse, cols,
                            cols_inverse);
}
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreads)
    ablate_fp8_tensorwise_cast(const T* x, int64_t R, int64_t C, const int* row_amax, const int* col_amax,
                               const int* tensor_amax, float fp8_max, bool power_of_two, uint8_t* rows,
                               float* rows_inverse, uint8_t* cols, float* cols_inverse) {
  cast_tile<T, false, kE4M3>(x, R, C, row_amax, col_amax, tensor_amax, fp8_max, power_of_two, rows, rows_inverse,
                             cols, cols_inverse);
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

}  // namespace

Quantized quantize(const Tensor& x_in, const QuantizeOptions& o) {
  TORCH_CHECK(x_in.is_cuda() && x_in.dim() == 2, "fp8 quantize: x must be a 2-D CUDA tensor, got ", x_in.sizes(),
              " on ", x_in.device());
  const int64_t R = x_in.size(0), C = x_in.size(1);
  TORCH_CHECK(R % 16 == 0 && C % 16 == 0, "fp8 quantize: x's sizes must be multiples of 16 (what FP8 GEMMs take), got ",
              x_in.sizes());
  const float fp8_max = max_finite(o.dtype);
  // 16-byte loads: a view that starts off a 16-byte boundary is copied first.
  Tensor x = x_in.contiguous();
  if (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0) x = x.clone();
  const auto f32 = x.options().dtype(torch::kFloat);
  const bool rowwise = o.scaling == Scaling::rowwise;
  // One zeroed buffer for every amax: [R] rows, [C] columns, [1] tensor (as int bits of non-negative floats).
  const Tensor amax = torch::zeros({R + C + 1}, x.options().dtype(torch::kInt32));
  int* row_amax = amax.data_ptr<int>();
  int* col_amax = row_amax + R;
  int* tensor_amax = col_amax + C;
  Quantized q;
  const auto fp8 = x.options().dtype(o.dtype);
  if (o.rows) q.rows = torch::empty({R, C}, fp8), q.rows_inverse = torch::empty({rowwise ? R : 1}, f32);
  if (o.cols) q.cols = torch::empty({C, R}, fp8), q.cols_inverse = torch::empty({rowwise ? C : 1}, f32);
  if (R == 0 || C == 0) return q;
  const dim3 grid(static_cast<unsigned>(ceil_div(C, kTile)), static_cast<unsigned>(ceil_div(R, kTile)));
  const auto stream = at::cuda::getCurrentCUDAStream();
  const bool e4m3 = o.dtype == at::kFloat8_e4m3fn;
  fused::with_float_or_bf16(x.scalar_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    (rowwise ? ablate_fp8_rowwise_amax<T> : ablate_fp8_tensorwise_amax<T>)<<<grid, kThreads, 0, stream>>>(
        xp, R, C, row_amax, col_amax, tensor_amax);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const auto cast = rowwise ? (e4m3 ? ablate_fp8_rowwise_cast<T, true> : ablate_fp8_rowwise_cast<T, false>)
                              : (e4m3 ? ablate_fp8_tensorwise_cast<T, true> : ablate_fp8_tensorwise_cast<T, false>);
    cast<<<grid, kThreads, 0, stream>>>(xp, R, C, row_amax, col_amax, tensor_amax, fp8_max, o.power_of_two_scales,
                                        data_or_null<uint8_t>(q.rows), data_or_null<float>(q.rows_inverse),
                                        data_or_null<uint8_t>(q.cols), data_or_null<float>(q.cols_inverse));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return q;
}

}  // namespace ablate::kernels::fp8
#endif  // __CUDACC__
