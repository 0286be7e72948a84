// harness/train/data_parallel.cpp: see data_parallel.h. The c10d headers compile their backends in
// when USE_C10D_GLOO / USE_C10D_NCCL are defined (LibTorch's CMake interface defines both). Gloo's
// headers come from Debian's libgloo-dev (the wheel ships Gloo compiled into libtorch_cpu but not its
// headers); NCCL's from the wheel's own nvidia/nccl, the version LibTorch was built against
// (ProcessGroupNCCL::Options' layout depends on it): harness/CMakeLists.txt adds it in CUDA builds.
#include "harness/train/data_parallel.h"

#include <ATen/native/Resize.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(USE_C10D_NCCL) && defined(ABLATE_HAVE_CUDA)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#if defined(ABLATE_HAVE_CUDA)
#include <ATen/native/cuda/Resize.h>
#endif

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/host.h"
#include "kernels/copy_blocks.h"

namespace ablate::harness {
namespace {
using Clock = std::chrono::steady_clock;

std::string progress_key(int64_t rank) { return fmt::format("progress/{}", rank); }
std::string alive_key(int64_t rank) { return fmt::format("alive/{}", rank); }

// A rank beats every kAliveInterval; one whose count did not move over kStaleCheck stopped answering.
constexpr std::chrono::milliseconds kAliveInterval{500};
constexpr std::chrono::milliseconds kStaleCheck{2500};

// The collective backend of `rank` of `size` over `store` (its keys only), timing its collectives.
c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& backend, const c10::intrusive_ptr<c10d::Store>& store,
                                               int64_t rank, int64_t size, const WorldEnv& world,
                                               std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Backend> out;
  if (backend == "gloo") {
    auto o = c10d::ProcessGroupGloo::Options::create(timeout);
    // The rendezvous host's address when it is local, else this machine's own: Gloo binds to it.
    o->devices.push_back(world.master_addr == "127.0.0.1" || world.master_addr == "localhost"
                             ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                             : c10d::ProcessGroupGloo::createDefaultDevice());
    out = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(rank), static_cast<int>(size), o);
  } else {
#if defined(USE_C10D_NCCL) && defined(ABLATE_HAVE_CUDA)
    auto o = c10d::ProcessGroupNCCL::Options::create();
    o->timeout = timeout;
    out = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank), static_cast<int>(size), o);
#else
    throw std::invalid_argument("distributed.backend = \"nccl\": this build has no NCCL (built without CUDA)");
#endif
  }
  // Work::getDuration() for the communication time per step (NCCL: CUDA events around each
  // collective on its stream; Gloo: the collective's own timing).
  out->enableCollectivesTiming();
  return out;
}

}  // namespace

ProcessGroup::ProcessGroup(const WorldEnv& world, const std::string& backend, const torch::Device& device,
                           std::chrono::milliseconds timeout)
    : world_(world), backend_name_(backend), timeout_(timeout) {
  if (backend == "gloo" && device.is_cuda())
    throw std::invalid_argument(
        "distributed.backend = \"gloo\" with train.device on CUDA: gradients would cross through the host and the "
        "run would time the wrong transport; use \"nccl\" on GPUs (gloo is for CPU runs)");
  if (backend == "nccl" && !device.is_cuda())
    throw std::invalid_argument(
        "distributed.backend = \"nccl\" needs CUDA devices and this run is on the CPU: set distributed.backend = "
        "\"gloo\" (or train.device = \"cuda\")");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(world.master_port);
  opts.isServer = world.rank == 0 && !world.store_hosted_by_launcher;
  // Every rank counts itself in (a client without numWorkers skips the count and the host waits forever);
  // torchrun's agent store did its own rendezvous already.
  if (!world.store_hosted_by_launcher) opts.numWorkers = static_cast<size_t>(world.world_size);
  opts.timeout = timeout;
  auto tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, opts);
  store_ = c10::make_intrusive<c10d::PrefixStore>(world.store_prefix, tcp);
  // The backend's own keys under a prefix of their own, apart from ours.
  group_rank_ = world.rank;
  group_size_ = world.world_size;
  backend_ = make_backend(backend, c10::make_intrusive<c10d::PrefixStore>("c10d/", store_), group_rank_, group_size_,
                          world, timeout);
  publish(fmt::format("where/{}", world.rank),
          nlohmann::json{{"rank", world.rank}, {"local_rank", world.local_rank}, {"host", base::host_name()},
                         {"pid", static_cast<int64_t>(getpid())}, {"device", device.str()}}
              .dump());
  report_progress(-1);
  heartbeat_ = std::thread([this] {
    int64_t beats = 0;
    std::unique_lock lock(heartbeat_mutex_);
    do {
      lock.unlock();
      try {
        publish(alive_key(world_.rank), std::to_string(++beats));
      } catch (const std::exception&) {
        // The store is gone (rank 0 ended): nothing left to tell.
      }
      lock.lock();
    } while (!heartbeat_cv_.wait_for(lock, kAliveInterval, [this] { return heartbeat_stopping_; }));
  });
}

