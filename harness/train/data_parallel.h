// harness/train/data_parallel.h: data-parallel training over LibTorch's own c10d: the rendezvous
// TCPStore (hosted by the launcher, `ablate launch` or torchrun's agent, else by rank 0),
// ProcessGroupNCCL on CUDA and ProcessGroupGloo on the CPU (the same code path, so CI tests it without
// a GPU), and GradientSync, the bucketed gradient all-reduce that overlaps backward.
//
// GradientSync: parameters are packed, in reverse order of first use in forward (the model's units:
// the order backward reaches them), into flat fp32 buckets of distributed.bucket_mb
// (harness/shard_layout.h). A hook on each parameter writes its gradient divided by the world into its
// slot (one pass: the copy and the scaling together) and hands the slot back to autograd as the
// parameter's .grad (so no second copy of the gradients lives on); when a bucket's last gradient
// arrives, the bucket is all-reduced (sum) asynchronously while backward goes on. Buckets are launched
// strictly in index order, the same on every rank (NCCL needs the same sequence of collectives
// everywhere). finish() launches what a parameter without a gradient held back (its slot zeroed), then
// waits: on CUDA a stream wait (no host sync), on Gloo a host wait. A parameter's .grad is then the
// world's mean gradient.
//
// Sharded (distributed.sharding = "optimizer", ZeRO-1): the buckets are padded to split evenly over the
// ranks, and each parameter's data is moved into a flat fp32 parameter buffer laid out as its gradient
// bucket, so that the rank's slice of that buffer is its shard of the master weights. A full bucket is
// reduce-scattered (sum of gradients pre-divided by the world) into the rank's gradient shard instead of
// all-reduced; after finish() only the shards hold reduced gradients and no parameter has a .grad.
// ShardedAdamW (harness/train/optimizer.h) updates the shards; gather_parameters() then starts every
// bucket's all-gather, in the order the next forward pass first needs the buckets, and returns at once:
// as a model::ParameterUnitHooks the sync waits for a unit's buckets just before the forward reads them
// (a stream wait on NCCL), so the gathers overlap the end of the step and the next forward. The buckets
// a unit first needs are gathered as one coalesced collective (NCCL: one group, one kernel): the
// forward waits for them together anyway, and a captured step, which issues every gather at once,
// replays each collective as a graph branch of its own that can hold one of the hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS) the compute stream shares: one per unit, not one per bucket.
// "gradients" (ZeRO-2) keeps no full-size gradient bucket between steps: a bucket is allocated when its
// first gradient arrives (its padding zeroed, so the shard's runs read zeros there), reduce-scattered
// into a persistent shard of its own, and released once the next bucket is launched (the compute stream
// waits for its reduce-scatter first: one in flight, so the transient memory is about two buckets).
// "full" (ZeRO-3) stages gradients so, with one bucket a model unit (model/parameter_units.h), and keeps
// only the rank's shard of each unit's fp32 parameters (`master`): a unit's flat parameter buffer has its
// storage resized to 0 bytes between uses (every view of it, the parameters and what autograd saved,
// stays valid) and is all-gathered back just before its forward (the next unit's gather prefetched)
// and again before its backward (an identity node on its outputs: the previous unit's prefetched),
// then freed: after its forward, and after its gradients are reduce-scattered. The last unit (final
// norm and head) stays through its backward; the embedding's backward needs no weights.
//
// Reduced in bf16 (distributed.reduce_dtype = "bf16", sharded stages only): the buckets are bf16, so the
// reduce-scatter carries half the bytes; the hook writes g / world rounded to bf16 into its slot and leaves
// autograd's fp32 gradient as the .grad, dropped at the next hook (its accumulation is done by then:
// one parameter's gradient lives on at most). The rank's reduced bf16 part is widened into its fp32
// shard once reduced, where the optimizer reads it. The sum over ranks is rounded to bf16 (NCCL adds in
// fp32 and stores bf16 at each step of its ring), so the result differs from the fp32 reduction by
// more than reduction order: the convergence gate judges it (docs/architecture.md "Data parallel").
//
// GEMM weights in bf16 (distributed.param_dtype = "bf16", sharded stages only): the parameters the model
// reads only through GEMMs (HybridModel::gemm_weights()) live in buckets of their own whose parameter
// buffers are bf16, so the module's tensors are bf16 views, the all-gathers carry half the bytes and the
// GEMMs read them without autocast's cast; each such bucket keeps the rank's shard of the fp32 values as
// its `master`, which the optimizer updates, writing the updated value rounded into the bf16 shard the
// gather sends as it writes the master (rounded_shard()). Under bf16 autocast the forward computes exactly as with fp32
// parameters (autocast rounds each weight so, once a forward); a weight's gradient is bf16 as the GEMM
// wrote it (on CUDA the fp32 path writes dense weights' gradients unrounded) and is widened or reduced
// from there (reduced in bf16, the slot is handed back as .grad as fp32 slots are). The other parameters
// (norms, biases, router, embedding) stay in fp32 buckets, laid out after the bf16 ones (launched last:
// a gradient bucket reduces when full, in index order) or, under "full", as a second bucket of their
// unit. A checkpoint writes the fp32 masters (master_values()).
//
// A whole-step CUDA graph (harness/train/step_executor.h) captures every collective above with the
// step, each launched from the same host code; a graph cannot end with collectives in flight, so a
// captured "optimizer" or "gradients" step starts its parameter all-gathers at its beginning instead.
//
// The rank's heartbeat (`progress/<rank>` = the step it is on) lives in the store: when a collective
// fails or times out, the ranks that are behind are named in the failure.
// Tests: tests/harness/distributed_test.cpp (2 ranks with Gloo through `ablate launch`).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/shard_layout.h"
#include "harness/world.h"
#include "model/parameter_units.h"

