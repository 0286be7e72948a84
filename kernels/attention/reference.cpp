// kernels/attention/reference.cpp: the reference backend of seam `attention` (AttentionFn in
// kernels/seams.h): explicit causal softmax attention in LibTorch ops, scores and softmax in fp32 even
// for bf16 inputs and under autocast. CPU and CUDA, fp32/fp64/bf16.
// Tests: kernels_tests --gtest_filter='Parity*attention*' (tests/kernels/parity_test.cpp).
#include <limits>

#include "kernels/numerics.h"
#include "kernels/registry.h"

namespace ablate::kernels {
namespace {

torch::Tensor attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be [B, H, T, D]");
  TORCH_CHECK(q.size(-2) == k.size(-2) && k.size(-2) == v.size(-2), "attention: q, k, v need one sequence length");
  NoAutocastScope fp32_arithmetic;  // the contract: scores and softmax in fp32 even under autocast
  const auto dt = compute_dtype(q);
  const int64_t T = q.size(-2);
  auto scores = torch::matmul(q.to(dt), k.to(dt).transpose(-2, -1)) * scale;
  const auto future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v.to(dt)).to(q.scalar_type());
}

}  // namespace

ABLATE_REGISTER_BACKENDS(attention_reference) {
  registry.attention("reference", &attention_reference);
}

}  // namespace ablate::kernels
