// kernels/moe_dispatch/expert_kernels.cu: the CUDA passes of the grouped_mm MoE path around its grouped
// GEMMs (expert_groups.h has the autograd functions and the LibTorch forms they replace on the CPU):
//   ablate_moe_sum_slots: out[t] = sum_j src[inverse[t * k + j]], each token's k slot rows summed in fp32
//     and written once: the combine (forward) and the gradient of the token-row gather (backward), where
//     LibTorch wrote the gathered [S, d] rows and read them back for the sum;
//   ablate_moe_swiglu_fwd / _bwd: h = silu(g) * u * w per slot row (gate_up = [g | u], w the routing
//     weight), and its backward (d gate_up, and dw as one fp32 row sum), where LibTorch ran silu, two
//     products, an fp32 copy of [S, f] and a cast forward, and twice that backward.
//   ablate_moe_gather_rows_or_zero: out[r] = src[index[r]], or zeros where index[r] is the sentinel
//     src_rows: expert parallelism's padded row movements, as raw words (16 bytes where the rows and
//     pointers allow, else the element), where LibTorch appended a zero row to a copy of src first;
//   ablate_moe_group_count / _place: the slots' stable order by expert, its inverse, the loads and the
//     group bounds in two launches (a counting sort), where LibTorch ran a radix sort over all 64 key
//     bits (8 passes), two scatters, a gather, a cumsum and casts: ~20 launches an E layer.
// fp32 arithmetic, one rounding per output. A warp per row (the swiglu rows need a row sum for dw);
// 8 elements a lane access when the width is a multiple of 8 and the pointers are 16-byte aligned,
// element-wise otherwise. Deterministic: no atomics, fixed summation order.
// Tests: kernels_tests --gtest_filter='ExpertGroups*:*Parity*moe_dispatch*' (on a GPU). Benchmark:
// kernels_bench --benchmark_filter=moe_dispatch. Without a CUDA compiler this file compiles to nothing.
#if defined(__CUDACC__)
#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "kernels/cuda_common.cuh"
#include "kernels/moe_dispatch/expert_groups.h"

namespace ablate::kernels::fused {
namespace {

using torch::Tensor;

constexpr int kWarps = 8;  // rows in flight per block

// Grid-stride over rows, one warp a row.
__device__ __forceinline__ int64_t first_row() { return int64_t(blockIdx.x) * kWarps + threadIdx.y; }
__device__ __forceinline__ int64_t row_stride() { return int64_t(gridDim.x) * kWarps; }

template <typename TIn, typename TOut, int VEC>
__global__ void ablate_moe_sum_slots(const TIn* __restrict__ src, const int64_t* __restrict__ inverse, int k,
                                     TOut* __restrict__ out, int64_t tokens, int64_t width) {
  for (int64_t t = first_row(); t < tokens; t += row_stride()) {
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < width; c += 32 * VEC) {
      float acc[VEC] = {};
      for (int j = 0; j < k; ++j) {  // the slots in order: the same sum on every run
        float v[VEC];
        load_vec<VEC>(src + inverse[t * k + j] * width + c, v);
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] += v[i];
      }
      store_vec<VEC>(out + t * width + c, acc);
    }
  }
}

template <typename T, int VEC>
__global__ void ablate_moe_swiglu_fwd(const T* __restrict__ gate_up, const float* __restrict__ weight,
                                      T* __restrict__ out, int64_t rows, int64_t f) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* g_row = gate_up + r * 2 * f;
    const float w = weight[r];
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < f; c += 32 * VEC) {
      float g[VEC], u[VEC], h[VEC];
      load_vec<VEC>(g_row + c, g);
      load_vec<VEC>(g_row + f + c, u);
#pragma unroll
      for (int i = 0; i < VEC; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i] * w;
      store_vec<VEC>(out + r * f + c, h);
    }
  }
}