void ProcessGroup::stop_heartbeat() {
  {
    std::lock_guard lock(heartbeat_mutex_);
    heartbeat_stopping_ = true;
  }
  heartbeat_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
}

ProcessGroup::ProcessGroup(const ProcessGroup& job, const std::string& name, const std::vector<int64_t>& members)
    : world_(job.world_), backend_name_(job.backend_name_), timeout_(job.timeout_), store_(job.store_) {
  const auto me = std::find(members.begin(), members.end(), world_.rank);
  if (me == members.end())
    throw std::logic_error(fmt::format("process group {}: rank {} is not one of its members", name, world_.rank));
  group_rank_ = me - members.begin();
  group_size_ = static_cast<int64_t>(members.size());
  backend_ = make_backend(backend_name_,
                          c10::make_intrusive<c10d::PrefixStore>(fmt::format("c10d-{}/", name), store_), group_rank_,
                          group_size_, world_, timeout_);
}

std::unique_ptr<ProcessGroup> ProcessGroup::subgroup(const std::string& name,
                                                     const std::vector<int64_t>& members) const {
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(*this, name, members));
}

ProcessGroup::~ProcessGroup() {
  abort();
  stop_heartbeat();
}

void ProcessGroup::abort() {
  if (shut_down_ || !backend_) return;
  shut_down_ = true;
  try {
    backend_->abort();
  } catch (const std::exception& e) {
    fmt::print(stderr, "ablate: rank {}: aborting the {} communicators: {}\n", world_.rank, backend_name_, e.what());
  }
}

void ProcessGroup::shutdown() {
  stop_heartbeat();
  if (shut_down_) return;
  backend_->shutdown();
  shut_down_ = true;
}