namespace c10d {
class Backend;
class Store;
class Work;
}  // namespace c10d

namespace ablate::harness {

class ProcessGroup {
 public:
  // Joins the job: connects to (or hosts) the store, then creates the backend ("nccl" | "gloo") with
  // collective timeout `timeout`. Throws std::invalid_argument for a backend this build or device cannot
  // run (gloo on CUDA tensors is refused: the run would time the wrong transport).
  ProcessGroup(const WorldEnv& world, const std::string& backend, const torch::Device& device,
               std::chrono::milliseconds timeout);
  // Without shutdown() first (a failed or abandoned job), the backend's communicators are aborted: a
  // failed job must not wait on a peer that died.
  ~ProcessGroup();
  // Ends this rank's communication cleanly once its job is done: the backend's shutdown (NCCL: flushes
  // and destroys its communicators, what torch.distributed.destroy_process_group does; without it NCCL
  // warns at exit that resources may leak). The store stays up for rank 0's reads.
  void shutdown();
  // Aborts the backend's communicators now (NCCL: ncclCommAbort, which ends kernels spinning on a peer
  // that stopped), as the destructor of a failed job does; nothing after it communicates.
  void abort();

  // A group of some of the job's ranks (job ranks `members`, this one among them) with a communicator of
  // its own, its rendezvous keys under `name` (every member passes the same name and list). Its rank()
  // and world_size() are within the group; its store, progress and naming stay the job's.
  std::unique_ptr<ProcessGroup> subgroup(const std::string& name, const std::vector<int64_t>& members) const;

