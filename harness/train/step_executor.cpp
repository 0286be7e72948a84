// harness/train/step_executor.cpp: see step_executor.h.
#include "harness/train/step_executor.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "harness/train/checkpoint.h"
#include "harness/train/data_parallel.h"
#include "harness/train/run_profiler.h"
#include "harness/train/step_graph.h"
#include "kernels/scope.h"

namespace ablate::harness {
namespace {

// bf16 autocast for the forward pass on the run's device type; fp32 master weights stay untouched.
class AutocastScope {
 public:
  AutocastScope(bool enabled, c10::DeviceType type) : enabled_(enabled), type_(type) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, false);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
  c10::DeviceType type_;
};

}  // namespace

StepExecutor::StepExecutor(const ExperimentSpec& spec, const RunPosture& posture, ModelState& state,
                           RunProfiler& profiler)
    : spec_(spec), posture_(posture), state_(state), profiler_(profiler) {
  rank_ = posture.group ? posture.group->rank() : 0;
  has_moe_ = spec.model.pattern.find('E') != std::string::npos;
  if (posture.group) {
    const auto stage = sharding_stage(spec.distributed.sharding);
    const int64_t bucket_bytes = spec.distributed.bucket_mb << 20;
    const auto units = state.model->parameter_units();
    const auto reduce_dtype = distributed_dtype_of(spec.distributed.reduce_dtype);
    const GemmWeightPrecision gemm_weights{distributed_dtype_of(spec.distributed.param_dtype),
                                           state.model->gemm_weights()};
    if (posture.experts) {
      // The expert weights differ between the ranks of an expert group: they are averaged (and sharded)
      // over the ranks holding the same experts (divided by the job's size: the loss is the job's mean),
      // the rest over the job. With one expert group (expert_parallel = the world) no other rank holds
      // a rank's experts: their sync communicates nothing and keeps them whole (GradientSync).
      const auto experts = state.model->expert_parameters();
      std::vector<torch::Tensor> shared;
      for (const auto& p : state.params)
        if (std::none_of(experts.begin(), experts.end(), [&](const torch::Tensor& e) { return e.is_same(p); }))
          shared.push_back(p);
      sync_ = std::make_unique<GradientSync>(*posture.group, shared, bucket_bytes, stage, units, reduce_dtype,
                                             /*communicates=*/true, gemm_weights);
      auto& holders = posture.experts->expert_data_group();
      expert_sync_ = std::make_unique<GradientSync>(holders, experts, bucket_bytes, stage, units, reduce_dtype,
                                                    /*communicates=*/holders.world_size() > 1, gemm_weights);
      expert_sync_->divide_gradients_by(posture.group->world_size());
      expert_sync_->count_staging_with(*sync_);
    } else {
      sync_ = std::make_unique<GradientSync>(*posture.group, state.params, bucket_bytes, stage, units, reduce_dtype,
                                             /*communicates=*/true, gemm_weights);
    }
    moe_collectives_.experts = posture.experts.get();
    ProcessGroup* counts = posture.counts ? posture.counts.get() : posture.group.get();
    moe_collectives_.sum_over_job = [counts](torch::Tensor& t) { counts->allreduce_sum_async(t)->wait(); };
    state.model->set_moe_collectives(&moe_collectives_);
    // Sharded: the optimizer updates the rank's shards of the flat buffers the parameters now live in.
    if (stage != ShardingStage::none) {
      unit_hooks_ = std::make_unique<UnitHooksOfSyncs>(syncs());
      state.model->set_unit_hooks(unit_hooks_.get());  // each unit waits for its own buckets' all-gathers
      state.optimizer = std::make_unique<ShardedAdamW>(state.params, *sync_, spec.train, *posture.dispatcher,
                                                       ShardedExperts{expert_sync_.get(), posture.experts.get()});
      if (!state.resumed_from.empty()) load_optimizer_state(state.resumed_from, *state.optimizer, posture.device);
    }
  }
  const int64_t B = spec.model.batch_size, T = spec.model.seq_len;
  ids_ = torch::empty({B, T + 1}, torch::TensorOptions(posture.device).dtype(torch::kLong));
  mask_ = torch::empty({B, T}, torch::TensorOptions(posture.device).dtype(torch::kFloat));
  inputs_ = ids_.slice(1, 0, T);
  targets_ = ids_.slice(1, 1, T + 1);
  warmup_steps_ = spec.train.warmup_steps;
  if (posture.graphs.eligible) {
    graph_ = std::make_shared<StepGraph>(posture.device);  // the thread runs on its side stream from here on
    // A graph cannot end with collectives still running for the next step: a run that captures gathers
    // the updated shards at the start of each step instead (the forward still waits unit by unit).
    gathers_first_ = sync_ && sync_->layout().sharded && sync_->stage() != ShardingStage::full;
    capture_step_ = state.start_step + kGraphWarmupEagerSteps;
    warmup_steps_ = std::max(warmup_steps_, kGraphWarmupEagerSteps + 1);  // the capture step is not steady
  }
}