void ProcessGroup::allreduce_mean_(torch::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  backend_->allreduce(ts)->wait();
  t.div_(static_cast<double>(group_size_));
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_sum_async(torch::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  return backend_->allreduce(ts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter_sum_async(torch::Tensor& out, torch::Tensor& in) {
  return backend_->_reduce_scatter_base(out, in);  // ReduceScatterOptions' default op: SUM
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_gather_async(torch::Tensor& out, torch::Tensor& in) {
  return backend_->_allgather_base(out, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_gather_coalesced_async(std::vector<torch::Tensor>& outs,
                                                                       std::vector<torch::Tensor>& ins) {
  return backend_->allgather_into_tensor_coalesced(outs, ins);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_to_all_async(torch::Tensor& out, torch::Tensor& in,
                                                              const std::vector<int64_t>& out_splits,
                                                              const std::vector<int64_t>& in_splits) {
  auto out_s = out_splits;
  auto in_s = in_splits;
  return backend_->alltoall_base(out, in, out_s, in_s);
}

void ProcessGroup::barrier() { backend_->barrier()->wait(); }

void ProcessGroup::publish(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string ProcessGroup::fetch(const std::string& key) {
  store_->wait({key}, timeout_);
  const auto v = store_->get(key);
  return {v.begin(), v.end()};
}

void ProcessGroup::report_progress(int64_t step) { publish(progress_key(world_.rank), std::to_string(step)); }

std::string ProcessGroup::ranks_behind(int64_t step) {
  const auto read = [this](const std::string& key) -> std::optional<std::string> {
    if (!store_->check({key})) return std::nullopt;
    const auto v = store_->get(key);
    return std::string(v.begin(), v.end());
  };
  // Each other rank's account: behind by its progress, or (when it reported this step) watched below.
  std::map<int64_t, std::string> said;
  std::map<int64_t, std::pair<int64_t, std::optional<std::string>>> reported;  // rank -> (step, heartbeat)
  for (int64_t r = 0; r < world_.world_size; ++r) {
    if (r == world_.rank) continue;
    try {
      const auto progress = read(progress_key(r));
      const int64_t at = progress ? std::stoll(*progress) : -2;
      if (!progress) said[r] = "never reported";
      else if (at < step) said[r] = at < 0 ? "joined but never started a step" : fmt::format("last reported step {}", at);
      else reported[r] = {at, read(alive_key(r))};
    } catch (const std::exception& e) {
      said[r] = fmt::format("unreadable ({})", e.what());
    }
  }
  // A rank that reported the step but whose heartbeat does not move over kStaleCheck stopped (SIGSTOP,
  // a debugger, the OOM killer's victim) or died mid-step. Watched only when there is such a rank.
  if (!reported.empty()) std::this_thread::sleep_for(kStaleCheck);
  for (const auto& [r, seen] : reported) {
    try {
      if (read(alive_key(r)) == seen.second)
        said[r] = fmt::format("stopped answering (its heartbeat has not moved for {} s; it had reported step {})",
                              std::chrono::duration_cast<std::chrono::duration<double>>(kStaleCheck).count(), seen.first);
    } catch (const std::exception& e) {
      said[r] = fmt::format("unreadable ({})", e.what());
    }
  }
  std::string out;
  for (const auto& [r, text] : said) out += fmt::format("{}rank {} {}", out.empty() ? "" : "; ", r, text);
  return out;
}

// ---- GradientSync ------------------------------------------------------------------------------

torch::ScalarType distributed_dtype_of(const std::string& name) {
  if (name == "fp32") return torch::kFloat;
  if (name == "bf16") return torch::kBFloat16;
  throw std::invalid_argument(fmt::format("\"{}\" is not a dtype of distributed.reduce_dtype or param_dtype", name));
}

GradientSync::GradientSync(ProcessGroup& group, const std::vector<torch::Tensor>& params, int64_t bucket_bytes,
                           ShardingStage stage, const std::vector<std::vector<torch::Tensor>>& units,
                           torch::ScalarType reduce_dtype, bool communicates, const GemmWeightPrecision& gemm_weights)
    : group_(group),
      stage_(communicates || stage == ShardingStage::none ? stage : ShardingStage::optimizer),
      reduce_dtype_(communicates ? reduce_dtype : torch::kFloat),
      communicates_(communicates) {
  if (!communicates && group.world_size() != 1)
    throw std::logic_error(fmt::format("data parallel: a sync over {} ranks must communicate", group.world_size()));
  divide_gradients_by(group.world_size());
  const bool sharded = stage_ != ShardingStage::none;
  if (full() && units.empty()) throw std::logic_error("data parallel: sharding \"full\" needs the model's units");
  if (reduce_dtype != torch::kFloat && reduce_dtype != torch::kBFloat16)
    throw std::invalid_argument(fmt::format("data parallel: gradients reduce in fp32 or bf16, not {}",
                                            c10::toString(reduce_dtype)));
  // Unsharded, every .grad is the whole reduced gradient in fp32: a bf16 bucket would need a second,
  // fp32 copy of every gradient to hand back.
  if (reduces_in_bf16() && !sharded)
    throw std::invalid_argument(
        "distributed.reduce_dtype = \"bf16\" needs a sharded stage (distributed.sharding = \"optimizer\", "
        "\"gradients\" or \"full\"): unsharded, every parameter keeps its whole fp32 gradient");
  const auto gemm_weight_dtype = gemm_weights.dtype;
  if (gemm_weight_dtype != torch::kFloat && gemm_weight_dtype != torch::kBFloat16)
    throw std::invalid_argument(fmt::format("data parallel: GEMM weights are kept in fp32 or bf16, not {}",
                                            c10::toString(gemm_weight_dtype)));
  if (gemm_weight_dtype != torch::kFloat && !sharded)
    throw std::invalid_argument(
        "distributed.param_dtype = \"bf16\" needs a sharded stage (distributed.sharding = \"optimizer\", "
        "\"gradients\" or \"full\"): unsharded, every parameter is its own fp32 master");
  std::set<const void*> low_precision;
  if (gemm_weight_dtype != torch::kFloat)
    for (const auto& w : gemm_weights.weights) low_precision.insert(w.unsafeGetTensorImpl());
  std::map<const void*, int64_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& p : units[u]) unit_of[p.unsafeGetTensorImpl()] = static_cast<int64_t>(u);
  // The trained parameters by first use in forward (a parameter in no unit after every unit's), so that
  // the layout's reverse order is backward's: a bucket's gradients arrive together and the buckets fill
  // in launch order (registration order would put the LM head, used last, beside the first layer: its
  // gradient, among the first to arrive, would wait for the first layer's, reduced last).
  // bf16 GEMM weights never share a bucket with fp32 parameters. Under ZeRO-1/2 their buckets come first
  // in the layout (after the fp32 ones in this list, which the layout reverses), so the fp32 buckets,
  // holding a few small parameters of every layer, launch last; under "full" each unit's fp32 bucket
  // follows its bf16 one.
  struct Trained {
    int64_t unit;
    int64_t low;  // 1: kept in bf16
    torch::Tensor p;
  };
  std::vector<Trained> trained;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    TORCH_CHECK(p.scalar_type() == torch::kFloat, "data parallel: parameters must be fp32 master weights, got ",
                p.scalar_type());
    const auto unit = unit_of.find(p.unsafeGetTensorImpl());
    if (full() && unit == unit_of.end()) throw std::logic_error("data parallel: a parameter in no unit of the model");
    trained.push_back({unit == unit_of.end() ? static_cast<int64_t>(units.size()) : unit->second,
                       low_precision.count(p.unsafeGetTensorImpl()) ? int64_t{1} : int64_t{0}, p});
  }
  const bool by_unit_first = full();
  std::stable_sort(trained.begin(), trained.end(), [&](const Trained& a, const Trained& b) {
    return by_unit_first ? std::tie(a.unit, a.low) < std::tie(b.unit, b.low)
                         : std::tie(a.low, a.unit) < std::tie(b.low, b.unit);
  });
  std::vector<ParamShape> shapes;
  std::vector<char> low_param;
  for (const auto& [unit, low, p] : trained) {
    params_.push_back(p);
    low_param.push_back(static_cast<char>(low));
    shapes.push_back({p.numel(), p.dim(), static_cast<int64_t>(p.device().type()) * 1024 + p.device().index(),
                      full() ? 2 * unit + low : low});
  }
  // Full: a bucket is a unit (no byte limit closes one).
  layout_ = plan_buckets(shapes, full() ? std::numeric_limits<int64_t>::max() / 8 : bucket_bytes, sharded,
                         group.world_size(), group.rank());
  slots_.resize(params_.size());
  bucket_of_ = layout_.bucket_of;
  arrived_.assign(params_.size(), 0);
  torch::NoGradGuard no_grad;
  for (const auto& plan : layout_.buckets) {
    Bucket b;
    const auto options = params_[plan.params.front()].options().dtype(torch::kFloat);
    const auto reduce_options = options.dtype(reduce_dtype_);
    if (staged()) {
      b.shard = torch::zeros({plan.shard_numel}, options);
      // The gaps between the parameters (placed in order) and after the last: alignment and padding.
      std::vector<int64_t> gaps;
      int64_t end = 0;
      for (size_t k = 0; k <= plan.params.size(); ++k) {
        const int64_t start = k < plan.params.size() ? plan.offsets[k] : plan.numel;
        for (int64_t e = end; e < start; ++e) gaps.push_back(e);
        if (k < plan.params.size()) end = start + params_[plan.params[k]].numel();
      }
      if (!gaps.empty()) b.padding_index = torch::tensor(gaps, torch::kLong).to(options.device());
    } else {
      b.flat = torch::zeros({plan.numel}, reduce_options);
      // The reduce-scatter writes the rank's slice of the bucket in place (both backends allow an output
      // that is the input's own part r): no second buffer for the reduced shard, unless it is widened.
      if (sharded) {
        b.reduced = b.flat.narrow(0, group.rank() * plan.shard_numel, plan.shard_numel);
        b.shard = reduces_in_bf16() ? torch::zeros({plan.shard_numel}, options) : b.reduced;
      }
    }
    const bool low = low_param[plan.params.front()] != 0;
    if (sharded) {
      // The fp32 values in place first: a bf16 bucket's master shard is cut from them before rounding.
      b.param_flat = torch::zeros({plan.numel}, options);
      for (size_t k = 0; k < plan.params.size(); ++k) {
        const auto& p = params_[plan.params[k]];
        b.param_flat.narrow(0, plan.offsets[k], p.numel()).view(p.sizes()).copy_(p);
      }
      if (full() || low) b.master = b.param_flat.narrow(0, group.rank() * plan.shard_numel, plan.shard_numel).clone();
      if (low) {
        b.param_flat = b.param_flat.to(gemm_weight_dtype);
        if (full()) b.low_shard = b.master.to(gemm_weight_dtype);
      }
    }
    for (size_t k = 0; k < plan.params.size(); ++k) {
      auto& p = params_[plan.params[k]];
      if (!staged()) slots_[plan.params[k]] = b.flat.narrow(0, plan.offsets[k], p.numel()).view(p.sizes());
      // The parameter becomes a view of its bucket's buffer: the module's tensor follows (same TensorImpl).
      if (sharded) p.set_data(b.param_flat.narrow(0, plan.offsets[k], p.numel()).view(p.sizes()));
    }
    // Full: the rank's shard is kept; the whole buffer is gathered back when a unit is used.
    if (full()) release_parameters(b);
    b.params = plan.params;
    buckets_.push_back(std::move(b));
  }
  if (!units.empty()) {
    order_gathers(units);
  } else {
    for (size_t b = buckets_.size(); b-- > 0;) gather_groups_.push_back({b});  // reverse layout: forward's, roughly
  }
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(params_[i].register_hook(
        [this, i](const torch::Tensor& grad) -> torch::Tensor { return on_gradient(i, grad); }));
}

GradientSync::~GradientSync() {
  for (size_t i = 0; i < params_.size() && i < hook_ids_.size(); ++i) params_[i].remove_hook(hook_ids_[i]);
}

int64_t GradientSync::parameter_bytes() const {
  int64_t bytes = 0;
  constexpr int64_t fp32 = sizeof(float);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const auto& plan = layout_.buckets[i];
    const auto& b = buckets_[i];
    const int64_t element = b.param_element_bytes();
    if (full()) bytes += plan.shard_numel * (fp32 + (b.low() ? element : 0));  // the master (and what it sends)
    else bytes += plan.numel * element + (b.low() ? plan.shard_numel * fp32 : 0);
  }
  return bytes;
}

int64_t GradientSync::gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : layout_.buckets) {
    const int64_t fp32_shard = b.shard_numel * static_cast<int64_t>(sizeof(float));
    if (staged()) bytes += fp32_shard;
    else bytes += b.numel * reduce_element_bytes() + (reduces_in_bf16() ? fp32_shard : 0);
  }
  return bytes;
}

void GradientSync::order_gathers(const std::vector<std::vector<torch::Tensor>>& units) {
  std::map<const void*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].unsafeGetTensorImpl()] = i;
  unit_buckets_.assign(units.size(), {});
  gather_groups_.clear();
  std::vector<char> ordered(buckets_.size(), 0);
  size_t gathered = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<size_t> first_needed;
    for (const auto& p : units[u]) {
      const auto it = index_of.find(p.unsafeGetTensorImpl());
      if (it == index_of.end()) continue;  // not trained (no gradient, never sharded)
      const size_t b = bucket_of_[it->second];
      auto& mine = unit_buckets_[u];
      if (std::find(mine.begin(), mine.end(), b) == mine.end()) mine.push_back(b);
      if (!ordered[b]) {
        ordered[b] = 1;
        first_needed.push_back(b);
      }
    }
    gathered += first_needed.size();
    if (!first_needed.empty()) gather_groups_.push_back(std::move(first_needed));
  }
  if (gathered != buckets_.size())
    throw std::logic_error(fmt::format("data parallel: the model's units hold {} of {} buckets' parameters",
                                       gathered, buckets_.size()));
}

