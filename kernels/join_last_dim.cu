// kernels/join_last_dim.cu: join_last_dim's CUDA pass (join_last_dim.h): out[..., c] of a contiguous
// output from the part that holds column c, parts given as strided views of up to 3 leading dims.
// A thread moves 16 bytes (8 bf16 or 4 fp32 columns) when every width, leading stride and pointer
// allows it, else one element; undefined parts write zeros. Pure data movement (bit-exact).
// Tests: kernels_tests --gtest_filter='JoinLastDim*'. Benchmark: kernels_bench --benchmark_filter=join_last_dim.
#include "kernels/cuda_common.cuh"
#include "kernels/join_last_dim.h"

namespace ablate::kernels::fused {
namespace {

constexpr int kMaxParts = 8;
struct JoinPart {
  const void* data;  // nullptr: zeros
  int64_t stride[3];  // elements, leading dims (size-1 dims padded in front)
  int first_col, width;
};
struct JoinArgs {
  JoinPart part[kMaxParts];
  int parts;
  uint32_t size1, size2;  // the inner two leading sizes (dim 0 is what is left)
  int total;              // output row width
};

// W: the access word (uint4: 16 bytes; or the element itself), VEC elements of E bytes a word.
template <typename E, typename W>
__global__ void ablate_join_last_dim(JoinArgs args, E* __restrict__ out, uint32_t words) {
  constexpr int VEC = sizeof(W) / sizeof(E);
  const uint32_t words_per_row = args.total / VEC;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x) {
    const uint32_t row = i / words_per_row, col = (i - row * words_per_row) * VEC;
    const uint32_t i2 = row % args.size2, rest = row / args.size2, i1 = rest % args.size1, i0 = rest / args.size1;
    int p = 0;
    while (p + 1 < args.parts && col >= static_cast<uint32_t>(args.part[p + 1].first_col)) ++p;
    const JoinPart& part = args.part[p];
    W value{};
    if (part.data != nullptr) {
      const E* src = static_cast<const E*>(part.data) + i0 * part.stride[0] + i1 * part.stride[1] +
                     i2 * part.stride[2] + (col - part.first_col);
      value = *reinterpret_cast<const W*>(src);
    }
    *reinterpret_cast<W*>(out + int64_t(row) * args.total + col) = value;
  }
}

}  // namespace

bool join_last_dim_cuda_supports(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths) {
  const torch::Tensor* some = first_defined(parts);
  if (some == nullptr || !some->is_cuda() || parts.size() > kMaxParts || some->dim() < 1 || some->dim() > 4) return false;
  if (some->element_size() != 2 && some->element_size() != 4) return false;
  int64_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].defined() && parts[i].stride(-1) != 1) return false;
    total += widths[i];
  }
  return some->numel() / std::max<int64_t>(1, some->size(-1)) * total < std::numeric_limits<int32_t>::max();
}

torch::Tensor join_last_dim_cuda(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths) {
  TORCH_CHECK(join_last_dim_cuda_supports(parts, widths), "join_last_dim: the CUDA pass does not take these parts");
  const torch::Tensor* some = first_defined(parts);
  const int lead = static_cast<int>(some->dim()) - 1;
  JoinArgs args{};
  args.parts = static_cast<int>(parts.size());
  int64_t leading[3] = {1, 1, 1};
  for (int d = 0; d < lead; ++d) leading[3 - lead + d] = some->size(d);
  args.size1 = static_cast<uint32_t>(leading[1]);
  args.size2 = static_cast<uint32_t>(leading[2]);
  const int64_t elem = static_cast<int64_t>(some->element_size()), vec = 16 / elem;
  bool wide = true;
  int col = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto& part = args.part[i];
    part.first_col = col;
    part.width = static_cast<int>(widths[i]);
    col += part.width;
    wide = wide && widths[i] % vec == 0;
    if (!parts[i].defined()) continue;
    part.data = parts[i].data_ptr();
    wide = wide && aligned16(part.data);
    for (int d = 0; d < lead; ++d) {
      part.stride[3 - lead + d] = parts[i].size(d) == 1 ? 0 : parts[i].stride(d);
      wide = wide && part.stride[3 - lead + d] % vec == 0;
    }
  }
  args.total = col;
  auto sizes = some->sizes().vec();
  sizes.back() = col;
  auto out = torch::empty(sizes, some->options().memory_format(torch::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto launch = [&](auto elem_tag, auto word_tag) {
    using E = decltype(elem_tag);
    using W = decltype(word_tag);
    const auto words = static_cast<uint32_t>(out.numel() / (sizeof(W) / sizeof(E)));
    const auto grid = static_cast<unsigned>(std::min<int64_t>(ceil_div(words, 256), int64_t(sm_count()) * 16));
    ablate_join_last_dim<E, W><<<grid, 256, 0, stream>>>(args, static_cast<E*>(out.data_ptr()), words);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (elem == 2)
    wide && aligned16(out.data_ptr()) ? launch(uint16_t{}, uint4{}) : launch(uint16_t{}, uint16_t{});
  else
    wide && aligned16(out.data_ptr()) ? launch(uint32_t{}, uint4{}) : launch(uint32_t{}, uint32_t{});
  return out;
}

}  // namespace ablate::kernels::fused
