// kernels/loss/chunked.h: the `chunked` backend of seam `loss` with its chunk size exposed, for tests
// that force several chunks on small shapes (kernels/loss/chunked.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace ablate::kernels {

// The loss over row chunks of `chunk_rows` rows (0: as many rows as keep one chunk's logits near 16 Mi
// elements). A custom autograd function: backward recomputes each chunk's logits from the saved
// log-sum-exp, so no [N, V] tensor exists in forward or backward. Differentiable once.
torch::Tensor loss_chunked(const torch::Tensor& hidden, const torch::Tensor& head_weight, const torch::Tensor& targets,
                           const torch::Tensor& mask, int64_t chunk_rows = 0);

}  // namespace ablate::kernels
