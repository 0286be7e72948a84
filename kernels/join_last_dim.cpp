// kernels/join_last_dim.cpp: see join_last_dim.h.
#include "kernels/join_last_dim.h"

#include <numeric>

namespace ablate::kernels {

const torch::Tensor* first_defined(const std::vector<torch::Tensor>& parts) {
  for (const auto& p : parts)
    if (p.defined()) return &p;
  return nullptr;
}

namespace {

// The parts as one view of their buffer, or undefined: every part defined, same storage, dtype, sizes
// but the last and strides, unit last-dim stride, and each part starting where the previous one ends.
torch::Tensor adjacent_view(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths) {
  const auto& first = parts.front();
  const int64_t elem = static_cast<int64_t>(first.element_size());
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    if (!p.defined() || !p.storage().is_alias_of(first.storage()) || p.scalar_type() != first.scalar_type() ||
        p.dim() != first.dim() || p.stride(-1) != 1 || p.size(-1) != widths[i] ||
        static_cast<const char*>(p.data_ptr()) != static_cast<const char*>(first.data_ptr()) + offset * elem)
      return {};
    for (int64_t d = 0; d + 1 < p.dim(); ++d)
      if (p.size(d) != first.size(d) || p.stride(d) != first.stride(d)) return {};
    offset += widths[i];
  }
  // The joined rows must fit inside each row stride (no overlap with the next row).
  for (int64_t d = 0; d + 1 < first.dim(); ++d)
    if (first.size(d) > 1 && first.stride(d) < offset) return {};
  auto sizes = first.sizes().vec();
  sizes.back() = offset;
  return first.as_strided(sizes, first.strides(), first.storage_offset());
}

class SplitLastDim : public torch::autograd::Function<SplitLastDim> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& t,
                                                const std::vector<int64_t>& sizes) {
    ctx->saved_data["sizes"] = sizes;
    auto parts = t.split_with_sizes(sizes, -1);
    return {parts.begin(), parts.end()};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (first_defined(grads) == nullptr) return {torch::Tensor(), torch::Tensor()};
    return {join_last_dim(grads, ctx->saved_data["sizes"].toIntVector()), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor join_last_dim(const std::vector<torch::Tensor>& parts, const std::vector<int64_t>& widths) {
  TORCH_CHECK(!parts.empty() && parts.size() == widths.size(), "join_last_dim: one width per part, got ", parts.size(),
              " parts and ", widths.size(), " widths");
  const auto* some = first_defined(parts);
  TORCH_CHECK(some != nullptr, "join_last_dim: every part is undefined (no shape to join)");
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].defined())
      TORCH_CHECK(parts[i].dim() == some->dim() && parts[i].size(-1) == widths[i] &&
                      parts[i].sizes().slice(0, some->dim() - 1) == some->sizes().slice(0, some->dim() - 1) &&
                      parts[i].scalar_type() == some->scalar_type() && parts[i].device() == some->device(),
                  "join_last_dim: part ", i, " is ", parts[i].sizes(), " ", parts[i].scalar_type(), " where ",
                  some->sizes().slice(0, some->dim() - 1), " x ", widths[i], " ", some->scalar_type(), " is needed");
  if (auto view = adjacent_view(parts, widths); view.defined()) return view;
#if defined(ABLATE_HAVE_CUDA)
  if (fused::join_last_dim_cuda_supports(parts, widths)) return fused::join_last_dim_cuda(parts, widths);
#endif
  std::vector<torch::Tensor> filled;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].defined()) {
      filled.push_back(parts[i]);
    } else {
      auto sizes = some->sizes().vec();
      sizes.back() = widths[i];
      filled.push_back(torch::zeros(sizes, some->options()));
    }
  }
  return torch::cat(filled, -1);
}

std::vector<torch::Tensor> split_last_dim(const torch::Tensor& t, const std::vector<int64_t>& sizes) {
  TORCH_CHECK(t.dim() >= 1 && std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == t.size(-1),
              "split_last_dim: sizes must add up to the last dim ", t.size(-1));
  return SplitLastDim::apply(t, sizes);
}

}  // namespace ablate::kernels