// d gate_up = [dh w u silu'(g) | dh w silu(g)], dw = sum_c dh silu(g) u (the row's lanes, then the warp).
template <typename T, int VEC>
__global__ void ablate_moe_swiglu_bwd(const T* __restrict__ gate_up, const float* __restrict__ weight,
                                      const T* __restrict__ dh, T* __restrict__ d_gate_up, float* __restrict__ dw,
                                      int64_t rows, int64_t f) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const T* g_row = gate_up + r * 2 * f;
    T* dg_row = d_gate_up + r * 2 * f;
    const float w = weight[r];
    float dw_part = 0.f;
    for (int64_t c = int64_t(threadIdx.x) * VEC; c < f; c += 32 * VEC) {
      float g[VEC], u[VEC], d[VEC], dg[VEC], du[VEC];
      load_vec<VEC>(g_row + c, g);
      load_vec<VEC>(g_row + f + c, u);
      load_vec<VEC>(dh + r * f + c, d);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float sig = sigmoid(g[i]), silu = g[i] * sig;
        dw_part += d[i] * silu * u[i];
        const float dgated = d[i] * w;
        du[i] = dgated * silu;
        dg[i] = dgated * u[i] * sig * (1.f + g[i] * (1.f - sig));
      }
      store_vec<VEC>(dg_row + c, dg);
      store_vec<VEC>(dg_row + f + c, du);
    }
    dw_part = warp_sum(dw_part);
    if (threadIdx.x == 0) dw[r] = dw_part;
  }
}

// A warp a row, raw words: the rows bit for bit. Indices other than [0, src_rows] stop the kernel
// (__trap, as LibTorch's device-side index asserts): a wrong layout must not move other rows.
template <typename Word>
__global__ void ablate_moe_gather_rows_or_zero(const Word* __restrict__ src, const int64_t* __restrict__ index,
                                               Word* __restrict__ out, int64_t rows, int64_t src_rows,
                                               int64_t words) {
  for (int64_t r = first_row(); r < rows; r += row_stride()) {
    const int64_t from = index[r];
    if (from < 0 || from > src_rows) __trap();
    Word* dst = out + r * words;
    if (from == src_rows) {
      for (int64_t c = threadIdx.x; c < words; c += 32) dst[c] = Word{};
    } else {
      const Word* row = src + from * words;
      for (int64_t c = threadIdx.x; c < words; c += 32) dst[c] = row[c];
    }
  }
}

// Launches kernel(VEC) with a warp a row: 8 elements a lane access when `width` and every pointer allow
// 16-byte accesses (bf16; fp32 takes two 16-byte words), else one. Grid capped at a few waves.
template <class Launch>
void by_rows(int64_t rows, int64_t width, std::initializer_list<const void*> pointers, Launch&& launch) {
  bool vectorised = width % 8 == 0;
  for (const void* p : pointers) vectorised = vectorised && aligned16(p);
  const dim3 block(32, kWarps);
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(ceil_div(rows, kWarps), int64_t(sm_count()) * 16));
  if (vectorised)
    launch(std::integral_constant<int, 8>{}, grid, block);
  else
    launch(std::integral_constant<int, 1>{}, grid, block);
}

// The counting sort, in tiles of kGroupTile slots, a block a tile, two launches. Warp w of a block owns
// the w-th run of kGroupRun slots of its tile and walks it 32 slots at a time in slot order;
// __match_any_sync gives each lane its peers (same expert) in the step, so a slot's place is its warp's
// running count for the expert plus its warp's earlier lanes with that expert. Launch one counts each
// tile's slots per expert. Launch two counts its own tile again per (warp, expert), sums the tile
// counts (all of them: the group starts; those before its tile: its first place in each group), turns
// its warp counts into each warp's first place per expert, and walks again to write. Stable by
// construction: places grow with the slot index inside an expert. Tiles spread the scattered stores of
// the permutation over SMs (one block for all 32k slots of nam56r-small's E layer spent 61 us on them).
// Expert ids outside [0, experts) stop the kernel (__trap, like LibTorch's device-side index asserts):
// a router bug must not become a wrong grouping.
constexpr int kGroupWarps = 32;
constexpr int kGroupRun = 64;                        // slots a warp: two steps of 32
constexpr int kGroupTile = kGroupWarps * kGroupRun;  // slots a block
constexpr int kGroupMaxExperts = 256;                // the (warp, expert) counts in 32 KB of shared memory