// A gather still pending here belongs to a failed job (a finished one settled): it is dropped, and the
// job's communicators are aborted after.
StepExecutor::~StepExecutor() {
  if (!sync_) return;
  state_.model->set_unit_hooks(nullptr);
  state_.model->set_moe_collectives(nullptr);
}

std::vector<GradientSync*> StepExecutor::syncs() const {
  std::vector<GradientSync*> out;
  for (const auto& sync : {sync_.get(), expert_sync_.get()})
    if (sync) out.push_back(sync);
  return out;
}

StepExecutor::StepCollectives StepExecutor::step_collectives() const {
  StepCollectives c;
  if (!sync_) return c;
  // A replayed collective's timing events were recorded only into the graph: its time is unknown (a
  // profiled window's CUPTI records still show the NCCL kernels the replays ran).
  if (graph_ && graph_->captured()) {
    c.wait_ms = NAN;
    return c;
  }
  c.ms = sync_->collective_ms();
  c.total_ms = sync_->comm_ms();
  c.wait_ms = sync_->last_wait_ms();
  if (expert_sync_) {  // the same kinds as the job's (NaN + NaN for the others; 0 ms where it communicates nothing)
    const auto experts = expert_sync_->collective_ms();
    c.ms.all_reduce += experts.all_reduce;
    c.ms.reduce_scatter += experts.reduce_scatter;
    c.ms.all_gather += experts.all_gather;
    c.total_ms += expert_sync_->comm_ms();
    c.wait_ms += expert_sync_->last_wait_ms();
  }
  if (posture_.experts) {
    c.all_to_all_ms = posture_.experts->all_to_all_ms();
    c.total_ms += c.all_to_all_ms;
  }
  return c;
}

void StepExecutor::settle(bool whole) {
  for (auto* sync : syncs()) {
    if (!sync->layout().sharded) continue;
    // Gathering first, a step leaves its updated shards ungathered (the next step gathers them).
    if (whole && gathers_first_) sync->gather_parameters();
    sync->wait_parameters(whole);
  }
}

void StepExecutor::release_settled() {
  // Eager, the next forward frees each gathered unit after use; a replay runs no host code, so the
  // units a checkpoint gathered are freed here.
  if (!graph_ || !graph_->captured()) return;
  for (auto* sync : syncs()) sync->release_units();  // a no-op but under "full"
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> StepExecutor::master_values() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (auto* sync : syncs())
    for (auto& value : sync->master_values()) out.push_back(std::move(value));
  return out;
}

