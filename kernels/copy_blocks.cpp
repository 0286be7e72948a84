// kernels/copy_blocks.cpp: see copy_blocks.h.
#include "kernels/copy_blocks.h"

namespace ablate::kernels {
namespace {

// t as the 3-d block the CUDA pass takes (leading size-1 dims added; a contiguous tensor of more dims as
// one row), or undefined when it is none.
torch::Tensor block_view(const torch::Tensor& t) {
  if (t.dim() <= 3 && (t.dim() == 0 || t.stride(-1) == 1)) {
    auto v = t;
    while (v.dim() < 3) v = v.unsqueeze(0);
    return v;
  }
  if (t.is_contiguous()) return t.view({1, 1, t.numel()});
  return {};
}

}  // namespace

void copy_blocks(const std::vector<std::pair<torch::Tensor, torch::Tensor>>& dst_src, double scale) {
  if (dst_src.empty()) return;
  for (const auto& [dst, src] : dst_src)
    TORCH_CHECK(dst.sizes() == src.sizes(), "copy_blocks: a pair of shapes ", dst.sizes(), " and ", src.sizes());
#if defined(ABLATE_HAVE_CUDA)
  const auto fast = [](const torch::Tensor& t) {
    return t.is_cuda() && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16);
  };
  const auto& [dst0, src0] = dst_src.front();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> blocks;
  for (const auto& [dst, src] : dst_src) {
    if (!fast(dst) || !fast(src) || dst.scalar_type() != dst0.scalar_type() || src.scalar_type() != src0.scalar_type() ||
        dst.device() != dst0.device() || src.device() != dst0.device())
      break;
    auto d = block_view(dst), s = block_view(src);
    if (!d.defined() || !s.defined() || d.sizes() != s.sizes()) break;
    blocks.emplace_back(std::move(d), std::move(s));
  }
  if (blocks.size() == dst_src.size()) return fused::copy_blocks_cuda(blocks, static_cast<float>(scale));
#endif
  for (const auto& [dst, src] : dst_src) {
    if (scale == 1.0) dst.copy_(src);
    else dst.copy_(src.to(torch::kFloat).mul(scale));  // the product in fp32, rounded once into dst
  }
}

}  // namespace ablate::kernels
