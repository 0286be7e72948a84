// harness/train/stages.cpp: see stages.h. The goodput ledger is charged as the run goes (startup until
// the first step, data_prep for the corpus, warmup/productive per step with loader waits moved to
// data_wait, checkpoint saves and restores, profiling around the CUPTI window and the evidence export).
// Tests: tests/harness/stages_test.cpp, tests/harness/runner_test.cpp.
#include "harness/train/stages.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "data/loader.h"
#include "harness/lane.h"
#include "harness/step_stats.h"
#include "harness/train/checkpoint.h"
#include "harness/train/device.h"
#include "harness/train/run_profiler.h"
#include "harness/train/step_graph.h"
#include "kernels/scope.h"
#include "receipts/sha256.h"
#include "receipts/step_buffer.h"

namespace ablate::harness {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A run-ending condition of training itself (as opposed to a bug): recorded as the failure reason.
struct TrainingFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  in >> pages_total >> pages_resident;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

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

// Data parallel: every rank reads the same global batch of nproc * batch_size rows (the stream of a
// single process at that batch) and trains on its own slice of batch_size rows (train_loop), so the
// job trains on exactly the rows one process would.
data::DataOptions data_options(const ExperimentSpec& spec) {
  data::DataOptions d;
  d.source = spec.data.source;
  d.corpus_dir = spec.data.corpus_dir;
  d.extensions = spec.data.extensions;
  d.max_bytes = static_cast<uint64_t>(spec.data.max_bytes);
  d.cache_dir = spec.data.cache_dir;
  d.seq_len = spec.model.seq_len;
  d.batch_size = spec.model.batch_size * spec.distributed.nproc;
  d.seed = static_cast<uint64_t>(spec.experiment.seed);
  d.vocab = spec.model.vocab;
  d.synthetic_distribution = spec.data.synthetic_distribution;
  d.zipf_exponent = spec.data.zipf_exponent;
  d.prefetch = spec.data.prefetch;
  return d;
}

// The lane (harness/lane.h) of the run's resolved backends.
std::string lane_of(const ExperimentSpec& spec, const kernels::Dispatcher& d, const std::string& device_kind) {
  return harness::lane_of(spec, d.resolutions(), device_kind);
}

// Test-only fault injection for the multi-process tests (tests/harness/distributed_test.cpp):
// ABLATE_TEST_FAULT = "kill:<rank>:<step>" (the rank SIGKILLs itself as that step begins) or
// "hang:<rank>:<step>" (it stops making progress there, as a deadlocked rank would).
void inject_test_fault(int64_t rank, int64_t step) {
  struct Fault {
    char kind[8] = {};
    long long rank = -1, step = -1;
  };
  static const Fault fault = [] {  // read once: this runs every step
    Fault f;
    const char* text = std::getenv("ABLATE_TEST_FAULT");
    if (text && std::sscanf(text, "%7[a-z]:%lld:%lld", f.kind, &f.rank, &f.step) != 3) f = Fault{};
    return f;
  }();
  if (fault.rank != rank || fault.step != step) return;
  if (std::string(fault.kind) == "kill") ::raise(SIGKILL);
  if (std::string(fault.kind) == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

std::string allocator_stats(int device_index) {
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
  constexpr double GiB = 1024.0 * 1024 * 1024;
  return fmt::format("allocated {:.2f} GiB (peak {:.2f}), reserved {:.2f} GiB (peak {:.2f}), alloc retries {}, OOMs {}",
                     s.allocated_bytes[0].current / GiB, s.allocated_bytes[0].peak / GiB, s.reserved_bytes[0].current / GiB,
                     s.reserved_bytes[0].peak / GiB, s.num_alloc_retries, s.num_ooms);
}

int cuda_index_of(const torch::Device& device) {
  return device.is_cuda() ? device.index() < 0 ? 0 : device.index() : -1;
}

}  // namespace

void Progress::operator()(const std::string& line) const {
  if (!quiet) fmt::print("{}\n", line);
}

// ---- 1 -----------------------------------------------------------------------------------------

// Only for the block kinds the pattern has: a limit of a seam the model never calls refuses nothing.
kernels::ModelDims model_dims(const model::ModelConfig& m) {
  const auto has = [&](char letter) { return m.pattern.find(letter) != std::string::npos; };
  kernels::ModelDims dims;
  if (has('E')) dims.experts = m.moe.experts;
  if (has('M')) {
    dims.ssm_head_dim = m.mamba.head_dim;
    dims.ssm_heads = m.mamba.expand * m.d_model / m.mamba.head_dim;
    dims.ssm_state = m.mamba.state;
    dims.ssm_chunk = m.mamba.chunk;
  }
  if (has('R')) dims.conv_width = m.recurrent.conv_width;
  return dims;
}

RunPosture choose_posture(const ExperimentSpec& spec, const RunOptions& opt) {
  RunPosture p;
  const bool cuda_ok = torch::cuda::is_available();
  p.device_kind = spec.train.device == "auto" ? (cuda_ok ? "cuda" : "cpu") : spec.train.device;
  if (p.device_kind == "cuda" && !cuda_ok)
    throw std::invalid_argument("train.device = \"cuda\" but no CUDA device is visible: set train.device = \"auto\" or \"cpu\"");
  p.device = torch::Device(p.device_kind == "cuda" ? torch::kCUDA : torch::kCPU);
  check_world_matches(opt.world, spec.distributed.nproc, spec.source_path.empty() ? "FILE" : spec.source_path);
  const bool data_parallel = opt.world && opt.world->world_size > 1;
  if (data_parallel && p.device.is_cuda()) {
    // One GPU per rank of the node: LOCAL_RANK picks it (launchers leave CUDA_VISIBLE_DEVICES whole).
    const int64_t visible = static_cast<int64_t>(torch::cuda::device_count());
    if (opt.world->local_rank >= visible)
      throw std::invalid_argument(fmt::format("rank {} has LOCAL_RANK {} but only {} CUDA devices are visible: start "
                                              "at most {} ranks per node",
                                              opt.world->rank, opt.world->local_rank, visible, visible));
    p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(opt.world->local_rank));
    c10::cuda::set_device(p.device.index());
  }
  p.bf16 = spec.train.dtype == "bf16" || (spec.train.dtype == "auto" && p.device.is_cuda());
  kernels::DeviceInfo info = live_device_info();
  info.cuda = info.cuda && p.device.is_cuda();
  info.dtype = p.bf16 ? "bf16" : "fp32";
  info.model = model_dims(spec.model);
  kernels::Dispatcher dispatcher(spec.backends.requested, info, spec.backends.strict);
  for (const auto& [seam, implementation] : opt.implementations_for_testing)
    dispatcher = dispatcher.with_implementation_for_testing(seam, implementation);
  p.dispatcher = std::make_shared<const kernels::Dispatcher>(std::move(dispatcher));

  auto& ctx = at::globalContext();
  ctx.setBenchmarkCuDNN(spec.compile.cudnn_benchmark);
  ctx.setAllowTF32CuBLAS(spec.compile.tf32);
  ctx.setAllowTF32CuDNN(spec.compile.tf32);
  ctx.setDeterministicAlgorithms(spec.compile.deterministic, /*warn_only=*/false);
  // Whole-step CUDA graph capture: decided up front from what the step will run (a host sync in a seam
  // makes it impossible, and is recorded as the reason); an eligible run captures after its eager
  // warm-up steps and falls back to eager, with the failure as the reason, if the capture fails.
  std::map<std::string, std::string> chosen_backends;
  for (const auto& r : p.dispatcher->resolutions()) chosen_backends[r.seam] = r.chosen;
  p.graphs = decide_graph_capture(spec.compile.cuda_graphs, p.device.is_cuda(), chosen_backends, spec.model);
  if (opt.attempt_graph_capture_for_testing && spec.compile.cuda_graphs && p.device.is_cuda()) p.graphs.eligible = true;
  if (data_parallel && p.graphs.eligible) {
    p.graphs.eligible = false;
    p.graphs.reason = "refused: data parallel launches its gradient all-reduces from autograd hooks as buckets "
                      "fill, which a whole-step capture would freeze; the step runs eager";
  }
  if (data_parallel)
    p.group = std::make_shared<ProcessGroup>(*opt.world, spec.distributed.backend, p.device,
                                             std::chrono::seconds(spec.distributed.timeout_s));
  return p;
}

// ---- 2 -----------------------------------------------------------------------------------------

std::unique_ptr<data::DataSource> open_run_data(const ExperimentSpec& spec, GoodputLedger& ledger) {
  GoodputLedger::Scope prep(ledger, Goodput::data_prep);
  return data::open_data(data_options(spec));
}

// ---- 3 -----------------------------------------------------------------------------------------

ModelState build_model(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                       const data::DataSource& source, GoodputLedger& ledger) {
  ModelState s;
  const uint64_t seed = static_cast<uint64_t>(spec.experiment.seed);
  torch::manual_seed(seed);
  s.model = model::HybridModel(spec.model, posture.dispatcher, seed);
  s.model->to(posture.device);
  s.params = s.model->parameters();
  s.optimizer = std::make_unique<AdamW>(s.params, spec.train, *posture.dispatcher);
  s.model_hash = model_hash(spec);
  s.checkpoint_dir = !spec.train.checkpoint_dir.empty()
                         ? spec.train.checkpoint_dir
                         : (fs::absolute(opt.db_path).parent_path() / "checkpoints" / spec.experiment.name).string();
  if (spec.train.resume) {
    if (auto latest = latest_checkpoint(s.checkpoint_dir)) {
      GoodputLedger::Scope restore(ledger, Goodput::checkpoint);
      const auto st = load_checkpoint(*latest, *s.model, *s.optimizer, s.model_hash, source.description().fingerprint);
      s.start_step = st.next_step;
      s.data_state = st.data;
      s.resumed_from = *latest;
    }
  }
  if (s.start_step >= spec.train.steps)
    throw std::invalid_argument(fmt::format("the checkpoint in {} is already at step {} of train.steps = {}: raise "
                                            "train.steps or set train.resume = false",
                                            s.checkpoint_dir, s.start_step, spec.train.steps));
  return s;
}

// ---- 4 -----------------------------------------------------------------------------------------

OpenReceipt open_receipt(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                         const ModelState& state) {
  auto store = receipts::Store::open(opt.db_path);
  store.check_can_record();  // a damaged or read-only store: exit 2 with the file as it was
  Fingerprint env = host_fingerprint(store.schema_version());
  for (const auto& [k, v] : device_fingerprint()) env[k] = v;
  env["device"] = posture.device_kind;
  env["dtype"] = posture.bf16 ? "bf16-autocast" : "fp32";
  env["compile.cuda_graphs_requested"] = spec.compile.cuda_graphs ? "true" : "false";
  env["compile.cuda_graphs_achieved"] = posture.graphs.achieved ? "true" : "false";
  env["compile.cuda_graphs_reason"] = posture.graphs.reason;
  env["compile.cudnn_benchmark"] = spec.compile.cudnn_benchmark ? "true" : "false";
  env["compile.tf32"] = spec.compile.tf32 ? "true" : "false";
  env["compile.deterministic"] = spec.compile.deterministic ? "true" : "false";
  env["flops_version"] = model::kFlopsVersion;
  env["distributed.world_size"] = std::to_string(spec.distributed.nproc);
  if (posture.group) {
    const auto& w = posture.group->world();
    env["distributed.backend"] = posture.group->backend_name();
    env["distributed.launcher"] = w.launcher;
    env["distributed.local_world_size"] = std::to_string(w.local_world_size);
    env["distributed.timeout_s"] = std::to_string(spec.distributed.timeout_s);
    env["distributed.bucket_mb"] = std::to_string(spec.distributed.bucket_mb);
    // Topology: each rank's host and device, as the ranks published them when they joined.
    nlohmann::json ranks = nlohmann::json::array();
    for (int64_t r = 0; r < posture.group->world_size(); ++r) ranks.push_back(nlohmann::json::parse(posture.group->fetch(fmt::format("where/{}", r))));
    env["distributed.ranks"] = ranks.dump();
  }

  receipts::RunStart rs;
  rs.name = spec.experiment.name;
  rs.tags = spec.experiment.tags;
  rs.lane = lane_of(spec, *posture.dispatcher, posture.device_kind);
  rs.spec_json = canonical_json(spec).dump();
  rs.spec_hash = spec_hash(spec);
  rs.source_path = spec.source_path;
  rs.source_text = spec.source_text;
  rs.env = env;
  if (opt.matrix_id) {
    rs.matrix_id = opt.matrix_id;
    rs.cell = opt.cell;
    rs.repeat = opt.repeat;
  }
  const int64_t run_id = store.begin_run(rs);
  auto life = std::make_unique<receipts::RunLifecycle>(opt.db_path, run_id);
  // `ablate launch` closes the run itself when rank 0 dies before it could (harness/cli/launch_command.cpp).
  if (const char* f = std::getenv("ABLATE_LAUNCH_RUN_ID_FILE"); f && *f && posture.group) {
    std::ofstream(f) << run_id << "\n";
  }
  if (posture.group) posture.group->publish("run_id", std::to_string(run_id));  // for the ranks' profiles

  std::vector<receipts::BackendRow> backend_rows;
  for (const auto& r : posture.dispatcher->resolutions())
    backend_rows.push_back({r.seam, r.requested, r.chosen, std::nullopt, r.reason, std::nullopt});
  store.record_backends(run_id, backend_rows);
  std::vector<receipts::CatalogRow> catalog_rows;
  for (const auto& b : kernels::catalog())
    catalog_rows.push_back({b.seam, b.name, kernels::role_name(b.role),
                            b.fallback.empty() ? std::nullopt : std::optional<std::string>(b.fallback), b.kernel_patterns});
  store.record_catalog(run_id, catalog_rows);

  const Progress say{opt.quiet};
  const auto counts = model::parameter_count(spec.model);
  say(fmt::format("run {}: {} ({} layers {}, {:.1f} M parameters, {:.1f} M active) on {} {}, {} steps{}", run_id,
                  spec.experiment.name, spec.model.pattern.size(), spec.model.pattern, counts.total / 1e6,
                  counts.active_per_token / 1e6, posture.device_kind, posture.bf16 ? "bf16" : "fp32", spec.train.steps,
                  state.resumed_from.empty() ? "" : fmt::format(", resumed at step {}", state.start_step)));
  for (const auto& r : posture.dispatcher->resolutions())
    if (r.requested != r.chosen) say(fmt::format("  {}: {}", r.seam, r.reason));
  return {std::move(store), run_id, std::move(env), std::move(life)};
}

// ---- 5 -----------------------------------------------------------------------------------------

TrainOutcome train_loop(const ExperimentSpec& spec, const RunOptions& opt, RunPosture& posture, ModelState& state,
                        const data::DataSource& source, OpenReceipt* receipt, RunProfiler& profiler,
                        GoodputLedger& ledger) {
  const Progress say{opt.quiet};
  const torch::Device device = posture.device;
  auto& graphs = posture.graphs;
  auto& model = state.model;
  auto& optimizer = *state.optimizer;
  const int64_t B = spec.model.batch_size, T = spec.model.seq_len, tokens_per_step = B * T;
  const int64_t start_step = state.start_step;
  const int cuda_index = cuda_index_of(device);
  TrainOutcome out;
  ProcessGroup* group = posture.group.get();
  const int64_t rank = group ? group->rank() : 0;
  // Step rows reach the store every 64 steps or 2 s, whichever comes first (receipts/step_buffer.h).
  // A data-parallel rank other than 0 writes its rows, with its rank, into rank 0's run through a
  // connection of its own (rank 0 publishes the run id once its receipt is open).
  std::optional<receipts::Store> rank_store;
  if (!receipt) rank_store.emplace(receipts::Store::open(opt.db_path));
  receipts::StepBuffer rows(receipt ? receipt->store : *rank_store,
                            receipt ? receipt->run_id : std::stoll(group->fetch("run_id")));
  std::unique_ptr<GradientSync> sync;
  if (group) sync = std::make_unique<GradientSync>(*group, state.params, spec.distributed.bucket_mb << 20);

  // Static device buffers for the batch: a captured graph reads these addresses on every replay, and
  // eager steps use them too (one code path, no per-step allocation).
  const auto ids = torch::empty({B, T + 1}, torch::TensorOptions(device).dtype(torch::kLong));
  const auto mask = torch::empty({B, T}, torch::TensorOptions(device).dtype(torch::kFloat));
  const auto inputs = ids.slice(1, 0, T), targets = ids.slice(1, 1, T + 1);
  // MoE router evidence rides along with the loss when the model has E blocks (schema v4).
  const bool has_moe = spec.model.pattern.find('E') != std::string::npos;
  // forward, backward, clipping, optimizer; returns [loss, grad norm(, aux loss, dropped slots)] on the
  // device, fp64 (a drop count stays exact). The allocator probes run in eager steps only (not inside a
  // graph capture).
  auto step_body = [&](int64_t at_step, bool probes) {
    model::ModelOutput fwd;
    {
      kernels::Scope phase("forward");  // launch scope: NVTX range, CUPTI external id (kernels/scope.h)
      AutocastScope autocast(posture.bf16, device.type());
      fwd = model->forward(inputs, targets, mask);
    }
    if (probes) profiler.after_phase(at_step, "forward");
    {
      kernels::Scope phase("backward");
      if (sync) sync->begin_step();
      fwd.loss.backward();
      if (sync) sync->finish();  // every .grad is now the mean over the ranks
    }
    if (probes) profiler.after_phase(at_step, "backward");
    torch::Tensor grad_norm;
    {
      kernels::Scope phase("optimizer");
      // Clipping rides in the update: the optimizer divides each gradient by the scale as it reads it.
      auto clipping = measure_grad_norm(state.params, spec.train.grad_clip);
      grad_norm = clipping.norm;
      optimizer.step(clipping.scale);
    }
    if (probes) profiler.after_phase(at_step, "optimizer");
    std::vector<torch::Tensor> job_means = {fwd.loss.detach().to(torch::kDouble), grad_norm.to(torch::kDouble)};
    if (has_moe) job_means.push_back(fwd.aux.detach().to(torch::kDouble));
    auto stats = torch::stack(job_means);
    // The job's losses are the mean of the ranks' (equal row counts); the norm is already the same
    // everywhere. The drop count stays the rank's own (each rank writes its own step rows).
    if (group) group->allreduce_mean_(stats);
    if (has_moe) stats = torch::cat({stats, fwd.dropped_slots.to(torch::kDouble).view({1})});
    return stats;
  };
  std::shared_ptr<StepGraph> graph;
  out.warmup_steps = spec.train.warmup_steps;
  if (graphs.eligible) {
    graph = std::make_shared<StepGraph>(device);  // the loop runs on its side stream from here on
    out.capture_step = start_step + kGraphWarmupEagerSteps;
    out.warmup_steps = std::max(out.warmup_steps, kGraphWarmupEagerSteps + 1);  // the capture step is not steady
  }
  out.graph = graph;
  int64_t step = start_step;
  try {
    data::Loader loader(source, state.data_state, spec.data.prefetch);
    ledger.end();  // startup ends where the first step begins
    for (; step < spec.train.steps; ++step) {
      const bool warm = step - start_step < out.warmup_steps;
      if (group) {
        inject_test_fault(rank, step);
        group->report_progress(step);
      }
      {
        // Before t0: opening the CUPTI window (its first use initialises CUPTI) is profiling time, not
        // step time, so the inside/outside-window step times measure the tracing overhead only.
        GoodputLedger::Scope open(ledger, Goodput::profiling);
        profiler.begin_step(step);
      }
      const auto t0 = Clock::now();
      ledger.begin(warm ? Goodput::warmup : Goodput::productive, t0);
      auto loaded = loader.next();
      ledger.move_to(Goodput::data_wait, loaded.wait_ns / 1e9);

      auto& batch = loaded.batch;
      // This rank's rows of the global batch (all of it in a single process).
      ids.copy_(torch::from_blob(batch.tokens.data(), {B * spec.distributed.nproc, T + 1}, torch::kInt32).narrow(0, rank * B, B));
      mask.copy_(torch::from_blob(batch.loss_mask.data(), {B * spec.distributed.nproc, T}, torch::kUInt8).narrow(0, rank * B, B));
      const double lr = learning_rate(step, spec.train.steps, spec.train.lr_warmup_steps, spec.train.lr, spec.train.min_lr_ratio);
      optimizer.set_lr(lr);
      torch::Tensor stats;
      if (graph && graph->captured()) {
        stats = graph->replay();
        profiler.after_phase(step, "graph replay");
      } else if (graph && step == out.capture_step) {
        optimizer.zero_grad();  // the captured backward allocates the gradients in the graph's pool
        const auto t_capture = Clock::now();
        profiler.begin_capture();
        const auto failure = graph->capture([&] { return step_body(step, false); });
        profiler.end_capture();
        const double capture_ms = ms_between(t_capture, Clock::now());
        if (failure.empty()) {
          graphs.achieved = true;
          graphs.reason = fmt::format("captured at step {} after {} eager warm-up steps on a side stream ({:.0f} ms to "
                                      "capture and instantiate); every later step replays the graph",
                                      step, kGraphWarmupEagerSteps, capture_ms);
          stats = graph->replay();
        } else {
          graphs.reason = fmt::format("capture failed at step {}: {}; the run went on eager", step, failure);
          graph.reset();
          out.graph.reset();
          optimizer.zero_grad();
          stats = step_body(step, true);
        }
        if (receipt)
          receipt->store.record_env(receipt->run_id, {{"compile.cuda_graphs_achieved", graphs.achieved ? "true" : "false"},
                                                  {"compile.cuda_graphs_reason", graphs.reason},
                                                  {"compile.cuda_graphs_capture_step", std::to_string(step)},
                                                  {"compile.cuda_graphs_capture_ms", fmt::format("{:.3f}", capture_ms)}});
        say("  " + graphs.reason);
      } else {
        optimizer.zero_grad();
        stats = step_body(step, true);
      }
      // The step's one host read: loss, gradient norm and the router's evidence together.
      const auto host = stats.cpu();
      const double loss = host[0].item<double>(), gnorm = host[1].item<double>();
      std::optional<double> aux_loss;
      std::optional<int64_t> dropped_slots;
      if (has_moe) {
        aux_loss = host[2].item<double>();
        dropped_slots = static_cast<int64_t>(std::llround(host[3].item<double>()));
      }
      const auto t1 = Clock::now();
      ledger.end(t1);
      const double wall_ms = ms_between(t0, t1);
      if (step == start_step) out.first_step_ms = wall_ms;
      {
        GoodputLedger::Scope flush(ledger, Goodput::profiling);  // closing the window syncs and flushes CUPTI
        profiler.end_step(step, wall_ms, !warm);
      }
      if (!std::isfinite(loss)) throw TrainingFailure(fmt::format("non-finite loss at step {} (loss {})", step, loss));
      out.last_loss = loss;

      receipts::StepRow row;
      row.step = step;
      row.wall_ms = wall_ms;
      row.tokens = tokens_per_step;
      row.loss = loss;
      row.grad_norm = gnorm;
      row.lr = lr;
      row.data_wait_ms = loaded.wait_ns / 1e6;
      row.moe_aux_loss = aux_loss;
      row.moe_dropped_slots = dropped_slots;
      row.rss_bytes = rss_bytes();
      if (device.is_cuda()) {
        const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index);
        // Profiled steps reset the peaks after each phase probe: their step peak is the largest probe.
        row.mem_allocated_peak = std::max(s.allocated_bytes[0].peak, profiler.step_allocated_peak());
        row.mem_reserved_peak = std::max(s.reserved_bytes[0].peak, profiler.step_reserved_peak());
        out.peak_memory = std::max(out.peak_memory, *row.mem_allocated_peak);
        c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index);
      } else {
        out.peak_memory = std::max(out.peak_memory, *row.rss_bytes);
      }
      row.rank = rank;
      rows.add(row);
      if (sync) {
        out.comm_wait_ms.push_back(sync->last_wait_ms());
        out.comm_ms.push_back(sync->comm_ms());  // after the host read above: the all-reduces are done
      }
      if (!warm) {
        out.steady_ms.push_back(wall_ms);
        out.steady_steps.push_back(step);
      }
      if (spec.train.log_every > 0 && (step % spec.train.log_every == 0 || step + 1 == spec.train.steps))
        say(fmt::format("  step {:>5}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}  {:.1f} ms{}", step, spec.train.steps, loss,
                        gnorm, lr, wall_ms, warm ? "  (warm-up)" : ""));
      if (posture.writes_receipt() && spec.train.checkpoint_every > 0 && (step + 1) % spec.train.checkpoint_every == 0 &&
          step + 1 < spec.train.steps) {
        GoodputLedger::Scope save(ledger, Goodput::checkpoint);
        save_checkpoint(state.checkpoint_dir, *model, optimizer,
                        {step + 1, batch.state_after, state.model_hash, source.description().fingerprint});
      }
    }
  } catch (const TrainingFailure& e) {
    out.failure = e.what();
  } catch (const c10::OutOfMemoryError& e) {
    out.failure = fmt::format("CUDA out of memory at step {}: {}", step,
                              cuda_index >= 0 ? allocator_stats(cuda_index) : std::string("no allocator stats"));
  } catch (const std::exception& e) {
    out.failure = fmt::format("at step {}: {}", step, e.what());
  }
  if (out.failure && group) {
    // A collective that failed or timed out: name the ranks that did not get this far.
    std::string behind;
    try {
      behind = group->ranks_behind(step);
    } catch (const std::exception& e) {
      behind = fmt::format("the store is unreachable too ({})", e.what());
    }
    if (!behind.empty()) *out.failure += fmt::format(" [rank {} was at step {}; {}]", rank, step, behind);
  }
  try {
    rows.flush();  // ok or failed, every completed step is in the receipt
  } catch (const std::exception& e) {
    if (receipt) throw;
    // Another rank's run that rank 0 already closed (it failed first): this rank's failure stands.
    if (!out.failure) out.failure = fmt::format("its last step rows could not be written: {}", e.what());
  }
  return out;
}