StepExecutor::Evaluation StepExecutor::evaluate(const data::DataSource& source, int64_t target_tokens) {
  const int64_t B = spec_.model.batch_size, T = spec_.model.seq_len, world = spec_.distributed.nproc;
  uint64_t rows = static_cast<uint64_t>((target_tokens + T - 1) / T);
  if (source.validation_rows() != data::DataSource::kUnbounded) rows = std::min(rows, source.validation_rows());
  if (rows == 0) throw std::logic_error("evaluate: the data holds nothing out (data.validation_fraction = 0)");
  const uint64_t per_rank = (rows + static_cast<uint64_t>(world) - 1) / static_cast<uint64_t>(world);
  const uint64_t batches = (per_rank + static_cast<uint64_t>(B) - 1) / static_cast<uint64_t>(B);
  settle(/*whole=*/true);  // the parameters as a checkpoint reads them: current and whole
  torch::NoGradGuard no_grad;
  const auto on_device = [&](torch::Tensor host, torch::ScalarType type) { return host.to(posture_.device, type); };
  auto sum = torch::zeros({}, torch::TensorOptions(posture_.device).dtype(torch::kDouble));
  double counted = 0;  // this rank's target tokens
  std::vector<int32_t> tokens(static_cast<size_t>(B * (T + 1)));
  std::vector<uint8_t> mask(static_cast<size_t>(B * T));
  for (uint64_t b = 0; b < batches; ++b) {
    std::fill(tokens.begin(), tokens.end(), 0);
    std::fill(mask.begin(), mask.end(), uint8_t{0});
    for (int64_t i = 0; i < B; ++i) {
      const uint64_t row = (b * static_cast<uint64_t>(B) + static_cast<uint64_t>(i)) * static_cast<uint64_t>(world) +
                           static_cast<uint64_t>(rank_);
      if (row < rows) source.fill_validation_row(row, tokens.data() + i * (T + 1), mask.data() + i * T);
    }
    const double n = static_cast<double>(std::count(mask.begin(), mask.end(), uint8_t{1}));
    const auto ids = on_device(torch::from_blob(tokens.data(), {B, T + 1}, torch::kInt32), torch::kLong);
    const auto weights = on_device(torch::from_blob(mask.data(), {B, T}, torch::kUInt8), torch::kFloat);
    if (posture_.experts) posture_.experts->begin_step();
    model::ModelOutput out;
    {
      kernels::Scope phase("eval");
      AutocastScope autocast(posture_.bf16, posture_.device.type());
      out = state_.model->forward(ids.slice(1, 0, T), ids.slice(1, 1, T + 1), weights);
    }
    if (n > 0) sum += out.ce.detach().to(torch::kDouble) * n;  // a padded batch's mean is 0/0: left out
    counted += n;
  }
  auto stats = torch::stack({sum, torch::full({}, counted, sum.options())});
  if (posture_.group) posture_.group->allreduce_mean_(stats);  // the ratio is the job's; the count scaled below
  const auto host = stats.cpu();
  release_settled();
  Evaluation e;
  e.loss = host[0].item<double>() / host[1].item<double>();
  e.tokens = std::llround(host[1].item<double>() * static_cast<double>(posture_.group ? world : 1));
  return e;
}

void StepExecutor::load(const data::Batch& batch) {
  const int64_t B = spec_.model.batch_size, T = spec_.model.seq_len, rows = B * spec_.distributed.nproc;
  // This rank's rows of the global batch (all of it in a single process).
  const auto ids = torch::from_blob(const_cast<int32_t*>(batch.tokens.data()), {rows, T + 1}, torch::kInt32).narrow(0, rank_ * B, B);
  const auto mask = torch::from_blob(const_cast<uint8_t*>(batch.loss_mask.data()), {rows, T}, torch::kUInt8).narrow(0, rank_ * B, B);
  if (!posture_.device.is_cuda()) {
    ids_.copy_(ids);
    mask_.copy_(mask);
    return;
  }
  // The buffer staged two loads ago was read by a step whose numbers have been read since: free.
  auto& staged = staged_[next_staging_];
  next_staging_ = 1 - next_staging_;
  if (!staged.ids.defined()) {
    const auto pinned = torch::TensorOptions().pinned_memory(true);
    staged.ids = torch::empty(ids_.sizes(), pinned.dtype(ids_.scalar_type()));
    staged.mask = torch::empty(mask_.sizes(), pinned.dtype(mask_.scalar_type()));
  }
  staged.ids.copy_(ids);
  staged.mask.copy_(mask);
  ids_.copy_(staged.ids, /*non_blocking=*/true);
  mask_.copy_(staged.mask, /*non_blocking=*/true);
}