torch::Tensor GradientSync::gather_input(Bucket& b) {
  // Unless "full", the rank's own part of the output (gathered in place).
  const auto index = static_cast<size_t>(&b - buckets_.data());
  return b.low() ? rounded_shard(index) : parameter_shard(index);
}

void GradientSync::gather_parameters() {
  if (!layout_.sharded) throw std::logic_error("data parallel: gather_parameters() on an unsharded sync");
  wait_parameters();  // none should be pending: the forward waited for them all
  if (full()) return;  // each unit is gathered from its shard when the next forward reaches it
  if (!communicates_) return;  // the buffer is the rank's shard
  for (const auto& group : gather_groups_) {
    // In place (the rank's input is its own part of the output), which both backends allow.
    std::vector<torch::Tensor> outs, ins;
    for (size_t b : group) {
      outs.push_back(buckets_[b].param_flat);
      ins.push_back(gather_input(buckets_[b]));
    }
    const auto work = group.size() == 1 ? group_.all_gather_async(outs[0], ins[0])
                                        : group_.all_gather_coalesced_async(outs, ins);
    for (size_t b : group) buckets_[b].gather = work;
  }
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> GradientSync::master_values() {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (size_t index = 0; index < buckets_.size(); ++index) {
    auto& b = buckets_[index];
    if (!b.low()) continue;
    const auto& plan = layout_.buckets[index];
    torch::Tensor whole = b.master;
    if (communicates_) {
      whole = torch::empty({plan.numel}, b.master.options());
      group_.all_gather_async(whole, b.master)->wait();
    }
    whole = whole.cpu();  // waits for the gather on the device
    for (size_t k = 0; k < plan.params.size(); ++k) {
      const auto& p = params_[plan.params[k]];
      out.emplace_back(p, whole.narrow(0, plan.offsets[k], p.numel()).view(p.sizes()));
    }
  }
  return out;
}

void GradientSync::wait_gather(Bucket& b) {
  if (!b.gather) return;
  b.gather->wait();
  // A coalesced gather is one collective for several buckets: counted once.
  if (std::find(gathers_waited_.begin(), gathers_waited_.end(), b.gather) == gathers_waited_.end())
    gathers_waited_.push_back(b.gather);
  b.gather.reset();
}

void GradientSync::wait_parameters(bool whole) {
  if (full() && whole)
    for (size_t u = 0; u < unit_buckets_.size(); ++u) gather_unit_buckets(static_cast<int64_t>(u), /*wait=*/false);
  for (auto& b : buckets_) wait_gather(b);
}

void GradientSync::release_units() {
  if (!full()) return;
  for (auto& b : buckets_) release_parameters(b);
}

torch::Tensor GradientSync::rounded_shard(size_t b) const {
  const auto& bucket = buckets_.at(b);
  if (!bucket.low()) return {};
  if (full()) return bucket.low_shard;
  const int64_t S = layout_.buckets.at(b).shard_numel;
  return bucket.param_flat.narrow(0, layout_.rank * S, S);
}

torch::Tensor GradientSync::parameter_shard(size_t b) const {
  const auto& bucket = buckets_.at(b);
  if (bucket.master.defined()) return bucket.master;
  const int64_t S = layout_.buckets.at(b).shard_numel;
  return bucket.param_flat.narrow(0, layout_.rank * S, S);
}

namespace {
// A tensor's storage to `bytes` (0: freed): every view of it, and what autograd saved of them, sees
// the same storage before and after (FSDP2's unsharded parameters do this).
void resize_storage(const torch::Tensor& t, int64_t bytes) {
  auto* storage = t.storage().unsafeGetStorageImpl();
#if defined(ABLATE_HAVE_CUDA)
  if (t.is_cuda()) {
    at::native::resize_bytes_cuda(storage, static_cast<size_t>(bytes));
    return;
  }
#endif
  at::native::resize_bytes_cpu(storage, static_cast<size_t>(bytes));
}
}  // namespace

void GradientSync::release_parameters(Bucket& b) {
  if (!b.resident) return;
  wait_gather(b);  // the compute stream is then past the gather: the memory may go back
  resize_storage(b.param_flat, 0);
  b.resident = false;
}

void GradientSync::gather_unit_buckets(int64_t unit, bool wait) {
  if (unit < 0 || static_cast<size_t>(unit) >= unit_buckets_.size()) return;
  for (size_t index : unit_buckets_[static_cast<size_t>(unit)]) {
    auto& b = buckets_[index];
    if (!b.resident) {
      resize_storage(b.param_flat, b.param_flat.numel() * static_cast<int64_t>(b.param_flat.element_size()));
      auto in = gather_input(b);
      b.gather = group_.all_gather_async(b.param_flat, in);
      b.resident = true;
    }
    if (wait) wait_gather(b);
  }
}

void GradientSync::before_unit(int64_t unit) {
  if (unit_buckets_.empty() || unit < 0 || static_cast<size_t>(unit) >= unit_buckets_.size()) {
    wait_parameters();
    return;
  }
  if (full()) {
    gather_unit_buckets(unit, /*wait=*/true);
    gather_unit_buckets(unit + 1, /*wait=*/false);  // prefetch: it gathers while this unit computes
    return;
  }
  for (size_t b : unit_buckets_[static_cast<size_t>(unit)]) wait_gather(buckets_[b]);
}

void GradientSync::after_unit(int64_t unit) {
  // The last unit's backward starts at once: it stays.
  if (!full() || unit < 0 || static_cast<size_t>(unit) + 1 >= unit_buckets_.size()) return;
  for (size_t b : unit_buckets_[static_cast<size_t>(unit)]) release_parameters(buckets_[b]);
}

void GradientSync::before_unit_backward(int64_t unit) {
  if (!full()) return;
  gather_unit_buckets(unit, /*wait=*/true);
  if (unit - 1 >= 1) gather_unit_buckets(unit - 1, /*wait=*/false);  // the embedding's backward needs none
}

void GradientSync::begin_step() {
  // Forward is over: the gathers it waited for are this step's (comm_ms), and none may stay pending.
  wait_parameters();
  gathers_of_step_ = std::move(gathers_waited_);
  gathers_waited_.clear();
  std::fill(arrived_.begin(), arrived_.end(), 0);
  grads_to_drop_.clear();
  for (auto& b : buckets_) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.work.reset();
  }
  next_launch_ = 0;
}