  int64_t rank() const { return group_rank_; }        // within this group (the job's rank for the job)
  int64_t world_size() const { return group_size_; }  // ranks in this group
  const WorldEnv& world() const { return world_; }
  const std::string& backend_name() const { return backend_name_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // In-place mean over ranks (sum then divide), waited for (stream wait on CUDA).
  void allreduce_mean_(torch::Tensor& t);
  // Starts an in-place sum; the caller waits.
  c10::intrusive_ptr<c10d::Work> allreduce_sum_async(torch::Tensor& t);
  // Starts the sum over ranks of `in` (world x out.numel() elements), part r of it into rank r's `out`
  // (which may be part r of `in` itself); the caller waits.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_sum_async(torch::Tensor& out, torch::Tensor& in);
  // Starts gathering every rank's `in` into `out` (world x in.numel() elements, rank order; `in` may be
  // part r of `out` itself); the caller waits.
  c10::intrusive_ptr<c10d::Work> all_gather_async(torch::Tensor& out, torch::Tensor& in);
  // all_gather_async of each (outs[i], ins[i]) pair as one collective (NCCL: one group, one launch).
  c10::intrusive_ptr<c10d::Work> all_gather_coalesced_async(std::vector<torch::Tensor>& outs,
                                                            std::vector<torch::Tensor>& ins);
  // Starts the all-to-all of rows: `in`'s first in_splits[0] rows to rank 0 of the group, ...; `out`
  // receives out_splits[q] rows from rank q, in rank order; the caller waits.
  c10::intrusive_ptr<c10d::Work> all_to_all_async(torch::Tensor& out, torch::Tensor& in,
                                                  const std::vector<int64_t>& out_splits,
                                                  const std::vector<int64_t>& in_splits);
  void barrier();

  // Small host-side values through the store (no device sync): per-rank rows and facts to rank 0.
  void publish(const std::string& key, const std::string& value);
  std::string fetch(const std::string& key);  // waits up to the timeout
  void report_progress(int64_t step);
  // For a failure at `step`: "rank 1 last reported step 3" for every rank behind it (or silent), and
  // "rank 2 stopped answering (...)" for one whose heartbeat stopped though it reported the step (a
  // process stopped or dead mid-step); "" when none is. Watching the heartbeats takes kStaleCheck,
  // only when some rank did report the step.
  std::string ranks_behind(int64_t step);

 private:
  ProcessGroup(const ProcessGroup& job, const std::string& name, const std::vector<int64_t>& members);

  WorldEnv world_;
  int64_t group_rank_ = 0, group_size_ = 1;
  std::string backend_name_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  bool shut_down_ = false;  // shut down or aborted: the communicators are gone
  // The job's group beats `alive/<rank>` (a count, so clocks of other hosts do not matter) every
  // kAliveInterval on a thread of its own, until it is shut down or aborted.
  void stop_heartbeat();
  std::thread heartbeat_;
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_cv_;
  bool heartbeat_stopping_ = false;
};

// The summed durations of completed collectives by the backend's own timing (NCCL: CUDA events on its
// stream); NaN when one is missing, not complete, or not timed (Gloo).
double collectives_ms(const std::vector<const c10d::Work*>& works);

// The dtype distributed.reduce_dtype or param_dtype names: kFloat for "fp32", kBFloat16 for "bf16";
// std::invalid_argument for a name the spec does not allow (the spec checked it already).
torch::ScalarType distributed_dtype_of(const std::string& name);

// distributed.param_dtype: the dtype the GEMM weights are kept and gathered in (kFloat: as every other
// parameter) and which parameters those are (HybridModel::gemm_weights(); others in the list are ignored).
struct GemmWeightPrecision {
  torch::ScalarType dtype = torch::kFloat;
  std::vector<torch::Tensor> weights;
};

class GradientSync : public model::ParameterUnitHooks {
 public:
  // Sharded (any stage but none; see the header): moves every parameter's data into the flat parameter
  // buffers. `units`: the model's parameters by first use in forward (model/parameter_units.h); the
  // buckets are laid out in their reverse order (without them, the reverse of `params`), the parameter
  // all-gathers follow their order, and under "full" each unit is one bucket (bucket_bytes is not used)
  // and required. params() lists the parameters in that order.
  // `reduce_dtype`: kFloat, or kBFloat16 under a sharded stage (std::invalid_argument otherwise).
  // `communicates` false: a group of one rank whose parameters no other rank holds (expert parallelism
  // over the whole job: each rank's experts are its own). There is nothing to reduce or to split, so the
  // sync launches no collective; at a sharded stage it keeps its parameters and gradients whole, fp32 or
  // bf16 GEMM weights beside their whole fp32 masters (ZeRO-1's layout over one rank: stage() is
  // optimizer, nothing is freed and gathered back, no gradient staged or rounded), and counts 0 bytes and
  // 0 ms of collectives. std::logic_error for a group of more than one rank.
  // `gemm_weights`: kBFloat16 under a sharded stage keeps those parameters in bf16 (see the header;
  // std::invalid_argument unsharded or for another dtype).
  GradientSync(ProcessGroup& group, const std::vector<torch::Tensor>& params, int64_t bucket_bytes,
               ShardingStage stage = ShardingStage::none, const std::vector<std::vector<torch::Tensor>>& units = {},
               torch::ScalarType reduce_dtype = torch::kFloat, bool communicates = true,
               const GemmWeightPrecision& gemm_weights = {});
  ~GradientSync() override;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // The reduced gradient is the sum over the group divided by `ranks` (default: the group's size, the
  // mean). Expert parallelism syncs the expert weights over the ranks holding the same experts, while
  // the loss they descend is the mean over every rank of the job: their divisor is the job's size.
  void divide_gradients_by(int64_t ranks);