// ---- 5b ----------------------------------------------------------------------------------------

namespace {
std::string outcome_key(int64_t rank) { return fmt::format("outcome/{}", rank); }

// A per-step series (one entry per step, warm-up included): the median of its finite steady entries.
double steady_part_median(const std::vector<double>& per_step, int64_t warmup_steps) {
  std::vector<double> v;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, warmup_steps)); i < per_step.size(); ++i)
    if (std::isfinite(per_step[i])) v.push_back(per_step[i]);
  return median(v);
}

// A JSON series whose NaN entries were written as null.
std::vector<double> series(const nlohmann::json& j) {
  std::vector<double> out;
  for (const auto& v : j) out.push_back(v.is_null() ? NAN : v.get<double>());
  return out;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

RunResult publish_rank_outcome(const RunPosture& posture, const TrainOutcome& outcome) {
  // The step rows are in the store already (train_loop); this is what rank 0 summarises.
  const nlohmann::json j = {{"failure", outcome.failure ? nlohmann::json(*outcome.failure) : nlohmann::json(nullptr)},
                            {"steady_ms", outcome.steady_ms},
                            {"comm_wait_ms", outcome.comm_wait_ms},
                            {"comm_ms", outcome.comm_ms},  // NaN -> null
                            {"peak_memory", outcome.peak_memory},
                            {"warmup_steps", outcome.warmup_steps}};
  posture.group->publish(outcome_key(posture.group->rank()), j.dump());
  if (outcome.failure) return RunResult{0, "failed", *outcome.failure, 1};
  return RunResult{0, "ok", "", 0};
}

void record_rank_profile(const RunOptions& opt, const RunPosture& posture, RunProfiler& profiler) {
  if (profiler.status_text().rfind("disabled", 0) == 0) return;
  try {
    const int64_t run_id = std::stoll(posture.group->fetch("run_id"));
    auto store = receipts::Store::open(opt.db_path);
    profiler.record(store, run_id, opt.db_path);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ablate: rank {}: its profiling rows were not recorded: {}\n", posture.group->rank(), e.what());
  }
}

namespace {

// Rank 0, after its own loop: waits for every other rank's outcome (their step and profiling rows are
// in the run by then) and works out the job's distributed facts (per-rank medians, straggler ratio,
// communication). A rank that failed fails the run.
struct JobOutcome {
  nlohmann::json facts;
  std::optional<std::string> failure;
};
JobOutcome collect_rank_outcomes(ProcessGroup& group, const TrainOutcome& own) {
  JobOutcome job;
  nlohmann::json per_rank = nlohmann::json::array();
  double slowest = 0, fastest = INFINITY;
  std::vector<double> comm_share, wait_share;
  for (int64_t r = 0; r < group.world_size(); ++r) {
    std::vector<double> steady = own.steady_ms, wait = own.comm_wait_ms, comm = own.comm_ms;
    int64_t peak = own.peak_memory, warm = own.warmup_steps;
    if (r != 0) {
      const auto j = nlohmann::json::parse(group.fetch(outcome_key(r)));
      if (!j.at("failure").is_null() && !job.failure)
        job.failure = fmt::format("rank {} failed: {}", r, j.at("failure").get<std::string>());
      steady = j.at("steady_ms").get<std::vector<double>>();
      wait = series(j.at("comm_wait_ms"));
      comm = series(j.at("comm_ms"));
      peak = j.at("peak_memory").get<int64_t>();
      warm = j.at("warmup_steps").get<int64_t>();
    }
    const double step_ms = median(steady), wait_ms = steady_part_median(wait, warm),
                 comm_ms = steady_part_median(comm, warm);
    if (std::isfinite(step_ms)) {
      slowest = std::max(slowest, step_ms);
      fastest = std::min(fastest, step_ms);
    }
    if (std::isfinite(step_ms) && std::isfinite(wait_ms) && step_ms > 0) wait_share.push_back(wait_ms / step_ms);
    if (std::isfinite(step_ms) && std::isfinite(comm_ms) && step_ms > 0) comm_share.push_back(comm_ms / step_ms);
    per_rank.push_back({{"rank", r},
                        {"median_step_ms", number_or_null(step_ms)},
                        {"median_comm_ms", number_or_null(comm_ms)},
                        {"median_comm_wait_ms", number_or_null(wait_ms)},
                        {"peak_memory_bytes", peak}});
  }
  job.facts = {{"world_size", group.world_size()},
               {"backend", group.backend_name()},
               {"launcher", group.world().launcher},
               {"per_rank", per_rank},
               // Slowest rank's median step over the fastest's: 1.0 is a perfectly even job.
               {"straggler_ratio", fastest < INFINITY && fastest > 0 ? nlohmann::json(slowest / fastest) : nlohmann::json(nullptr)},
               // The gradient all-reduces' own time over the step (median of the ranks): on NCCL the
               // collectives' kernel time from CUDA events on its stream (overlapped with backward or
               // not); null on Gloo, which cannot time them.
               {"comm_share", comm_share.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(comm_share))},
               // Host time waiting for them after backward, over the step: the exposed communication
               // on Gloo; on NCCL the wait is on the stream (~0 on the host).
               {"comm_wait_share", wait_share.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(wait_share))}};
  return job;
}