void GradientSync::stage_bucket(size_t index) {
  auto& b = buckets_[index];
  const auto& plan = layout_.buckets[index];
  b.flat = torch::empty({plan.numel}, b.shard.options().dtype(reduce_dtype_));
  b.reduced = reduces_in_bf16() ? b.flat.narrow(0, layout_.rank * plan.shard_numel, plan.shard_numel) : b.shard;
  staging_->now += plan.numel * reduce_element_bytes();
  staging_->peak = std::max(staging_->peak, staging_->now);
  if (b.padding_index.defined()) b.flat.index_fill_(0, b.padding_index, 0.0);
  for (size_t k = 0; k < plan.params.size(); ++k) {
    const auto& p = params_[plan.params[k]];
    slots_[plan.params[k]] = b.flat.narrow(0, plan.offsets[k], p.numel()).view(p.sizes());
  }
}

void GradientSync::release_bucket(size_t index) {
  auto& b = buckets_[index];
  if (!b.flat.defined()) return;
  // Ordered after the reduce-scatter that reads it (a stream wait on NCCL): the caching allocator may
  // then hand the memory to the compute stream's next allocation.
  b.work->wait();
  widen_shard(b);
  for (size_t i : b.params) {
    slots_[i] = torch::Tensor();
    params_[i].mutable_grad() = torch::Tensor();
  }
  b.flat = torch::Tensor();
  b.reduced = torch::Tensor();
  staging_->now -= layout_.buckets[index].numel * reduce_element_bytes();
}

