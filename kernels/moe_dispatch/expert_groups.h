// kernels/moe_dispatch/expert_groups.h: what both moe_dispatch backends share (reference.cpp,
// grouped_mm.cpp): the MoeDispatchFn argument checks and the slot-by-expert grouping, all on the device: slot s = token * k + j,
// the j-th choice of a token; slots sorted by expert with a stable sort, so token order is kept inside
// each expert's group and capacity drops hit the latest tokens first. And grouped_mm's passes around its
// GEMMs (the row movements, the weighted SwiGLU): on CUDA fused kernels (expert_kernels.cu), elsewhere
// the LibTorch ops they replace.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ablate::kernels {

// The MoeDispatchFn contract's shape checks (TORCH_CHECK: c10::Error).
void check_moe_dispatch_args(const torch::Tensor& x, const torch::Tensor& topk_idx, const torch::Tensor& topk_w,
                             const torch::Tensor& w1, const torch::Tensor& w3, const torch::Tensor& w2,
                             double capacity_factor);

struct ExpertGroups {
  torch::Tensor by_expert;      // [S] slot indices in expert order
  torch::Tensor position;       // [S] each slot's position in that order (the inverse of by_expert)
  torch::Tensor sorted_expert;  // [S] the expert of each slot in that order
  torch::Tensor load;           // [E] int64 slots per expert
  torch::Tensor group_start;    // [E] position of each expert's first slot in that order
  torch::Tensor group_end;      // [E] int32 group_start + load: the grouped GEMM's offsets
};
// On CUDA (int32/int64 ids, up to 256 experts) one counting-sort kernel (expert_kernels.cu); elsewhere
// group_by_expert_ops. Both give the same tensors, element for element (tests/kernels/expert_groups_test.cpp).
ExpertGroups group_by_expert(const torch::Tensor& topk_idx, int64_t experts);
// The same grouping in LibTorch ops (a stable sort, scatters, a cumsum): the CPU path and the CUDA
// kernel's reference in tests and benchmarks.
ExpertGroups group_by_expert_ops(const torch::Tensor& topk_idx, int64_t experts);
// Each slot's token row in expert order, out[i] = x[order[i] / k] (x [tokens, d], k slots a token):
// one gather, without materialising x repeated k times. The backward sums each token's k rows of the
// gradient (combine_slot_rows' pass): no scatter-add either.
torch::Tensor gather_slot_rows(const torch::Tensor& x, const torch::Tensor& order, const torch::Tensor& inverse,
                               int64_t k);
// The dual: each token's k slot rows summed, out[t] = sum_j src[inverse[t * k + j]] (src [S, d] in
// expert order), in fp32, written in out_dtype. On CUDA one pass (LibTorch gathers the [S, d] rows into
// slot order, then sums them); the backward is gather_slot_rows' gather.
torch::Tensor combine_slot_rows(const torch::Tensor& src, const torch::Tensor& order, const torch::Tensor& inverse,
                                int64_t k, at::ScalarType out_dtype);
// silu(g) * u * weight for each slot row of gate_up = [g | u] ([S, 2f]: the gate projection's f columns,
// then the up projection's), weight [S] the routing weight: [S, f] in gate_up's dtype. On CUDA (fp32,
// bf16) one pass each way in fp32 (the backward's weight gradient as an fp32 row sum); elsewhere the
// LibTorch ops: silu(g) * u in gate_up's dtype, times the weight in the wider dtype, rounded once.
torch::Tensor weighted_swiglu(const torch::Tensor& gate_up, const torch::Tensor& weight);
// weighted_swiglu's shape contract (TORCH_CHECK: c10::Error), also checked by its CUDA passes.
void check_weighted_swiglu_args(const torch::Tensor& gate_up, const torch::Tensor& weight);
// out[i] = x[index[i]], or a zero row where index[i] == x.size(0) (x [n, d], index [m] int64 in
// [0, n]): expert parallelism's padded row movements. On CUDA one pass of raw words, bit for bit the
// rows; elsewhere x with a zero row appended (a copy of x), then index_select.
torch::Tensor gather_rows_or_zero(const torch::Tensor& x, const torch::Tensor& index);
// [S] each slot's position inside its expert's group, in expert order.
torch::Tensor rank_in_expert(const ExpertGroups& groups);
// Slots an expert keeps under a capacity factor > 0: ceil(cf * slots / experts), at least 1.
int64_t expert_capacity(double capacity_factor, int64_t slots, int64_t experts);

#if defined(ABLATE_HAVE_CUDA)
// The CUDA passes behind group_by_expert, combine_slot_rows, gather_slot_rows' backward,
// weighted_swiglu and gather_rows_or_zero (expert_kernels.cu); their autograd lives in expert_groups.cpp.
namespace fused {
torch::Tensor sum_slot_rows_cuda(const torch::Tensor& src, const torch::Tensor& inverse, int64_t k,
                                 at::ScalarType out_dtype);
torch::Tensor weighted_swiglu_cuda(const torch::Tensor& gate_up, const torch::Tensor& weight);
// {d gate_up, d weight}
std::pair<torch::Tensor, torch::Tensor> weighted_swiglu_backward_cuda(const torch::Tensor& gate_up,
                                                                      const torch::Tensor& weight,
                                                                      const torch::Tensor& d_hidden);
torch::Tensor gather_rows_or_zero_cuda(const torch::Tensor& x, const torch::Tensor& index);
// group_by_expert's counting sort, for the ids and expert counts group_by_expert_cuda_supports.
bool group_by_expert_cuda_supports(const torch::Tensor& topk_idx, int64_t experts);
ExpertGroups group_by_expert_cuda(const torch::Tensor& topk_idx, int64_t experts);
}  // namespace fused
#endif

}  // namespace ablate::kernels
