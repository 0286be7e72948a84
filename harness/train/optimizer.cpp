// harness/train/optimizer.cpp: see optimizer.h.
#include "harness/train/optimizer.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include "harness/train/data_parallel.h"
#include "harness/train/expert_parallel.h"

namespace ablate::harness {
namespace {

// The checkpoint key of AdamW's state of parameter i of group g ("group0.param3.").
std::string state_key(size_t group, size_t index) { return fmt::format("group{}.param{}.", group, index); }

// `key` from the archive.
torch::Tensor read_saved(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::Tensor saved;
  if (!archive.try_read(key, saved, /*is_buffer=*/true))
    throw std::invalid_argument(fmt::format(
        "the checkpoint's optimizer.pt has no '{}': it was written by another optimizer layout (ablate before the "
        "optimizer seam, or another model); resume from a newer checkpoint or set train.resume = false",
        key));
  return saved;
}

// `key` from the archive, checked against the shape this model needs.
torch::Tensor read_state(torch::serialize::InputArchive& archive, const std::string& key, c10::IntArrayRef sizes) {
  auto saved = read_saved(archive, key);
  if (saved.sizes() != sizes)
    throw std::invalid_argument(fmt::format("the checkpoint's optimizer state '{}' has shape {} where this model needs "
                                            "{}: the checkpoint belongs to another model",
                                            key, c10::str(saved.sizes()), c10::str(sizes)));
  return saved;
}

// A copy of `t` on the host with storage of its own: a view would be saved with its whole bucket.
torch::Tensor on_host(const torch::Tensor& t) {
  return t.to(torch::TensorOptions().device(torch::kCPU), /*non_blocking=*/false, /*copy=*/true);
}

// The norm and, when max_norm > 0, the clipping scale max(1, (norm + 1e-6) / max_norm).
GradNorm clipped(torch::Tensor norm, double max_norm) {
  GradNorm out;
  out.norm = std::move(norm);
  if (max_norm > 0) out.scale = ((out.norm + 1e-6) / max_norm).clamp_min(1.0);
  return out;
}

}  // namespace

namespace {
// The squared norm of the parameters' gradients together, 0-dim fp32. Grouped by dtype: a multi-tensor
// op takes one dtype a call (fp32 master weights: one group).
torch::Tensor grad_square_norm(const std::vector<torch::Tensor>& params) {
  std::map<at::ScalarType, std::vector<torch::Tensor>> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads[p.grad().scalar_type()].push_back(p.grad().detach());
  if (grads.empty()) return torch::zeros({}, torch::kFloat);
  std::vector<torch::Tensor> norms;
  for (const auto& [dtype, list] : grads)
    for (const auto& n : at::_foreach_norm(list, 2, torch::kFloat)) norms.push_back(n);
  return torch::stack(norms).square().sum();
}
}  // namespace

GradNorm measure_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  return clipped(grad_square_norm(params).sqrt(), max_norm);
}

GradNorm AdamW::grad_norm(double max_norm) {
  if (!expert_group_) return measure_grad_norm(params_, max_norm);
  auto partitioned = grad_square_norm(partitioned_).to(lr_.device()).view({1});
  expert_group_->sum_over_group(partitioned);
  return clipped((grad_square_norm(replicated_).to(lr_.device()) + partitioned.squeeze(0)).sqrt(), max_norm);
}

void AdamW::partition_experts(const std::vector<torch::Tensor>& experts, const ExpertParallel& group) {
  auto is_expert = [&](const torch::Tensor& p) {
    return std::any_of(experts.begin(), experts.end(), [&](const auto& q) { return q.is_same(p); });
  };
  replicated_.clear();
  partitioned_.clear();
  for (const auto& p : params_) (is_expert(p) ? partitioned_ : replicated_).push_back(p);
  if (partitioned_.size() != experts.size())
    throw std::logic_error("AdamW::partition_experts: an expert parameter is not one of the optimizer's");
  partitioned_in_group_.clear();
  for (const auto& g : groups_) {
    partitioned_in_group_.emplace_back();
    for (const auto& p : g.params) partitioned_in_group_.back().push_back(is_expert(p));
  }
  expert_group_ = &group;
}

