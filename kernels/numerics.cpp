// kernels/numerics.cpp: see numerics.h.
#include "kernels/numerics.h"

namespace ablate::kernels {

at::ScalarType compute_dtype(const char* seam, std::initializer_list<const torch::Tensor*> inputs) {
  at::ScalarType dt = at::kFloat;
  for (const auto* t : inputs)
    if (t->defined()) dt = at::promote_types(dt, t->scalar_type());
  TORCH_CHECK(dt == at::kFloat || dt == at::kDouble, seam, ": unsupported input dtype ", dt);
  return dt;
}

torch::Tensor rotate_adjacent_pairs(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.size(-1) % 2 == 0, "rotate_adjacent_pairs: last dim ", x.size(-1), " is odd");
  TORCH_CHECK(cos.size(-1) * 2 == x.size(-1) && sin.sizes() == cos.sizes(),
              "rotate_adjacent_pairs: cos/sin need last dim ", x.size(-1) / 2);
  const auto dt = compute_dtype(x);
  const auto pairs = x.to(dt).unflatten(-1, {x.size(-1) / 2, 2});
  const auto even = pairs.select(-1, 0), odd = pairs.select(-1, 1);
  const auto c = cos.to(dt), s = sin.to(dt);
  return torch::stack({even * c - odd * s, even * s + odd * c}, -1).flatten(-2).to(x.scalar_type());
}

}  // namespace ablate::kernels