// One warp's walk over its run [begin, end): counts into `mine` (the warp's row of counts) or, with
// kScatter, places from it (each slot's place = mine[expert] + earlier peers; mine moves on).
template <bool kScatter, typename Index>
__device__ __forceinline__ void group_walk(const Index* __restrict__ slot_expert, int64_t begin, int64_t end,
                                           int experts, int* mine, int64_t* __restrict__ by_expert,
                                           int64_t* __restrict__ position, int64_t* __restrict__ sorted_expert) {
  constexpr int kSteps = kGroupRun / 32;
  const int lane = threadIdx.x % 32;
  const unsigned earlier_lanes = (1u << lane) - 1;
  int expert[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {  // every load in flight before the first match
    const int64_t s = begin + i * 32 + lane;
    const Index id = s < end ? slot_expert[s] : Index(-1);
    if (!kScatter && s < end && (id < 0 || id >= experts)) __trap();
    expert[i] = static_cast<int>(id);
  }
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const unsigned peers = __match_any_sync(0xffffffffu, expert[i]);
    const bool valid = expert[i] >= 0, leader = valid && (peers & earlier_lanes) == 0;
    if (kScatter && valid) {
      const int64_t s = begin + i * 32 + lane, at = mine[expert[i]] + __popc(peers & earlier_lanes);
      by_expert[at] = s;
      position[s] = at;
      sorted_expert[at] = expert[i];
    }
    __syncwarp();  // every lane has read its expert's count before the leader moves it on
    if (leader) mine[expert[i]] += __popc(peers);
    __syncwarp();
  }
}

// The block's (warp, expert) counts of its tile into `next` (zeroed here); returns after a barrier.
template <typename Index>
__device__ __forceinline__ int* count_tile(const Index* __restrict__ slot_expert, int64_t slots, int experts, int* next) {
  for (int i = threadIdx.x; i < kGroupWarps * experts; i += blockDim.x) next[i] = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const int64_t begin = min(slots, int64_t(blockIdx.x) * kGroupTile + warp * kGroupRun), end = min(slots, begin + kGroupRun);
  int* mine = next + warp * experts;
  group_walk<false>(slot_expert, begin, end, experts, mine, nullptr, nullptr, nullptr);
  __syncthreads();
  return mine;
}

template <typename Index>
__global__ void __launch_bounds__(kGroupWarps * 32)
    ablate_moe_group_count(const Index* __restrict__ slot_expert, int64_t slots, int experts, int* __restrict__ tile_counts) {
  __shared__ int next[kGroupWarps * kGroupMaxExperts];
  count_tile(slot_expert, slots, experts, next);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int sum = 0;
    for (int w = 0; w < kGroupWarps; ++w) sum += next[w * experts + e];
    tile_counts[int64_t(blockIdx.x) * experts + e] = sum;
  }
}