// What the MoE router did over the run, from every rank's step rows (null without E blocks): slots the
// capacity factor dropped against the slots routed (tokens x top_k x E layers of the recorded steps).
nlohmann::json moe_summary(receipts::Store& store, int64_t run_id, const model::ModelConfig& m) {
  const auto layers = static_cast<int64_t>(std::count(m.pattern.begin(), m.pattern.end(), 'E'));
  if (layers == 0) return nullptr;
  const auto row = store.query(
      "SELECT count(moe_dropped_slots) AS rows, coalesce(sum(moe_dropped_slots), 0) AS dropped FROM steps "
      "WHERE run_id = ?",
      {run_id})[0];
  const auto last = store.query(
      "SELECT moe_aux_loss FROM steps WHERE run_id = ? AND rank = 0 AND moe_aux_loss IS NOT NULL ORDER BY step DESC "
      "LIMIT 1",
      {run_id});
  const int64_t routed = row["rows"].get<int64_t>() * m.batch_size * m.seq_len * m.moe.top_k * layers;
  const int64_t dropped = row["dropped"].get<int64_t>();
  return {{"e_layers", layers},
          {"top_k", m.moe.top_k},
          {"capacity_factor", m.moe.capacity_factor},
          {"dropped_slots", dropped},
          {"routed_slots", routed},
          {"drop_rate", routed > 0 ? nlohmann::json(static_cast<double>(dropped) / static_cast<double>(routed))
                                   : nlohmann::json(nullptr)},
          {"final_aux_loss", last.empty() ? nlohmann::json(nullptr) : last[0]["moe_aux_loss"]}};
}

}  // namespace