void GradientSync::divide_gradients_by(int64_t ranks) {
  gradient_scale_ = 1.0 / static_cast<double>(ranks);
}

void GradientSync::widen_shard(Bucket& b) {
  if (reduces_in_bf16()) b.shard.copy_(b.reduced);
}

torch::Tensor GradientSync::on_gradient(size_t i, const torch::Tensor& grad) {
  TORCH_CHECK(!arrived_[i], "data parallel: parameter ", i, " got two gradients in one backward");
  arrived_[i] = 1;
  if (staged() && !buckets_[bucket_of_[i]].flat.defined()) stage_bucket(bucket_of_[i]);
  // The earlier parameters' fp32 gradients (bf16): their accumulation into .grad is done by now.
  for (size_t earlier : grads_to_drop_) params_[earlier].mutable_grad() = torch::Tensor();
  grads_to_drop_.clear();
  // The scaling by 1/world in the copy's own pass, in fp32 and rounded once into the slot: one launch
  // (kernels/copy_blocks.h), where LibTorch divided a bf16 gradient in bf16 and widened it in a second
  // pass, and ran a strided view (an expert weight's part of the stacked gate/up gradient) element-wise.
  kernels::copy_blocks({{slots_[i], grad}}, gradient_scale_);
  // Taken before any launch: staged, launching a later bucket that was already full releases this one
  // (the view then keeps its memory until finish() drops every .grad).
  // The slot as .grad where it has the parameter's dtype; else autograd keeps its own (undefined: unchanged).
  torch::Tensor view;
  if (slots_[i].scalar_type() == params_[i].scalar_type()) view = slots_[i].view(slots_[i].sizes());
  else grads_to_drop_.push_back(i);
  if (--buckets_[bucket_of_[i]].pending == 0) launch_ready();
  return view;
}