  void begin_step();  // before backward
  void finish();      // after backward: every parameter's .grad is the mean over ranks

  // Sharded: starts the all-gather of every bucket (each rank's updated shard into every rank's
  // parameter buffer) and returns without waiting; "full": nothing (each unit gathers when used).
  void gather_parameters();
  // Waits for every all-gather still pending: before anything but the forward reads the parameters.
  // `whole` ("full"): first gathers every unit, which stays until its next forward frees it (a
  // checkpoint reads the whole model).
  void wait_parameters(bool whole = false);
  // "full": frees every gathered unit's buffer (the rank keeps its shards); a no-op for other stages.
  void release_units();
  void before_unit(int64_t unit) override;
  void after_unit(int64_t unit) override;
  bool wants_backward_hooks() const override { return full(); }
  void before_unit_backward(int64_t unit) override;
  size_t buckets() const { return buckets_.size(); }
  // The buckets each parameter all-gather carries, in issue order: with units, each unit's that an
  // earlier unit did not need (units without one left out); without, one bucket each, in reverse.
  const std::vector<std::vector<size_t>>& gather_groups() const { return gather_groups_; }
  ProcessGroup& group() const { return group_; }
  const ShardLayout& layout() const { return layout_; }
  ShardingStage stage() const { return stage_; }
  torch::ScalarType reduce_dtype() const { return reduce_dtype_; }
  // Each parameter kept in bf16 with its whole fp32 value (every rank's master shard gathered, a
  // collective every rank of the group calls), on the CPU, one bucket on the device at a time: what a
  // checkpoint writes in place of the bf16 tensor. Empty when every parameter is fp32.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> master_values();
  // Bytes of gradient buffers this rank keeps between steps (the full buckets, or its shards under
  // "gradients"; reduced in bf16 the bf16 buckets and the fp32 shards).
  int64_t gradient_bytes() const;
  // Bytes of parameters this rank keeps between uses: the whole (padded) buffers, or its shards under
  // "full"; with bf16 GEMM weights, their bf16 buffers (or shards) and the fp32 master shards.
  int64_t parameter_bytes() const;
  // Staged ("gradients"): bytes of full-size buckets allocated now, and the most at once since the
  // sync was built (0 otherwise); after count_staging_with, those of both syncs together.
  int64_t staged_bytes() const { return staging_->now; }
  int64_t staging_peak_bytes() const { return staging_->peak; }
  // Counts this sync's staged buckets with `other`'s: expert parallelism's two syncs stage buckets in
  // the same backward, so the peak a rank holds is of their sum. Before the first step.
  void count_staging_with(const GradientSync& other) { staging_ = other.staging_; }
  // Sharded: bucket b's flat parameter buffer (every parameter of the bucket is a view into it; fp32, or
  // bf16 for GEMM weights under param_dtype bf16).
  const torch::Tensor& parameter_buffer(size_t b) const { return buckets_.at(b).param_flat; }
  // Sharded: the rank's part of bucket b's fp32 parameters (layout().buckets[b].shard_numel elements),
  // which the optimizer updates: its slice of the buffer, or the persistent fp32 shard the buffer is
  // gathered from (under "full", and for bf16 buffers); the rank's reduced gradient shard likewise.
  torch::Tensor parameter_shard(size_t b) const;
  // Sharded, a bf16 bucket: parameter_shard(b) rounded to bf16, what its gathers send (the rank's slice
  // of the bf16 buffer, or under "full" the persistent bf16 shard); undefined for an fp32 bucket.
  // Whoever updates parameter_shard(b) writes its rounding here (ShardedAdamW: the optimizer seam's
  // `rounded`, in the update's own pass): gather_parameters() sends it as it is.
  torch::Tensor rounded_shard(size_t b) const;
  const torch::Tensor& gradient_shard(size_t b) const { return buckets_.at(b).shard; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  // Host milliseconds spent waiting for the all-reduces in finish() (Gloo: the exposed communication
  // time; NCCL: ~0, the wait is on the stream).
  double last_wait_ms() const { return last_wait_ms_; }
  // The step's collectives from the backend's own timing (NCCL: CUDA events on its stream, so the
  // kernel time, overlapped or not), summed over the buckets; call after the step's host sync.
  // Sharded, the parameter all-gathers counted are those this step's forward waited for (issued at
  // the end of the previous step: one set a step). NaN when a collective is not complete or the
  // backend cannot time it (Gloo cannot).
  double comm_ms() const;
  // The same by kind of collective (the bucket all-reduces, or the reduce-scatters and the parameter
  // all-gathers); NaN for a kind this stage does not run, or that is not complete or not timed.
  struct CollectiveMs {
    double all_reduce = NAN, reduce_scatter = NAN, all_gather = NAN;
  };
  CollectiveMs collective_ms() const;
  // Bytes of the buffers each kind of collective carries a step on this rank (the whole buckets: the
  // all-reduce's in and out, the reduce-scatter's in, the all-gather's out; under "full" the layers
  // twice, forward and backward); 0 for a kind not run.
  struct CollectiveBytes {
    int64_t all_reduce = 0, reduce_scatter = 0, all_gather = 0;
  };
  CollectiveBytes collective_bytes() const;

 private:
  struct Bucket {
    torch::Tensor flat;               // in reduce_dtype_; staged: defined from its first gradient until released
    torch::Tensor param_flat, shard;  // sharded only; the shard is fp32, param_flat fp32 or bf16
    // Sharded: where the reduce-scatter writes the rank's part: the shard itself, or (reduced in bf16)
    // the rank's slice of `flat`, widened into the shard once reduced.
    torch::Tensor reduced;
    torch::Tensor padding_index;      // staged: the bucket's elements that belong to no parameter
    std::vector<size_t> params;  // indices into params_
    int64_t pending = 0;
    bool launched = false;
    c10::intrusive_ptr<c10d::Work> work;
    c10::intrusive_ptr<c10d::Work> gather;  // sharded: the parameter all-gather not yet waited for
    torch::Tensor master;                   // full, or a bf16 buffer: the rank's fp32 shard of the parameters
    torch::Tensor low_shard;                // full with a bf16 buffer: the master rounded, which the gathers send
    // param_flat is bf16 (GEMM weights under param_dtype bf16), and the bytes of its elements.
    bool low() const { return param_flat.defined() && param_flat.scalar_type() != torch::kFloat; }
    int64_t param_element_bytes() const {
      return param_flat.defined() ? static_cast<int64_t>(param_flat.element_size()) : int64_t{sizeof(float)};
    }
    bool resident = true;                   // full: param_flat holds the whole parameters (or their gather)
  };
  void wait_gather(Bucket& b);
  void order_gathers(const std::vector<std::vector<torch::Tensor>>& units);
  void gather_unit_buckets(int64_t unit, bool wait);  // full: whole again (and waited for)
  void release_parameters(Bucket& b);                 // full: the buffer's storage to 0 bytes
  torch::Tensor gather_input(Bucket& b);               // the rank's part its parameter all-gather sends
  // Copies a parameter's gradient into its slot; returns the slot's view, which autograd keeps as .grad
  // (no second copy of the gradients lives on).
  torch::Tensor on_gradient(size_t param_index, const torch::Tensor& grad);
  void launch_ready();
  void launch(Bucket& b);
  void stage_bucket(size_t b);    // staged: allocates the bucket and its parameters' slots
  void release_bucket(size_t b);  // staged: after its reduce-scatter, the bucket and the .grads into it
  void widen_shard(Bucket& b);    // bf16: the reduced part into the fp32 shard, after its collective
  bool reduces_in_bf16() const { return reduce_dtype_ != torch::kFloat; }
  int64_t reduce_element_bytes() const { return static_cast<int64_t>(c10::elementSize(reduce_dtype_)); }

  ProcessGroup& group_;
  ShardingStage stage_;
  torch::ScalarType reduce_dtype_;
  bool communicates_;
  // Gradients staged in transient buckets (ZeRO-2 and 3); parameters sharded too (ZeRO-3).
  bool staged() const { return stage_ == ShardingStage::gradients || stage_ == ShardingStage::full; }
  bool full() const { return stage_ == ShardingStage::full; }
  ShardLayout layout_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> slots_;       // params_[i]'s view into its bucket
  std::vector<size_t> bucket_of_;          // params_[i] -> bucket
  std::vector<char> arrived_;              // this step
  // Parameters whose .grad autograd set to its own gradient (the slot has another dtype: fp32 weights
  // reduced in bf16, bf16 weights reduced in fp32), dropped at the next hook.
  std::vector<size_t> grads_to_drop_;
  std::vector<Bucket> buckets_;
  size_t next_launch_ = 0;
  std::vector<unsigned> hook_ids_;
  // The buckets by the unit that first uses them, in forward order (without units, one a group in reverse
  // layout order): a group is gathered as one coalesced collective (see gather_parameters()).
  std::vector<std::vector<size_t>> gather_groups_;
  std::vector<std::vector<size_t>> unit_buckets_;  // unit -> the buckets its parameters lie in
  std::vector<c10::intrusive_ptr<c10d::Work>> gathers_waited_, gathers_of_step_;
  double last_wait_ms_ = 0;
  // What each hook multiplies a gradient by: 1 / the group's size, or 1 / divide_gradients_by's ranks.
  double gradient_scale_ = 1.0;
  struct StagingBytes {
    int64_t now = 0, peak = 0;
  };
  std::shared_ptr<StagingBytes> staging_ = std::make_shared<StagingBytes>();
};

// The model takes one ParameterUnitHooks; under expert parallelism both syncs (the shared weights' over
// the job, the experts' over the ranks holding them) need every call, each for its own buckets of the unit.
class UnitHooksOfSyncs : public model::ParameterUnitHooks {
 public:
  explicit UnitHooksOfSyncs(std::vector<GradientSync*> syncs) : syncs_(std::move(syncs)) {}
  void before_unit(int64_t unit) override;
  void after_unit(int64_t unit) override;
  bool wants_backward_hooks() const override;
  void before_unit_backward(int64_t unit) override;

 private:
  std::vector<GradientSync*> syncs_;
};

}  // namespace ablate::harness