// forward, backward, clipping, optimizer; returns [loss, grad norm(, aux loss, dropped slots)] on the
// device, fp64 (a drop count stays exact). The allocator probes run in eager steps only (not inside a
// graph capture).
torch::Tensor StepExecutor::body(int64_t step, bool probes) {
  model::ModelOutput fwd;
  if (posture_.experts) posture_.experts->begin_step();
  if (gathers_first_)  // every rank's updated shard; each unit waits for its own
    for (auto* sync : syncs()) sync->gather_parameters();
  {
    kernels::Scope phase("forward");  // launch scope: NVTX range, CUPTI external id (kernels/scope.h)
    AutocastScope autocast(posture_.bf16, posture_.device.type());
    fwd = state_.model->forward(inputs_, targets_, mask_);
  }
  if (probes) profiler_.after_phase(step, "forward");
  {
    kernels::Scope phase("backward");
    if (sync_) sync_->begin_step();
    if (expert_sync_) expert_sync_->begin_step();
    fwd.loss.backward();
    if (sync_) sync_->finish();  // every .grad is now the mean over the ranks
    if (expert_sync_) expert_sync_->finish();
  }
  if (probes) profiler_.after_phase(step, "backward");
  torch::Tensor stats;
  {
    kernels::Scope phase("optimizer");
    // Clipping rides in the update: the optimizer divides each gradient by the scale as it reads it.
    auto clipping = state_.optimizer->grad_norm(spec_.train.grad_clip);
    std::vector<torch::Tensor> job_means = {fwd.loss.detach().to(torch::kDouble), clipping.norm.to(torch::kDouble)};
    if (has_moe_) job_means.push_back(fwd.aux.detach().to(torch::kDouble));
    stats = torch::stack(job_means);
    // The job's losses are the mean of the ranks' (equal row counts); the norm is already the same
    // everywhere. The drop count stays the rank's own (each rank writes its own step rows). Reduced
    // before the update: sharded, the update ends by starting the parameter all-gathers, which the
    // step's one host read must not wait for (the next forward does, bucket by bucket).
    if (posture_.group) posture_.group->allreduce_mean_(stats);
    state_.optimizer->step(clipping.scale);
    // Sharded: every rank's updated shard into every rank's buffers, overlapping the host read and the
    // next forward (which waits for each unit's buckets); "full" gathers each unit as it is used.
    if (sync_ && sync_->layout().sharded && !gathers_first_)
      for (auto* sync : syncs()) sync->gather_parameters();
  }
  if (probes) profiler_.after_phase(step, "optimizer");
  if (has_moe_) stats = torch::cat({stats, fwd.dropped_slots.to(torch::kDouble).view({1})});
  return stats;
}

// The step's one host read: loss, gradient norm and the router's evidence together.
StepExecutor::Result StepExecutor::read(const torch::Tensor& stats, Mode mode) const {
  const auto host = stats.cpu();
  Result r;
  r.mode = mode;
  r.loss = host[0].item<double>();
  r.grad_norm = host[1].item<double>();
  if (has_moe_) {
    r.moe_aux_loss = host[2].item<double>();
    r.moe_dropped_slots = static_cast<int64_t>(std::llround(host[3].item<double>()));
  }
  return r;
}

void StepExecutor::prepare(double lr, const data::Batch& batch) {
  state_.optimizer->set_lr(lr);
  load(batch);
}

torch::Tensor StepExecutor::await_launch(int64_t step, int slot) {
  std::optional<std::chrono::milliseconds> timeout;
  if (posture_.group) timeout = posture_.group->timeout();  // one process: nothing can stall the replay
  auto host = graph_->output_within(slot, timeout);
  if (host.defined()) return host;
  ahead_.reset();  // a step launched ahead ends with the aborted replay; nothing is left to drain
  abort_replay(*timeout);
  throw std::runtime_error(fmt::format(
      "the CUDA graph replay of step {} did not finish within distributed.timeout_s = {} s: a collective "
      "captured in it waits for a rank that stopped",
      step, std::chrono::duration_cast<std::chrono::seconds>(*timeout).count()));
}

bool StepExecutor::replays() const { return graph_ && graph_->captured(); }