AdamW::AdamW(const std::vector<torch::Tensor>& params, const TrainSection& t, const kernels::Dispatcher& dispatcher)
    : dispatcher_(dispatcher), params_(params) {
  Group decay, no_decay;
  decay.hyper = {t.beta1, t.beta2, t.eps, t.weight_decay};
  no_decay.hyper = {t.beta1, t.beta2, t.eps, 0.0};
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto& g = p.dim() >= 2 ? decay : no_decay;
    g.params.push_back(p);
    g.exp_avgs.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    g.exp_avg_sqs.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    g.steps.push_back(torch::zeros({}, p.options().dtype(torch::kFloat)));
  }
  groups_ = {std::move(decay), std::move(no_decay)};
  lr_ = torch::full({}, t.lr, params.empty() ? torch::TensorOptions(torch::kFloat) : params[0].options().dtype(torch::kFloat));
}

void AdamW::set_lr(double lr) { lr_.fill_(lr); }

void AdamW::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.mutable_grad() = torch::Tensor();
}

void AdamW::step(const torch::Tensor& grad_scale) {
  for (auto& g : groups_) {
    if (g.params.empty()) continue;
    std::vector<torch::Tensor> grads;
    grads.reserve(g.params.size());
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (!g.params[i].grad().defined())
        throw std::logic_error(fmt::format("optimizer: parameter {} of shape {} has no gradient after backward", i,
                                           c10::str(g.params[i].sizes())));
      grads.push_back(g.params[i].grad());
    }
    dispatcher_.optimizer(g.params, grads, g.exp_avgs, g.exp_avg_sqs, g.steps, lr_, grad_scale, g.hyper);
  }
}

bool AdamW::is_partitioned(size_t group, size_t index) const {
  return expert_group_ && partitioned_in_group_[group][index];
}

void AdamW::save(torch::serialize::OutputArchive& archive) const {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      const auto key = state_key(gi, i);
      const auto& g = groups_[gi];
      // An expert's moments whole, every rank's rows (in the group's order on every rank).
      auto whole = [&](const torch::Tensor& t) { return is_partitioned(gi, i) ? expert_group_->gather_experts(t) : t; };
      archive.write(key + "exp_avg", whole(g.exp_avgs[i]), /*is_buffer=*/true);
      archive.write(key + "exp_avg_sq", whole(g.exp_avg_sqs[i]), /*is_buffer=*/true);
      archive.write(key + "step", g.steps[i], /*is_buffer=*/true);
    }
}

void AdamW::load(torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi)
    for (size_t i = 0; i < groups_[gi].params.size(); ++i) {
      const auto key = state_key(gi, i);
      auto& g = groups_[gi];
      auto read_into = [&](torch::Tensor& mine, const std::string& name) {
        if (is_partitioned(gi, i))
          mine.copy_(expert_group_->own_experts(read_saved(archive, key + name), mine));
        else
          mine.copy_(read_state(archive, key + name, mine.sizes()));
      };
      read_into(g.exp_avgs[i], "exp_avg");
      read_into(g.exp_avg_sqs[i], "exp_avg_sq");
      g.steps[i].copy_(read_state(archive, key + "step", g.steps[i].sizes()));
    }
}

