// harness/train/expert_parallel.cpp: see expert_parallel.h.
#include "harness/train/expert_parallel.h"

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace ablate::harness {

ExpertParallel::ExpertParallel(const ProcessGroup& job, int64_t ranks, int64_t chunks) : chunks_(chunks) {
  const int64_t world = job.world_size(), me = job.rank();
  if (ranks < 1 || world % ranks != 0)
    throw std::invalid_argument(fmt::format("distributed.expert_parallel = {} does not divide the job's {} ranks",
                                            ranks, world));
  if (chunks < 1)
    throw std::invalid_argument(fmt::format("distributed.expert_exchange_chunks = {}: at least 1", chunks));
  const int64_t group = me / ranks, place = me % ranks;
  std::vector<int64_t> experts, expert_data;
  for (int64_t r = 0; r < ranks; ++r) experts.push_back(group * ranks + r);
  for (int64_t g = 0; g < world / ranks; ++g) expert_data.push_back(g * ranks + place);
  experts_ = job.subgroup(fmt::format("experts{}", group), experts);
  expert_data_ = job.subgroup(fmt::format("expert-data{}", place), expert_data);
}

ExpertParallel::~ExpertParallel() = default;

void ExpertParallel::start_all_to_all(int64_t key, torch::Tensor& out, const torch::Tensor& in,
                                      const std::vector<int64_t>& out_splits,
                                      const std::vector<int64_t>& in_splits) const {
  if (started_.count(key) != 0)
    throw std::logic_error(fmt::format("expert parallel: all-to-all {} started twice before a wait", key));
  auto send = in.contiguous();
  auto work = experts_->all_to_all_async(out, send, out_splits, in_splits);
  step_bytes_ += send.numel() * static_cast<int64_t>(send.element_size());
  works_.push_back(work);
  started_.emplace(key, Started{std::move(work), out});
}

torch::Tensor ExpertParallel::wait_all_to_all(int64_t key) const {
  const auto it = started_.find(key);
  if (it == started_.end()) throw std::logic_error(fmt::format("expert parallel: all-to-all {} waited for unstarted", key));
  it->second.work->wait();  // NCCL: the current stream waits; Gloo: done on return
  auto out = std::move(it->second.out);
  started_.erase(it);
  return out;
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