template <typename Index>
__global__ void __launch_bounds__(kGroupWarps * 32)
    ablate_moe_group_place(const Index* __restrict__ slot_expert, int64_t slots, int experts,
                           const int* __restrict__ tile_counts, int tiles, int64_t* __restrict__ by_expert,
                           int64_t* __restrict__ position, int64_t* __restrict__ sorted_expert,
                           int64_t* __restrict__ load, int64_t* __restrict__ group_start,
                           int32_t* __restrict__ group_end) {
  __shared__ int next[kGroupWarps * kGroupMaxExperts];  // [warp][expert]: counts, then next places
  __shared__ int total[kGroupMaxExperts], before[kGroupMaxExperts], start[kGroupMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) total[e] = before[e] = 0;
  int* mine = count_tile(slot_expert, slots, experts, next);  // its barrier also orders the zeroing
  // The tile counts summed per expert by all threads: a few tiles each, then shared-memory atomics.
  for (int64_t i = threadIdx.x; i < int64_t(tiles) * experts; i += blockDim.x) {
    const int tile = static_cast<int>(i / experts), e = static_cast<int>(i - int64_t(tile) * experts);
    const int c = tile_counts[i];
    if (c == 0) continue;
    atomicAdd(&total[e], c);
    if (tile < static_cast<int>(blockIdx.x)) atomicAdd(&before[e], c);
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {  // the group starts: an exclusive scan of the totals, a run of experts a lane
    const int per_lane = (experts + 31) / 32, first = lane * per_lane, last = min(experts, first + per_lane);
    int sum = 0;
    for (int e = first; e < last; ++e) sum += total[e];
    int inclusive = sum;
    for (int offset = 1; offset < 32; offset *= 2) {
      const int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += up;
    }
    int running = inclusive - sum;
    for (int e = first; e < last; ++e) {
      start[e] = running;
      running += total[e];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int running = start[e] + before[e];  // this tile's first place in the group
    for (int w = 0; w < kGroupWarps; ++w) {
      const int c = next[w * experts + e];
      next[w * experts + e] = running;
      running += c;
    }
    if (blockIdx.x == 0) {
      load[e] = total[e];
      group_start[e] = start[e];
      group_end[e] = start[e] + total[e];
    }
  }
  __syncthreads();
  const int64_t begin = min(slots, int64_t(blockIdx.x) * kGroupTile + warp * kGroupRun), end = min(slots, begin + kGroupRun);
  group_walk<true>(slot_expert, begin, end, experts, mine, by_expert, position, sorted_expert);
}

}  // namespace

bool group_by_expert_cuda_supports(const Tensor& topk_idx, int64_t experts) {
  const auto dtype = topk_idx.scalar_type();
  return topk_idx.is_cuda() && (dtype == torch::kLong || dtype == torch::kInt) && experts >= 1 &&
         experts <= kGroupMaxExperts && topk_idx.numel() < std::numeric_limits<int32_t>::max();
}

ExpertGroups group_by_expert_cuda(const Tensor& topk_idx, int64_t experts) {
  TORCH_CHECK(group_by_expert_cuda_supports(topk_idx, experts),
              "moe group_by_expert: the CUDA pass takes int32/int64 expert ids on a CUDA device, 1 to ",
              kGroupMaxExperts, " experts and fewer than 2^31 slots; got ", topk_idx.scalar_type(), " on ",
              topk_idx.device(), ", ", experts, " experts, ", topk_idx.numel(), " slots");
  const c10::cuda::CUDAGuard guard(topk_idx.device());
  const Tensor slot_expert = topk_idx.reshape({-1}).contiguous();
  const int64_t slots = slot_expert.numel();
  const auto index_opts = slot_expert.options().dtype(torch::kLong);
  ExpertGroups g;
  g.by_expert = torch::empty({slots}, index_opts);
  g.position = torch::empty({slots}, index_opts);
  g.sorted_expert = torch::empty({slots}, index_opts);
  g.load = torch::empty({experts}, index_opts);
  g.group_start = torch::empty({experts}, index_opts);
  g.group_end = torch::empty({experts}, index_opts.dtype(torch::kInt));
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int tiles = static_cast<int>(std::max<int64_t>(1, ceil_div(slots, kGroupTile)));
  const auto tile_counts = torch::empty({tiles, experts}, index_opts.dtype(torch::kInt));
  const auto launch = [&](auto* ids) {
    const int e = static_cast<int>(experts);
    ablate_moe_group_count<<<tiles, kGroupWarps * 32, 0, stream>>>(ids, slots, e, tile_counts.data_ptr<int>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    ablate_moe_group_place<<<tiles, kGroupWarps * 32, 0, stream>>>(
        ids, slots, e, tile_counts.data_ptr<int>(), tiles, g.by_expert.data_ptr<int64_t>(),
        g.position.data_ptr<int64_t>(), g.sorted_expert.data_ptr<int64_t>(), g.load.data_ptr<int64_t>(),
        g.group_start.data_ptr<int64_t>(), g.group_end.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (slot_expert.scalar_type() == torch::kLong)
    launch(slot_expert.data_ptr<int64_t>());
  else
    launch(slot_expert.data_ptr<int32_t>());
  return g;
}

Tensor sum_slot_rows_cuda(const Tensor& src_in, const Tensor& inverse_in, int64_t k, at::ScalarType out_dtype) {
  const Tensor src = on_device(src_in, src_in, "slot rows"), inverse = on_device(inverse_in, src_in, "slot positions");
  TORCH_CHECK(src.dim() == 2 && inverse.dim() == 1 && inverse.size(0) == src.size(0) && k > 0 && src.size(0) % k == 0,
              "moe sum_slot_rows: src must be [S, d] and inverse [S] with S a multiple of k, got ", src.sizes(), ", ",
              inverse.sizes(), ", k ", k);
  TORCH_CHECK(inverse.scalar_type() == torch::kLong, "moe sum_slot_rows: positions must be int64");
  const int64_t tokens = src.size(0) / k, width = src.size(1);
  Tensor out = torch::empty({tokens, width}, src.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(src.scalar_type(), "slot rows", [&](auto in_tag) {
    with_float_or_bf16(out_dtype, "summed rows", [&](auto out_tag) {
      using TIn = typename decltype(in_tag)::type;
      using TOut = typename decltype(out_tag)::type;
      by_rows(tokens, width, {src.data_ptr(), out.data_ptr()}, [&](auto vec, int64_t grid, dim3 block) {
        ablate_moe_sum_slots<TIn, TOut, decltype(vec)::value><<<grid, block, 0, stream>>>(
            static_cast<const TIn*>(src.data_ptr()), inverse.data_ptr<int64_t>(), static_cast<int>(k),
            static_cast<TOut*>(out.data_ptr()), tokens, width);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  });
  return out;
}

Tensor gather_rows_or_zero_cuda(const Tensor& x_in, const Tensor& index_in) {
  const Tensor x = on_device(x_in, x_in, "rows"), index = on_device(index_in, x_in, "row indices");
  const int64_t rows = index.size(0), src_rows = x.size(0);
  Tensor out = torch::empty({rows, x.size(1)}, x.options());
  if (out.numel() == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t row_bytes = x.size(1) * static_cast<int64_t>(x.element_size());
  const dim3 block(32, kWarps);
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(ceil_div(rows, kWarps), int64_t(sm_count()) * 16));
  const auto launch = [&](auto word_tag) {
    using Word = typename decltype(word_tag)::type;
    ablate_moe_gather_rows_or_zero<Word><<<grid, block, 0, stream>>>(
        static_cast<const Word*>(x.data_ptr()), index.data_ptr<int64_t>(), static_cast<Word*>(out.data_ptr()), rows,
        src_rows, row_bytes / static_cast<int64_t>(sizeof(Word)));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (row_bytes % 16 == 0 && aligned16(x.data_ptr()) && aligned16(out.data_ptr()))
    launch(TypeTag<uint4>{});
  else if (x.element_size() == 2)
    launch(TypeTag<uint16_t>{});
  else if (x.element_size() == 4)
    launch(TypeTag<uint32_t>{});
  else if (x.element_size() == 8)
    launch(TypeTag<uint64_t>{});
  else
    launch(TypeTag<uint8_t>{});
  return out;
}

namespace {
void check_swiglu_args(const Tensor& gate_up, const Tensor& weight) {
  check_weighted_swiglu_args(gate_up, weight);
  TORCH_CHECK(weight.scalar_type() == torch::kFloat, "moe weighted_swiglu: the CUDA pass takes an fp32 weight");
}
}  // namespace

Tensor weighted_swiglu_cuda(const Tensor& gate_up_in, const Tensor& weight_in) {
  const Tensor gate_up = on_device(gate_up_in, gate_up_in, "gate_up"), weight = on_device(weight_in, gate_up_in, "weight");
  check_swiglu_args(gate_up, weight);
  const int64_t rows = gate_up.size(0), f = gate_up.size(1) / 2;
  Tensor out = torch::empty({rows, f}, gate_up.options());
  if (out.numel() == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(gate_up.scalar_type(), "gate_up", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gu = static_cast<const T*>(gate_up.data_ptr());
    by_rows(rows, f, {gu, gu + f, out.data_ptr()}, [&](auto vec, int64_t grid, dim3 block) {
      ablate_moe_swiglu_fwd<T, decltype(vec)::value>
          <<<grid, block, 0, stream>>>(gu, weight.data_ptr<float>(), static_cast<T*>(out.data_ptr()), rows, f);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return out;
}

std::pair<Tensor, Tensor> weighted_swiglu_backward_cuda(const Tensor& gate_up_in, const Tensor& weight_in,
                                                        const Tensor& dh_in) {
  const Tensor gate_up = on_device(gate_up_in, gate_up_in, "gate_up"), weight = on_device(weight_in, gate_up_in, "weight");
  check_swiglu_args(gate_up, weight);
  const Tensor dh = on_device(dh_in.to(gate_up.scalar_type()), gate_up_in, "d hidden");
  const int64_t rows = gate_up.size(0), f = gate_up.size(1) / 2;
  TORCH_CHECK(dh.dim() == 2 && dh.size(0) == rows && dh.size(1) == f, "moe weighted_swiglu: d hidden ", dh.sizes(),
              " must be [", rows, ", ", f, "]");
  Tensor d_gate_up = torch::empty_like(gate_up), dw = torch::empty({rows}, weight.options());
  if (rows == 0) return {d_gate_up, dw};
  if (f == 0) return {d_gate_up, dw.zero_()};
  const auto stream = at::cuda::getCurrentCUDAStream();
  with_float_or_bf16(gate_up.scalar_type(), "gate_up", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gu = static_cast<const T*>(gate_up.data_ptr());
    T* dgu = static_cast<T*>(d_gate_up.data_ptr());
    by_rows(rows, f, {gu, gu + f, dh.data_ptr(), dgu, dgu + f}, [&](auto vec, int64_t grid, dim3 block) {
      ablate_moe_swiglu_bwd<T, decltype(vec)::value><<<grid, block, 0, stream>>>(
          gu, weight.data_ptr<float>(), static_cast<const T*>(dh.data_ptr()), dgu, dw.data_ptr<float>(), rows, f);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {d_gate_up, dw};
}

}  // namespace ablate::kernels::fused
#endif  // __CUDACC__