ShardedAdamW::ShardedAdamW(const std::vector<torch::Tensor>& params, GradientSync& sync, const TrainSection& t,
                           const kernels::Dispatcher& dispatcher, const ShardedExperts& experts)
    : dispatcher_(dispatcher) {
  parts_.emplace_back(&sync, nullptr);
  if (experts.sync) parts_.emplace_back(experts.sync, experts.group);
  // AdamW's keys: every parameter in the model's order, decayed ones group 0, the rest group 1.
  std::map<const c10::TensorImpl*, std::string> key_of;
  size_t counts[2] = {0, 0};
  for (const auto& p : params) {
    const size_t g = p.dim() >= 2 ? 0 : 1;
    key_of[p.unsafeGetTensorImpl()] = state_key(g, counts[g]++);
  }
  // groups_[decayed ? 0 : 1] of fp32 buckets, + 2 of bf16 buckets.
  groups_.resize(4);
  for (size_t g = 0; g < groups_.size(); ++g)
    groups_[g].hyper = {t.beta1, t.beta2, t.eps, g % 2 == 0 ? t.weight_decay : 0.0};
  for (auto& part : parts_) {
    const auto& layout = part.sync->layout();
    if (!layout.sharded) throw std::logic_error("ShardedAdamW needs a GradientSync built sharded");
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      const auto& bucket = layout.buckets[b];
      const auto options = part.sync->parameter_shard(b).options();
      part.exp_avg_shards.push_back(torch::zeros({bucket.shard_numel}, options));
      part.exp_avg_sq_shards.push_back(torch::zeros({bucket.shard_numel}, options));
      const auto rounded = part.sync->rounded_shard(b);
      for (const auto& run : bucket.runs) {
        auto& g = groups_[(run.decay ? 0 : 1) + (rounded.defined() ? 2 : 0)];
        if (rounded.defined()) g.rounded.push_back(rounded.narrow(0, run.offset, run.length));
        g.params.push_back(part.sync->parameter_shard(b).narrow(0, run.offset, run.length));
        g.grads.push_back(part.sync->gradient_shard(b).narrow(0, run.offset, run.length));
        g.exp_avgs.push_back(part.exp_avg_shards.back().narrow(0, run.offset, run.length));
        g.exp_avg_sqs.push_back(part.exp_avg_sq_shards.back().narrow(0, run.offset, run.length));
        g.steps.push_back(torch::zeros({}, options));
      }
    }
    for (const auto& p : part.sync->params()) {
      const auto key = key_of.find(p.unsafeGetTensorImpl());
      if (key == key_of.end()) throw std::logic_error("ShardedAdamW: a synced parameter is not one of the model's");
      part.state_keys.push_back(key->second);
    }
  }
  const auto options = sync.params().empty() ? torch::TensorOptions(torch::kFloat)
                                             : sync.params().front().options().dtype(torch::kFloat);
  lr_ = torch::full({}, t.lr, options);
}

void ShardedAdamW::set_lr(double lr) { lr_.fill_(lr); }

void ShardedAdamW::zero_grad() {
  for (const auto& part : parts_)
    for (const auto& p : part.sync->params()) p.mutable_grad() = torch::Tensor();
}

GradNorm ShardedAdamW::grad_norm(double max_norm) {
  // Each element of the model's reduced gradient lies in exactly one rank's shard across the job: the
  // job-wide sync's shards split the job, and each place's experts are split over its expert-data group
  // (the places of an expert group times those groups are the job's ranks, each once). So one sum over
  // the job counts every element once. The shards' padding is zero on every rank, so it adds nothing.
  std::vector<torch::Tensor> shards;
  for (const auto& part : parts_)
    for (size_t b = 0; b < part.sync->buckets(); ++b) shards.push_back(part.sync->gradient_shard(b));
  auto squares = shards.empty() ? torch::zeros({1}, torch::kFloat) : torch::stack(at::_foreach_norm(shards, 2, torch::kFloat)).square().sum().view({1});
  parts_.front().sync->group().allreduce_sum_async(squares)->wait();
  return clipped(squares.sqrt().squeeze(0), max_norm);  // 0-dim, as measure_grad_norm's
}

void ShardedAdamW::step(const torch::Tensor& grad_scale) {
  for (auto& g : groups_)
    if (!g.params.empty())
      dispatcher_.optimizer(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, g.steps, lr_, grad_scale, g.hyper,
                            g.rounded);
}