void GradientSync::launch(Bucket& b) {
  // Not communicating, the slots already hold the divided gradients, in the shard itself when sharded.
  if (communicates_)
    b.work = layout_.sharded ? group_.reduce_scatter_sum_async(b.reduced, b.flat) : group_.allreduce_sum_async(b.flat);
  b.launched = true;
  // Full: every gradient of the unit is in, so its backward has read its parameters for the last time.
  if (full()) release_parameters(b);
}

void GradientSync::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    launch(buckets_[next_launch_]);
    // One staged reduce-scatter in flight: the previous bucket's memory goes back once this one is queued.
    if (staged() && next_launch_ > 0) release_bucket(next_launch_ - 1);
    ++next_launch_;
  }
}

void GradientSync::finish() {
  // A parameter that got no gradient on this rank contributes zeros (it may have one elsewhere).
  for (size_t i = 0; i < params_.size(); ++i)
    if (!arrived_[i]) {
      if (staged() && !buckets_[bucket_of_[i]].flat.defined()) stage_bucket(bucket_of_[i]);
      slots_[i].zero_();
      auto& b = buckets_[bucket_of_[i]];
      --b.pending;
      arrived_[i] = 1;
    }
  launch_ready();
  const auto t0 = Clock::now();
  for (auto& b : buckets_)
    if (b.work) b.work->wait();
  last_wait_ms_ = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  grads_to_drop_.clear();  // every .grad of a sharded sync is dropped below
  if (staged())
    for (size_t b = 0; b < buckets_.size(); ++b) release_bucket(b);
  else if (layout_.sharded)
    for (auto& b : buckets_) widen_shard(b);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (layout_.sharded) {
      // Only the rank's shard is reduced: a full-size .grad would hold this rank's own gradient alone.
      params_[i].mutable_grad() = torch::Tensor();
    } else if (!params_[i].grad().defined() || params_[i].grad().data_ptr() != slots_[i].data_ptr()) {
      // Autograd normally keeps the hook's view; should it have copied instead, the reduced slot wins.
      params_[i].mutable_grad() = slots_[i].view(slots_[i].sizes());
    }
  }
}