// ---- 6 -----------------------------------------------------------------------------------------

RunResult fail_receipt(const RunOptions& opt, OpenReceipt& receipt, GoodputLedger& ledger, const std::string& error) {
  receipt.store.record_goodput(receipt.run_id, ledger.totals());
  receipt.life->finish(receipts::RunStatus::failed, error, {});
  Progress{opt.quiet}(fmt::format("run {} failed: {}", receipt.run_id, error));
  return RunResult{receipt.run_id, "failed", error, 1};
}

RunResult finalise_receipt(const ExperimentSpec& spec, const RunOptions& opt, RunPosture& posture,
                           const ModelState& state, const data::DataSource& source, OpenReceipt& receipt,
                           RunProfiler& profiler, GoodputLedger& ledger, const TrainOutcome& outcome) {
  auto& store = receipt.store;
  const int64_t run_id = receipt.run_id;
  auto& graphs = posture.graphs;
  nlohmann::json distributed = nullptr;
  if (posture.group) {
    JobOutcome job;
    try {
      job = collect_rank_outcomes(*posture.group, outcome);
    } catch (const std::exception& e) {
      job.failure = fmt::format("collecting the other ranks' results failed: {}", e.what());
    }
    if (job.failure) return fail_receipt(opt, receipt, ledger, *job.failure);
    distributed = job.facts;
  }
  std::vector<int64_t> outlier_steps;
  for (size_t i : slow_outliers(outcome.steady_ms)) outlier_steps.push_back(outcome.steady_steps[i]);
  if (!outlier_steps.empty()) store.flag_outliers(run_id, 0, outlier_steps);
  // Compile posture known only after the run: the first step (autotune, allocator growth, lazy init).
  store.record_env(run_id, {{"compile.first_step_ms", fmt::format("{:.3f}", outcome.first_step_ms)},
                            {"compile.warmup_steps", std::to_string(outcome.warmup_steps)}});
  if (graphs.eligible && outcome.capture_step >= 0 && !graphs.achieved && graphs.reason.rfind("capture failed", 0) != 0) {
    graphs.reason = fmt::format("eligible, but the run ended before its capture step {} ({} eager warm-up steps "
                                "come first); the step ran eager: raise train.steps",
                                outcome.capture_step, kGraphWarmupEagerSteps);
    store.record_env(run_id, {{"compile.cuda_graphs_reason", graphs.reason}});
  }
  nlohmann::json profile_summary;
  {
    GoodputLedger::Scope export_scope(ledger, Goodput::profiling);  // attribution, trace export, receipt rows
    profile_summary = profiler.record(store, run_id, opt.db_path);
  }
  const auto totals = ledger.totals();
  store.record_goodput(run_id, totals);

  const auto counts = model::parameter_count(spec.model);
  const double train_flops = model::training_flops_per_token(spec.model);
  const int64_t world = spec.distributed.nproc;
  const nlohmann::json moe = moe_summary(store, run_id, spec.model);
  const int64_t tokens_per_step = spec.model.batch_size * spec.model.seq_len * world;  // the job's
  const bool cuda = posture.device.is_cuda();
  receipts::RunSummary summary;
  summary.steps = spec.train.steps - state.start_step;
  summary.flops_version = model::kFlopsVersion;
  if (!outcome.steady_ms.empty()) {
    summary.median_step_ms = median(outcome.steady_ms);
    summary.tokens_per_s = tokens_per_step / (*summary.median_step_ms / 1000.0);
    // Per GPU: the job's tokens over its GPUs against one GPU's peak.
    summary.mfu = cuda ? model_flops_utilization(train_flops, *summary.tokens_per_s / static_cast<double>(world),
                                                 receipt.env["gpu_model"])
                       : std::nullopt;
  }
  summary.goodput_pct = 100.0 * ledger.goodput();
  summary.peak_memory_bytes = outcome.peak_memory;
  summary.extra = {{"final_loss", outcome.last_loss},
                   {"first_step_ms", outcome.first_step_ms},
                   {"warmup_steps", outcome.warmup_steps},
                   {"steady_steps", outcome.steady_ms.size()},
                   {"outlier_steps", outlier_steps},
                   {"parameters", counts.total},
                   {"active_parameters", counts.active_per_token},
                   {"training_flops_per_token", train_flops},
                   {"tokens_per_step", tokens_per_step},
                   {"distributed", distributed},
                   {"moe", moe},
                   {"resumed_from", state.resumed_from},
                   {"start_step", state.start_step},
                   {"data", data::to_json(source.description())},
                   {"peak_memory_kind", cuda ? "cuda allocator allocated peak" : "process RSS"},
                   {"profile", profile_summary},
                   {"cuda_graphs",
                    {{"requested", graphs.requested},
                     {"eligible", graphs.eligible},
                     {"achieved", graphs.achieved},
                     {"capture_step", graphs.achieved ? nlohmann::json(outcome.capture_step) : nlohmann::json(nullptr)},
                     {"reason", graphs.reason}}}};
  receipt.life->finish(receipts::RunStatus::ok, "", summary);
  Progress{opt.quiet}(fmt::format(
      "run {} ok: median step {:.2f} ms, {:.0f} tokens/s, MFU {}, goodput {:.1f} %, peak memory {:.1f} MiB, final loss {:.4f}",
      run_id, summary.median_step_ms.value_or(NAN), summary.tokens_per_s.value_or(NAN),
      summary.mfu ? fmt::format("{:.1f} %", *summary.mfu * 100) : "null", *summary.goodput_pct,
      outcome.peak_memory / 1048576.0, outcome.last_loss));
  return {run_id, "ok", "", 0};
}

}  // namespace ablate::harness
