// harness/train/expert_parallel.cpp: see expert_parallel.h.
#include "harness/train/expert_parallel.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace ablate::harness {

ExpertParallel::ExpertParallel(const ProcessGroup& job, int64_t ranks) {
  const int64_t world = job.world_size(), me = job.rank();
  if (ranks < 1 || world % ranks != 0)
    throw std::invalid_argument(fmt::format("distributed.expert_parallel = {} does not divide the job's {} ranks",
                                            ranks, world));
  const int64_t group = me / ranks, place = me % ranks;
  std::vector<int64_t> experts, expert_data;
  for (int64_t r = 0; r < ranks; ++r) experts.push_back(group * ranks + r);
  for (int64_t g = 0; g < world / ranks; ++g) expert_data.push_back(g * ranks + place);
  experts_ = job.subgroup(fmt::format("experts{}", group), experts);
  expert_data_ = job.subgroup(fmt::format("expert-data{}", place), expert_data);
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::all_to_all(torch::Tensor& out, const torch::Tensor& in, const std::vector<int64_t>& out_splits,
                                const std::vector<int64_t>& in_splits) const {
  auto send = in.contiguous();
  auto work = experts_->all_to_all_async(out, send, out_splits, in_splits);
  work->wait();  // NCCL: the current stream waits; Gloo: done on return
  works_.push_back(std::move(work));
  step_bytes_ += send.numel() * static_cast<int64_t>(send.element_size());
}

void ExpertParallel::sum_over_group(torch::Tensor& t) const { experts_->allreduce_sum_async(t)->wait(); }

torch::Tensor ExpertParallel::gather_experts(const torch::Tensor& mine) const {
  auto in = mine.detach().contiguous();
  auto sizes = in.sizes().vec();
  sizes[0] *= ranks();
  auto whole = torch::empty(sizes, in.options());
  experts_->all_gather_async(whole, in)->wait();
  return whole.cpu();  // the device holds one expert tensor whole at a time
}

torch::Tensor ExpertParallel::own_experts(const torch::Tensor& whole, const torch::Tensor& mine) const {
  auto sizes = mine.sizes().vec();
  sizes[0] *= ranks();
  const c10::IntArrayRef expected(sizes);
  if (whole.sizes() != expected)
    throw std::invalid_argument(fmt::format("the checkpoint holds an expert tensor of shape {} where this model's {} "
                                            "experts make {}: the checkpoint belongs to another model",
                                            c10::str(whole.sizes()), sizes[0], c10::str(expected)));
  return whole.narrow(0, rank() * mine.size(0), mine.size(0));
}

void ExpertParallel::begin_step() {
  works_.clear();
  step_bytes_ = 0;
}

double ExpertParallel::all_to_all_ms() const {
  if (works_.empty()) return NAN;
  std::vector<const c10d::Work*> works;
  for (const auto& w : works_) works.push_back(w.get());
  return collectives_ms(works);
}

}  // namespace ablate::harness