void StepExecutor::drain() {
  if (!ahead_) return;
  const Ahead ahead = *ahead_;
  ahead_.reset();
  await_launch(ahead.step, ahead.slot);
}

// The replay's NCCL kernels spin, waiting for the stopped rank, and anything that synchronises with the
// device waits with them: only aborting the communicators ends them (NCCL's abort flag). But once the
// flag is up, ncclCommAbort waits until no graph holds the communicators' plans, and destroying a graph
// waits for its replay to end (seen on 2 x H100: either order alone deadlocks). So the abort runs on a
// thread of its own, holding the group; the graph goes once its replay has ended; then the abort ends.
void StepExecutor::abort_replay(std::chrono::milliseconds wait) {
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  std::thread([group = posture_.group, aborted] {
    group->abort();
    aborted->store(true);
  }).detach();
  if (graph_->finished_within(wait)) {
    graph_->abandon();
  } else {
    fmt::print(stderr, "ablate: rank {}: the stalled replay did not end after the abort; the device is left as it is\n",
               posture_.group->rank());
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!aborted->load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

std::string StepExecutor::agree_on_capture(const std::string& failure) {
  if (!posture_.group) return failure;
  // Every rank replays or every rank runs eager: the ranks' collectives must stay in step.
  auto& group = *posture_.group;
  group.publish(fmt::format("graph-capture/{}", group.rank()), failure);
  std::string joint;
  for (int64_t r = 0; r < group.world_size(); ++r) {
    const std::string why = r == group.rank() ? failure : group.fetch(fmt::format("graph-capture/{}", r));
    if (!why.empty()) joint += fmt::format("{}rank {}: {}", joint.empty() ? "" : "; ", r, why);
  }
  return joint;
}

StepExecutor::Result StepExecutor::run(int64_t step, double lr, const data::Batch& batch, const NextStep* next) {
  if (replays()) {
    int slot = 0;
    if (ahead_ && ahead_->step == step) {
      slot = ahead_->slot;
      ahead_.reset();
    } else {
      if (ahead_) throw std::logic_error(fmt::format("step {} was launched ahead, step {} run", ahead_->step, step));
      prepare(lr, batch);
      slot = graph_->launch();
    }
    if (next != nullptr) {  // queued behind this step's replay: its batch, rate and replay
      prepare(next->lr, *next->batch);
      ahead_ = Ahead{step + 1, graph_->launch()};
      ++launched_ahead_;
    }
    const auto stats = await_launch(step, slot);
    profiler_.after_phase(step, "graph replay");
    return read(stats, Mode::replaying);
  }
  prepare(lr, batch);
  if (!graph_ || step != capture_step_) {
    state_.optimizer->zero_grad();
    return read(body(step, true), Mode::eager);
  }
  // The capturing step.
  receipts::CaptureFacts facts = posture_.graphs;
  facts.capture_step = step;
  state_.optimizer->zero_grad();  // the captured backward allocates the gradients in the graph's pool
  const auto t0 = std::chrono::steady_clock::now();
  profiler_.begin_capture();
  const std::string failure = agree_on_capture(graph_->capture([&] { return body(step, false); }));
  profiler_.end_capture();
  facts.capture_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Result r;
  if (failure.empty()) {
    facts.achieved = true;
    facts.outcome = receipts::CaptureOutcome::captured;
    facts.reason = fmt::format("captured at step {} after {} eager warm-up steps on a side stream ({:.0f} ms to "
                               "capture and instantiate){}; every later step replays the graph",
                               step, kGraphWarmupEagerSteps, *facts.capture_ms,
                               sync_ ? " with its collectives, on every rank" : "");
    r = read(await_launch(step, graph_->launch()), Mode::capturing);
  } else {
    facts.outcome = receipts::CaptureOutcome::failed;
    facts.reason = fmt::format("capture failed at step {}: {}; the run went on eager", step, failure);
    graph_.reset();  // back on the previous stream; every later step is eager
    state_.optimizer->zero_grad();
    r = read(body(step, true), Mode::eager);
  }
  r.capture = facts;
  return r;
}

}  // namespace ablate::harness