// The step count every run holds (they step together); rank 0 owns the first element of every bucket,
// a parameter's, so its groups are never all empty.
template <typename Groups>
static torch::Tensor any_step(const Groups& groups) {
  for (const auto& g : groups)
    if (!g.steps.empty()) return g.steps.front();
  throw std::logic_error("sharded optimizer: this rank updates no parameter, so it holds no step count");
}

void ShardedAdamW::save(torch::serialize::OutputArchive& archive) const {
  torch::NoGradGuard no_grad;
  const auto step = any_step(groups_).cpu();
  for (const auto& part : parts_) {
    const auto& layout = part.sync->layout();
    for (size_t b = 0; b < layout.buckets.size(); ++b) {
      // The bucket's moments whole, every rank's shard; the device holds one bucket's at a time.
      auto m = torch::empty({layout.buckets[b].numel}, part.exp_avg_shards[b].options());
      auto v = torch::empty_like(m);
      auto m_shard = part.exp_avg_shards[b], v_shard = part.exp_avg_sq_shards[b];
      auto wm = part.sync->group().all_gather_async(m, m_shard);
      auto wv = part.sync->group().all_gather_async(v, v_shard);
      wm->wait();
      wv->wait();
      for (const size_t i : layout.buckets[b].params) {
        const auto& p = part.sync->params()[i];
        const auto& key = part.state_keys[i];
        // An expert tensor's moments hold every place's rows (gathered over the expert group, in the same
        // order on each of its ranks), as AdamW::partition_experts saves them.
        auto whole = [&](const torch::Tensor& bucket) {
          auto mine = bucket.narrow(0, layout.offset_of[i], p.numel()).view(p.sizes());
          return part.experts ? part.experts->gather_experts(mine) : on_host(mine);
        };
        archive.write(key + "exp_avg", whole(m), /*is_buffer=*/true);
        archive.write(key + "exp_avg_sq", whole(v), /*is_buffer=*/true);
        archive.write(key + "step", step, /*is_buffer=*/true);
      }
    }
  }
}

void ShardedAdamW::load(torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  torch::Tensor step;
  for (auto& part : parts_) {
    const auto& layout = part.sync->layout();
    for (size_t i = 0; i < part.state_keys.size(); ++i) {
      const auto& p = part.sync->params()[i];
      const auto& key = part.state_keys[i];
      // This rank's values of the parameter (an expert tensor's: its place's rows of the whole saved).
      auto read = [&](const std::string& name) {
        return (part.experts ? part.experts->own_experts(read_saved(archive, key + name), p)
                             : read_state(archive, key + name, p.sizes()))
            .reshape({-1});
      };
      const auto m = read("exp_avg");
      const auto v = read("exp_avg_sq");
      step = read_state(archive, key + "step", {});
      // The part of this parameter inside the rank's slice [lo, lo + S) of its bucket.
      const size_t b = layout.bucket_of[i];
      const int64_t offset = layout.offset_of[i];
      const int64_t S = layout.buckets[b].shard_numel, lo = layout.rank * S;
      const int64_t start = std::max(lo, offset), end = std::min(lo + S, offset + p.numel());
      if (start >= end) continue;
      part.exp_avg_shards[b].narrow(0, start - lo, end - start).copy_(m.narrow(0, start - offset, end - start));
      part.exp_avg_sq_shards[b].narrow(0, start - lo, end - start).copy_(v.narrow(0, start - offset, end - start));
    }
  }
  if (step.defined())
    for (auto& g : groups_)
      for (auto& s : g.steps) s.copy_(step);
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : groups_)
    for (const auto& m : g.exp_avgs) bytes += 2 * m.numel() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& part : parts_)
    for (const auto& m : part.exp_avg_shards) bytes += 2 * m.numel() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

}  // namespace ablate::harness