void UnitHooksOfSyncs::before_unit(int64_t unit) {
  for (auto* sync : syncs_) sync->before_unit(unit);
}

void UnitHooksOfSyncs::after_unit(int64_t unit) {
  for (auto* sync : syncs_) sync->after_unit(unit);
}

bool UnitHooksOfSyncs::wants_backward_hooks() const {
  return std::any_of(syncs_.begin(), syncs_.end(), [](const GradientSync* s) { return s->wants_backward_hooks(); });
}

void UnitHooksOfSyncs::before_unit_backward(int64_t unit) {
  for (auto* sync : syncs_) sync->before_unit_backward(unit);
}

double collectives_ms(const std::vector<const c10d::Work*>& works) {
  double total = 0;
  for (const auto* w : works) {
    if (w == nullptr) return NAN;
    try {
      total += w->getDuration();
    } catch (const std::exception&) {
      return NAN;  // not complete yet, or a backend without timing
    }
  }
  return total;
}

GradientSync::CollectiveMs GradientSync::collective_ms() const {
  if (!communicates_) {  // the kinds its stage runs took no time: none was launched
    CollectiveMs none;
    (layout_.sharded ? none.reduce_scatter : none.all_reduce) = 0;
    if (layout_.sharded) none.all_gather = 0;
    return none;
  }
  const auto sum = collectives_ms;
  std::vector<const c10d::Work*> buckets, gathers;
  for (const auto& b : buckets_) buckets.push_back(b.work.get());
  for (const auto& w : gathers_of_step_) gathers.push_back(w.get());
  CollectiveMs out;
  (layout_.sharded ? out.reduce_scatter : out.all_reduce) = sum(buckets);
  // The first step's forward waited for no gather (none was issued before it): unknown, not zero.
  if (layout_.sharded && !gathers.empty()) out.all_gather = sum(gathers);
  return out;
}

double GradientSync::comm_ms() const {
  const auto ms = collective_ms();
  if (!layout_.sharded) return ms.all_reduce;
  return gathers_of_step_.empty() ? ms.reduce_scatter : ms.reduce_scatter + ms.all_gather;
}

GradientSync::CollectiveBytes GradientSync::collective_bytes() const {
  if (!communicates_) return {};
  int64_t elements = 0, gathered = 0;
  const auto gathered_bytes = [&](size_t b) { return layout_.buckets[b].numel * buckets_[b].param_element_bytes(); };
  for (size_t b = 0; b < buckets_.size(); ++b) {
    elements += layout_.buckets[b].numel;
    gathered += gathered_bytes(b);
  }
  CollectiveBytes out;
  if (layout_.sharded) out.reduce_scatter = elements * reduce_element_bytes(), out.all_gather = gathered;
  else out.all_reduce = elements * reduce_element_bytes();
  // Full: the layers are gathered again for their backward (not the embedding nor the last unit).
  if (full())
    for (size_t u = 1; u + 1 < unit_buckets_.size(); ++u)
      for (size_t b : unit_buckets_[u]) out.all_gather += gathered_bytes(b);
  return out;
}

}  // namespace ablate::harness
