// harness/train/stages.cpp: see stages.h. The goodput ledger is charged as the run goes (startup until
// the first step, data_prep for the corpus, warmup/productive per step with loader waits moved to
// data_wait, checkpoint saves and restores, profiling around the CUPTI window and the evidence export).
// Everything the run writes goes through its RunRecorder; the facts of the run are assembled once, in
// run_facts, for the ok and the failed run alike.
// Tests: tests/harness/stages_test.cpp, tests/harness/runner_test.cpp.
#include "harness/train/stages.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "data/loader.h"
#include "harness/lane.h"
#include "harness/step_stats.h"
#include "harness/train/checkpoint.h"
#include "harness/train/device.h"
#include "harness/train/run_profiler.h"
#include "harness/train/step_executor.h"
#include "harness/train/step_graph.h"
#include "receipts/schema.h"
#include "base/sha256.h"

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
  // Held out only when evaluated: a run without evaluation trains on every document, as before.
  d.validation_fraction = spec.train.eval_every > 0 ? spec.data.validation_fraction : 0.0;
  return d;
}

// The lane (harness/lane.h) of the run's resolved backends.
std::string lane_of(const ExperimentSpec& spec, const kernels::Dispatcher& d, const std::string& device_kind) {
  return harness::lane_of(spec, d.resolutions(), device_kind);
}

// Test-only fault injection for the multi-process tests (tests/harness/distributed_test.cpp):
// ABLATE_TEST_FAULT = "kill:<rank>:<step>" (the rank SIGKILLs itself as that step begins) or
// "hang:<rank>:<step>" (it stops making progress there, as a deadlocked rank would) or
// "throw:<rank>:<step>" (its step fails with an error, as a rank whose training fails would), all as
// the step begins; or "stop:<rank>:<step>" (SIGSTOP once it has reported the step: the whole process,
// heartbeat included, stops answering while its progress says it is where the others are); or
// "save:<rank>:<step>" (the rank SIGKILLs itself as the checkpoint save after that step begins, so the
// other ranks wait for it in the save's collectives).
enum class FaultPoint { step_begins, step_reported, save };
void inject_test_fault(int64_t rank, int64_t step, FaultPoint point) {
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
  const std::string kind = fault.kind;
  if (point == FaultPoint::save) {
    if (kind == "save") ::raise(SIGKILL);
    return;
  }
  if (point == FaultPoint::step_reported) {
    if (kind == "stop") ::raise(SIGSTOP);
    return;
  }
  if (kind == "kill") ::raise(SIGKILL);
  if (kind == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  if (kind == "throw")
    throw std::runtime_error(fmt::format("injected test fault at step {} (ABLATE_TEST_FAULT)", step));
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
  if (quiet) return;
  // Each line flushed as it is written (a run redirected to a file keeps what it printed when it is
  // killed); a closed or full output loses the lines from then on, never the run (`ablate run`
  // ignores SIGPIPE): the receipt has every step.
  static std::atomic<bool> lost{false};
  if (lost.load()) return;
  const std::string text = line + "\n";
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return;
  const int err = errno;
  lost = true;
  // The loss is said once, here: stdout goes to /dev/null from now on, so the run's exit code is the
  // run's own (not the lost output's, which the CLI would report as an error at exit).
  (void)std::freopen("/dev/null", "w", stdout);
  std::fprintf(stderr, "ablate: the progress output is lost (%s); the run goes on and its receipt has every step\n",
               std::strerror(err));
}

// ---- 1 -----------------------------------------------------------------------------------------

// Only for the block kinds the pattern has: a limit of a seam the model never calls refuses nothing.
kernels::ModelDims model_dims(const model::ModelConfig& m) {
  const auto has = [&](char letter) { return m.pattern.find(letter) != std::string::npos; };
  kernels::ModelDims dims;
  if (has('E')) {
    dims.experts = m.moe.experts;
    dims.expert_alignment = std::gcd(m.d_model, m.moe.ffn);
  }
  if (has('M')) {
    dims.ssm_head_dim = m.mamba.head_dim;
    dims.ssm_heads = m.mamba.expand * m.d_model / m.mamba.head_dim;
    dims.ssm_state = m.mamba.state;
    dims.ssm_chunk = m.mamba.chunk;
  }
  if (has('R')) dims.conv_width = m.recurrent.conv_width;
  // The LM head ([vocab, d]) is a dense GEMM too; vocabularies are padded to such multiples for speed anyway.
  dims.projection_alignment = std::gcd(m.vocab, m.d_model);
  for (const char letter : m.pattern)
    for (const auto& p : model::projection_shapes(letter, m))
      dims.projection_alignment = std::gcd(std::gcd(dims.projection_alignment, p.out), p.in);
  dims.projection_alignment = std::gcd(dims.projection_alignment, m.batch_size * m.seq_len);
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
  if (spec.train.memory_limit_gib > 0 || spec.train.expandable_segments)  // before the run's first allocation
    p.memory = std::make_shared<DeviceMemoryPosture>(spec.train.memory_limit_gib, spec.train.expandable_segments, p.device);
  p.bf16 = spec.train.dtype == "bf16" || (spec.train.dtype == "auto" && p.device.is_cuda());
  if (spec.distributed.param_dtype == "bf16" && !p.bf16)
    throw std::invalid_argument(
        "distributed.param_dtype = \"bf16\" keeps the GEMM weights in bf16, which only bf16 autocast computes with "
        "unchanged, and train.dtype = \"auto\" is fp32 on the CPU: set train.dtype = \"bf16\" or "
        "distributed.param_dtype = \"fp32\"");
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
  if (opt.attempt_graph_capture_for_testing && spec.compile.cuda_graphs && p.device.is_cuda()) {
    p.graphs.eligible = true;
    p.graphs.outcome = receipts::CaptureOutcome::not_reached;
  }
  if (data_parallel && p.graphs.eligible) {
    if (auto why = graph_refusal_under_data_parallel(spec.distributed.expert_parallel, spec.model.moe.capacity_factor);
        !why.empty()) {
      p.graphs.eligible = false;
      p.graphs.outcome = receipts::CaptureOutcome::refused;
      p.graphs.reason = std::move(why);
    }
  }
  if (const int64_t ep = spec.distributed.expert_parallel; ep > 1) {
    // The grouped dispatch exchanges rows with the ranks holding the experts, whatever its GEMMs'
    // precision (kernels/moe_dispatch/grouped_dispatch.h).
    const auto& chosen = p.dispatcher->chosen("moe_dispatch");
    if (chosen != "grouped_mm" && chosen != "grouped_mm_fp8_rowwise")
      throw std::invalid_argument(fmt::format(
          "distributed.expert_parallel = {} needs backends.moe_dispatch = \"grouped_mm\" or "
          "\"grouped_mm_fp8_rowwise\" (the dispatch that exchanges rows with the ranks holding the experts); this "
          "run resolved moe_dispatch to \"{}\"",
          ep, chosen));
  }
  if (data_parallel) {
    p.group = std::make_shared<ProcessGroup>(*opt.world, spec.distributed.backend, p.device,
                                             std::chrono::seconds(spec.distributed.timeout_s));
    if (spec.distributed.expert_parallel > 1)
      p.experts = std::make_shared<ExpertParallel>(*p.group, spec.distributed.expert_parallel,
                                                   spec.distributed.expert_exchange_chunks);
    if (spec.distributed.sharding != "none" && spec.model.pattern.find('E') != std::string::npos) {
      std::vector<int64_t> job(static_cast<size_t>(p.group->world_size()));
      std::iota(job.begin(), job.end(), int64_t{0});
      p.counts = p.group->subgroup("moe-counts", job);
    }
  }
  return p;
}

void take_device_memory(TrainOutcome& out, const RunPosture& posture) {
  if (!posture.device.is_cuda()) return;
  // The peak since the last step row's reset: a step that failed out of memory held it when it failed.
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index_of(posture.device));
  out.peak_reserved = std::max(out.peak_reserved, stats.reserved_bytes[0].peak);
  out.device_memory = device_memory_use(posture.device);
}

std::string out_of_memory_failure(const RunPosture& posture, const std::string& when) {
  const int index = cuda_index_of(posture.device);
  return fmt::format("CUDA out of memory {}{}: {}", when,
                     posture.memory && posture.memory->limit_bytes() > 0 ? " " + posture.memory->describe() : std::string(),
                     index >= 0 ? allocator_stats(index) : std::string("no allocator stats"));
}

// ---- 2 -----------------------------------------------------------------------------------------

std::unique_ptr<data::DataSource> open_run_data(const ExperimentSpec& spec, GoodputLedger& ledger) {
  GoodputLedger::Scope prep(ledger, Goodput::data_prep);
  return data::open_data(data_options(spec));
}

// ---- 3 -----------------------------------------------------------------------------------------

namespace {
// The model's expert weights as checkpoints gather and restore them (none without expert parallelism).
ExpertWeights expert_weights(const model::HybridModel& model, const RunPosture& posture) {
  if (!posture.experts) return {};
  return {model->expert_parameters(), posture.experts.get()};
}
}  // namespace

ModelState build_model(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                       const data::DataSource& source, GoodputLedger& ledger) {
  ModelState s;
  const uint64_t seed = static_cast<uint64_t>(spec.experiment.seed);
  torch::manual_seed(seed);
  s.model = model::HybridModel(spec.model, posture.dispatcher, seed,
                               posture.experts ? posture.experts->placement() : model::ExpertPlacement{});
  s.model->to(posture.device);
  s.params = s.model->parameters();
  // Sharded, the step executor builds the optimizer on its shards (the whole-model moments would
  // count in the run's peak memory though freed at once).
  if (spec.distributed.sharding == "none") {
    auto adamw = std::make_unique<AdamW>(s.params, spec.train, *posture.dispatcher);
    if (posture.experts) adamw->partition_experts(s.model->expert_parameters(), *posture.experts);
    s.optimizer = std::move(adamw);
  }
  s.model_hash = model_hash(spec);
  s.checkpoint_dir = !spec.train.checkpoint_dir.empty()
                         ? spec.train.checkpoint_dir
                         : (fs::absolute(opt.db_path).parent_path() / "checkpoints" / spec.experiment.name).string();
  if (spec.train.checkpoint_every > 0 && posture.writes_receipt())
    s.checkpoint_lock = std::make_unique<CheckpointFolderLock>(s.checkpoint_dir);
  if (spec.train.resume) {
    GoodputLedger::Scope restore(ledger, Goodput::checkpoint);
    const auto latest = latest_checkpoint(s.checkpoint_dir);
    s.checkpoints_skipped = latest.skipped;
    for (const auto& why : latest.skipped)
      fmt::print(stderr, "ablate: skipped the checkpoint {}/{}; resuming from an older one if any\n", s.checkpoint_dir, why);
    if (latest.folder) {
      // Sharded, the optimizer is built on its shards later and loads then (step executor).
      const auto st = load_checkpoint(*latest.folder, *s.model, s.optimizer.get(), s.model_hash,
                                      source.description().fingerprint, expert_weights(s.model, posture));
      s.start_step = st.next_step;
      s.data_state = st.data;
      s.resumed_from = *latest.folder;
    }
  }
  if (s.start_step >= spec.train.steps)
    throw std::invalid_argument(fmt::format("the checkpoint in {} is already at step {} of train.steps = {}: raise "
                                            "train.steps or set train.resume = false",
                                            s.checkpoint_dir, s.start_step, spec.train.steps));
  return s;
}

// ---- 4 -----------------------------------------------------------------------------------------

namespace {

Fingerprint run_fingerprint(const ExperimentSpec& spec, const RunPosture& posture, int schema_version) {
  Fingerprint env = host_fingerprint(schema_version);
  for (const auto& [k, v] : device_fingerprint()) env[k] = v;
  env["device"] = posture.device_kind;
  env["intra_op_threads"] = std::to_string(at::get_num_threads());  // LibTorch's CPU pool (OMP_NUM_THREADS)
  // CUDA's hardware work queues (read at context creation; the driver's default is 8): a captured
  // data-parallel step's speed depends on it (harness/cli/launch_command.cpp sets it for its ranks).
  if (posture.device.is_cuda()) {
    const char* connections = std::getenv(kCudaConnectionsEnv);
    env["cuda_device_max_connections"] = connections != nullptr ? connections : "default";
    // The caching allocator's settings from the environment (train.expandable_segments and
    // train.memory_limit_gib act on top of them): segment sizes and splitting move what a run needs.
    const char* allocator = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    env["pytorch_cuda_alloc_conf"] = allocator != nullptr && *allocator ? allocator : "default";
  }
  env["dtype"] = posture.bf16 ? "bf16-autocast" : "fp32";
  env["compile.cuda_graphs_requested"] = spec.compile.cuda_graphs ? "true" : "false";
  env["compile.cuda_graphs_achieved"] = "false";
  env["compile.cuda_graphs_outcome"] = std::string(receipts::to_string(posture.graphs.outcome));
  env["compile.cuda_graphs_reason"] = posture.graphs.reason;
  env["compile.launch_ahead"] = spec.compile.launch_ahead ? "true" : "false";
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
    for (int64_t r = 0; r < posture.group->world_size(); ++r)
      ranks.push_back(nlohmann::json::parse(posture.group->fetch(fmt::format("where/{}", r))));
    env["distributed.ranks"] = ranks.dump();
  }
  return env;
}

}  // namespace

std::unique_ptr<receipts::RunRecorder> open_recorder(const ExperimentSpec& spec, const RunOptions& opt,
                                                     const RunPosture& posture, const ModelState& state) {
  if (!posture.writes_receipt()) {
    // Rank 0 publishes the run id once the run exists: this rank's rows go into that run.
    const int64_t run_id = std::stoll(posture.group->fetch("run_id"));
    return receipts::RunRecorder::attach(opt.db_path, run_id, posture.group->rank());
  }
  receipts::RunStart rs;
  rs.name = spec.experiment.name;
  rs.tags = spec.experiment.tags;
  rs.lane = lane_of(spec, *posture.dispatcher, posture.device_kind);
  rs.spec_json = canonical_json(spec).dump();
  rs.spec_hash = spec_hash(spec);
  rs.source_path = spec.source_path;
  rs.source_text = spec.source_text;
  rs.env = run_fingerprint(spec, posture, receipts::schema::latest_version());  // Store::open migrates to it
  if (!spec.overrides.empty()) rs.env["spec.overrides"] = nlohmann::json(spec.overrides).dump();
  if (opt.matrix_id) {
    rs.matrix_id = opt.matrix_id;
    rs.cell = opt.cell;
    rs.repeat = opt.repeat;
  }
  auto recorder = receipts::RunRecorder::begin(opt.db_path, rs);
  const int64_t run_id = recorder->run_id();
  // `ablate launch` closes the run itself when rank 0 dies before it could (harness/cli/launch_command.cpp).
  if (const char* f = std::getenv("ABLATE_LAUNCH_RUN_ID_FILE"); f && *f && posture.group) {
    std::ofstream(f) << run_id << "\n";
  }
  if (posture.group) posture.group->publish("run_id", std::to_string(run_id));  // for the other ranks' recorders

  std::vector<receipts::BackendRow> backend_rows;
  for (const auto& r : posture.dispatcher->resolutions())
    backend_rows.push_back({r.seam, r.requested, r.chosen, std::nullopt, r.reason, std::nullopt});
  recorder->backends(backend_rows);
  std::vector<receipts::CatalogRow> catalog_rows;
  for (const auto& b : kernels::catalog())
    catalog_rows.push_back({b.seam, b.name, kernels::role_name(b.role),
                            b.fallback.empty() ? std::nullopt : std::optional<std::string>(b.fallback), b.kernel_patterns,
                            b.changes_numerics});
  recorder->catalog(catalog_rows);

  const Progress say{opt.quiet};
  const auto counts = model::parameter_count(spec.model);
  say(fmt::format("run {}: {} ({} layers {}, {:.1f} M parameters, {:.1f} M active) on {} {}, {} steps{}{}", run_id,
                  spec.experiment.name, spec.model.pattern.size(), spec.model.pattern, counts.total / 1e6,
                  counts.active_per_token / 1e6, posture.device_kind, posture.bf16 ? "bf16" : "fp32", spec.train.steps,
                  state.resumed_from.empty() ? "" : fmt::format(", resumed at step {}", state.start_step),
                  spec.model_overridden() ? fmt::format(" (model.config {} changed by --set)", spec.model.name) : ""));
  for (const auto& r : posture.dispatcher->resolutions())
    if (r.requested != r.chosen) say(fmt::format("  {}: {}", r.seam, r.reason));
  return recorder;
}

// ---- 5 -----------------------------------------------------------------------------------------

namespace {

// One step's row: its numbers, and the memory high-water marks since the last row.
receipts::StepRow step_row(int64_t step, double wall_ms, int64_t tokens, double lr, double data_wait_ms,
                           const StepExecutor::Result& r, const torch::Device& device, const RunProfiler& profiler) {
  receipts::StepRow row;
  row.step = step;
  row.wall_ms = wall_ms;
  row.tokens = tokens;
  row.loss = r.loss;
  row.grad_norm = r.grad_norm;
  row.lr = lr;
  row.data_wait_ms = data_wait_ms;
  row.moe_aux_loss = r.moe_aux_loss;
  row.moe_dropped_slots = r.moe_dropped_slots;
  row.rss_bytes = rss_bytes();
  if (device.is_cuda()) {
    const int index = cuda_index_of(device);
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    // Profiled steps reset the peaks after each phase probe: their step peak is the largest probe.
    row.mem_allocated_peak = std::max(s.allocated_bytes[0].peak, profiler.step_allocated_peak());
    row.mem_reserved_peak = std::max(s.reserved_bytes[0].peak, profiler.step_reserved_peak());
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
  }
  return row;
}

// What the loop keeps of each finished step: its row in the receipt, and the outcome's series.
class StepTally {
 public:
  StepTally(TrainOutcome& out, receipts::RunRecorder& recorder, const RunProfiler& profiler)
      : out_(out), recorder_(recorder), profiler_(profiler) {}

  // The row goes to the recorder first: a non-finite step is recorded too (the failed run keeps its
  // evidence), then fails the run.
  void add(const receipts::StepRow& row, bool warm, const StepExecutor& executor) {
    recorder_.step(row);
    if (!std::isfinite(*row.loss))
      throw TrainingFailure(fmt::format("non-finite loss at step {} (loss {})", row.step, *row.loss));
    out_.last_loss = row.loss;
    out_.peak_memory = std::max(out_.peak_memory, row.mem_allocated_peak.value_or(*row.rss_bytes));
    out_.peak_reserved = std::max(out_.peak_reserved, row.mem_reserved_peak.value_or(0));
    if (executor.sync()) {
      // After the step's host read: its collectives are done.
      const auto c = executor.step_collectives();
      out_.comm_wait_ms.push_back(c.wait_ms);
      out_.comm_ms.push_back(c.total_ms);
      out_.all_reduce_ms.push_back(c.ms.all_reduce);
      out_.reduce_scatter_ms.push_back(c.ms.reduce_scatter);
      out_.all_gather_ms.push_back(c.ms.all_gather);
      out_.all_to_all_ms.push_back(c.all_to_all_ms);
    }
    if (warm) return;
    if (profiler_.traced(row.step)) {
      window_.emplace_back(row.step, row.wall_ms);
    } else {
      out_.steady_ms.push_back(row.wall_ms);
      out_.steady_steps.push_back(row.step);
    }
  }

  // Steady steps outside the traced window; the window's own steps only when nothing else is steady.
  void close() {
    if (!out_.steady_ms.empty()) {
      out_.window_steps_excluded = static_cast<int64_t>(window_.size());
      return;
    }
    for (const auto& [step, ms] : window_) {
      out_.steady_steps.push_back(step);
      out_.steady_ms.push_back(ms);
    }
  }

 private:
  TrainOutcome& out_;
  receipts::RunRecorder& recorder_;
  const RunProfiler& profiler_;
  std::vector<std::pair<int64_t, double>> window_;  // steady steps inside the traced window
};

// After the last step (or the failing one): a failure names the ranks behind; every completed row is
// flushed; each rank flags its own slow outliers.
void close_loop(TrainOutcome& out, receipts::RunRecorder& recorder, ProcessGroup* group, int64_t step) {
  if (out.failure && group) {
    // A collective that failed or timed out: name the ranks that did not get this far.
    std::string behind;
    try {
      behind = group->ranks_behind(step);
    } catch (const std::exception& e) {
      behind = fmt::format("the store is unreachable too ({})", e.what());
    }
    if (!behind.empty()) *out.failure += fmt::format(" [rank {} was at step {}; {}]", group->rank(), step, behind);
  }
  try {
    recorder.flush_steps();  // ok or failed, every completed step is in the receipt
    if (!out.failure) {
      std::vector<int64_t> outliers;
      for (size_t i : slow_outliers(out.steady_ms)) outliers.push_back(out.steady_steps[i]);
      recorder.outliers(outliers);
    }
  } catch (const receipts::StoreFileError& e) {  // a full disk: the run still ends failed, saying so
    if (!out.failure) out.failure = fmt::format("the receipt store takes no more: {}", e.what());
    out.store_unwritable = true;
  } catch (const std::exception& e) {
    if (recorder.owns_run()) throw;
    // Another rank's run that rank 0 already closed (it failed first): this rank's failure stands.
    if (!out.failure) out.failure = fmt::format("its last step rows could not be written: {}", e.what());
  }
}

}  // namespace

// The bucket layout and the rank's optimizer state, for the receipt: the job-wide sync's, plus under
// expert parallelism the expert weights' sync over the ranks holding the same experts.
static receipts::ShardingFacts sharding_facts(const ExperimentSpec& spec, const StepExecutor& executor,
                                              const TrainOptimizer& optimizer) {
  receipts::ShardingFacts f;
  f.stage = spec.distributed.sharding;
  f.reduce_dtype = spec.distributed.reduce_dtype;
  f.param_dtype = spec.distributed.param_dtype;
  f.expert_parallel = spec.distributed.expert_parallel;
  f.expert_exchange_chunks = spec.distributed.expert_exchange_chunks;
  f.optimizer_state_bytes = optimizer.state_bytes();
  for (const auto* sync : {executor.sync(), executor.expert_sync()}) {
    if (sync == nullptr) continue;
    f.buckets += static_cast<int64_t>(sync->layout().buckets.size());
    f.padding_elements += sync->layout().padding;
    for (const auto& b : sync->layout().buckets) f.shard_elements += b.shard_numel;
    f.gradient_bytes += sync->gradient_bytes();
    f.parameter_bytes += sync->parameter_bytes();
    const auto bytes = sync->collective_bytes();
    f.all_reduce_bytes += bytes.all_reduce;
    f.reduce_scatter_bytes += bytes.reduce_scatter;
    f.all_gather_bytes += bytes.all_gather;
  }
  return f;
}

bool checkpoint_after(const ExperimentSpec& spec, int64_t step) {
  return spec.train.checkpoint_every > 0 && (step + 1) % spec.train.checkpoint_every == 0 &&
         step + 1 < spec.train.steps;
}

bool eval_after(const ExperimentSpec& spec, int64_t step) {
  return spec.train.eval_every > 0 && ((step + 1) % spec.train.eval_every == 0 || step + 1 == spec.train.steps);
}

bool may_launch_ahead(const ExperimentSpec& spec, int64_t step, const std::function<bool(int64_t)>& traced) {
  return spec.compile.launch_ahead && step + 1 < spec.train.steps && !checkpoint_after(spec, step) &&
         !eval_after(spec, step) && traced(step) == traced(step + 1);
}

TrainOutcome train_loop(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                        ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                        RunProfiler& profiler, GoodputLedger& ledger) {
  const Progress say{opt.quiet};
  ProcessGroup* group = posture.group.get();
  const int64_t start_step = state.start_step, tokens_per_step = spec.model.batch_size * spec.model.seq_len;
  TrainOutcome out;
  out.capture = posture.graphs;
  StepExecutor executor(spec, posture, state, profiler);
  out.warmup_steps = executor.warmup_steps();
  if (executor.sync()) out.sharding = sharding_facts(spec, executor, *state.optimizer);
  StepTally tally(out, recorder, profiler);
  int64_t step = start_step;
  try {
    data::Loader loader(source, state.data_state, spec.data.prefetch);
    std::optional<data::LoadedBatch> upcoming;  // the next step's batch, fetched a step early to launch it ahead
    const auto rate = [&](int64_t s) {
      return learning_rate(s, spec.train.steps, spec.train.lr_warmup_steps, spec.train.lr, spec.train.min_lr_ratio);
    };
    ledger.end();  // startup ends where the first step begins
    for (; step < spec.train.steps; ++step) {
      const bool warm = step - start_step < out.warmup_steps;
      if (group) {
        inject_test_fault(group->rank(), step, FaultPoint::step_begins);
        group->report_progress(step);
        inject_test_fault(group->rank(), step, FaultPoint::step_reported);
      }
      {
        // Before t0: opening the CUPTI window (its first use initialises CUPTI) is profiling time, not
        // step time, so the inside/outside-window step times measure the tracing overhead only.
        GoodputLedger::Scope open(ledger, Goodput::profiling);
        profiler.begin_step(step);
      }
      const auto t0 = Clock::now();
      ledger.begin(warm ? Goodput::warmup : Goodput::productive, t0);
      auto loaded = upcoming ? std::move(*upcoming) : loader.next();
      if (!upcoming) ledger.move_to(Goodput::data_wait, loaded.wait_ns / 1e9);
      upcoming.reset();
      const double lr = rate(step);
      std::optional<StepExecutor::NextStep> next;
      if (executor.replays() && may_launch_ahead(spec, step, [&](int64_t s) { return profiler.traced(s); })) {
        upcoming = loader.next();
        ledger.move_to(Goodput::data_wait, upcoming->wait_ns / 1e9);
        next = StepExecutor::NextStep{&upcoming->batch, rate(step + 1)};
      }
      const auto result = executor.run(step, lr, loaded.batch, next ? &*next : nullptr);
      const auto t1 = Clock::now();
      ledger.end(t1);
      const double wall_ms = ms_between(t0, t1);
      if (step == start_step) out.first_step_ms = wall_ms;
      if (result.capture) {
        out.capture = *result.capture;
        if (recorder.owns_run()) recorder.capture(out.capture);  // as it happens, not inferred later
        say("  " + out.capture.reason);
      }
      {
        GoodputLedger::Scope flush(ledger, Goodput::profiling);  // closing the window syncs and flushes CUPTI
        profiler.end_step(step, wall_ms, !warm);
      }
      tally.add(step_row(step, wall_ms, tokens_per_step, lr, loaded.wait_ns / 1e6, result, posture.device, profiler), warm,
                executor);
      if (spec.train.log_every > 0 && (step % spec.train.log_every == 0 || step + 1 == spec.train.steps))
        say(fmt::format("  step {:>5}/{}  loss {:.4f}  grad norm {:.3f}  lr {:.2e}  {:.1f} ms{}", step, spec.train.steps,
                        result.loss, result.grad_norm, lr, wall_ms, warm ? "  (warm-up)" : ""));
      // Rank 0 writes; under sharding every rank takes part (the optimizer's state is gathered), under
      // expert parallelism the ranks of rank 0's expert group (ranks 0 .. N-1 gather the experts it
      // writes; the other groups hold copies of the same experts).
      const bool takes_part = posture.writes_receipt() || spec.distributed.sharding != "none" ||
                              (posture.experts && group && group->rank() < posture.experts->ranks());
      if (takes_part && checkpoint_after(spec, step)) {
        GoodputLedger::Scope save(ledger, Goodput::checkpoint);
        if (group) inject_test_fault(group->rank(), step, FaultPoint::save);
        executor.settle(/*whole=*/true);
        save_checkpoint(state.checkpoint_dir, *state.model, *state.optimizer,
                        {step + 1, loaded.batch.state_after, state.model_hash, source.description().fingerprint},
                        posture.writes_receipt(), expert_weights(state.model, posture), executor.master_values());
        if (posture.writes_receipt()) prune_checkpoints(state.checkpoint_dir, spec.train.keep_checkpoints);
        executor.release_settled();
      }
      if (eval_after(spec, step)) {
        GoodputLedger::Scope eval(ledger, Goodput::eval);
        const auto e0 = Clock::now();
        const auto e = executor.evaluate(source, spec.train.eval_tokens);
        const double seconds = ms_between(e0, Clock::now()) / 1e3;
        if (recorder.owns_run()) recorder.evaluation({step + 1, e.loss, e.tokens, seconds});
        out.last_validation_loss = e.loss;
        out.last_validation_step = step + 1;
        say(fmt::format("  eval  {:>5}/{}  validation loss {:.4f}  ({} tokens held out, {:.2f} s)", step + 1,
                        spec.train.steps, e.loss, e.tokens, seconds));
      }
    }
  } catch (const TrainingFailure& e) {
    out.failure = e.what();
  } catch (const receipts::StoreFileError& e) {
    out.failure = fmt::format("at step {}: {}", step, e.what());
    out.store_unwritable = true;
  } catch (const c10::OutOfMemoryError& e) {
    out.failure = out_of_memory_failure(posture, fmt::format("at step {}", step));
  } catch (const std::exception& e) {
    out.failure = fmt::format("at step {}: {}", step, e.what());
  }
  try {
    executor.drain();  // a step launched ahead of a step that failed: it ends before anything is torn down
  } catch (const std::exception& e) {
    if (!out.failure) out.failure = fmt::format("after step {}: {}", step, e.what());
  }
  out.launched_ahead = executor.launched_ahead();
  out.graph = executor.graph();
  try {  // after the last step: NCCL's communicators and the graph's memory exist by then
    take_device_memory(out, posture);
  } catch (const std::exception& e) {
    if (!out.failure) out.failure = fmt::format("after step {}: reading the device's memory: {}", step, e.what());
  }
  if (!out.failure) {
    try {
      executor.settle(/*whole=*/false);  // the last step's parameter all-gathers are not left in flight
    } catch (const std::exception& e) {
      out.failure = fmt::format("after step {}: {}", step, e.what());
    }
  }
  if (out.sharding) {  // known once trained
    out.sharding->staging_peak_bytes = executor.sync()->staging_peak_bytes();
    if (posture.experts) out.sharding->all_to_all_bytes = posture.experts->all_to_all_bytes();
  }
  tally.close();
  close_loop(out, recorder, group, step);
  return out;
}

// ---- 5b ----------------------------------------------------------------------------------------

namespace {
std::string outcome_key(int64_t rank) { return fmt::format("outcome/{}", rank); }

// A JSON series whose NaN entries were written as null.
std::vector<double> series(const nlohmann::json& j) {
  std::vector<double> out;
  for (const auto& v : j) out.push_back(v.is_null() ? NAN : v.get<double>());
  return out;
}

nlohmann::json series_json(const std::vector<double>& v) {
  nlohmann::json out = nlohmann::json::array();
  for (double x : v) out.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr));
  return out;
}

std::optional<double> finite_or_none(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }
}  // namespace

RunResult publish_rank_outcome(const RunPosture& posture, const TrainOutcome& outcome) {
  // The step rows are in the store already (train_loop); this is what rank 0 summarises.
  const nlohmann::json j = {{"failure", outcome.failure ? nlohmann::json(*outcome.failure) : nlohmann::json(nullptr)},
                            {"steady_ms", outcome.steady_ms},
                            {"comm_wait_ms", series_json(outcome.comm_wait_ms)},
                            {"comm_ms", series_json(outcome.comm_ms)},
                            {"all_reduce_ms", series_json(outcome.all_reduce_ms)},
                            {"reduce_scatter_ms", series_json(outcome.reduce_scatter_ms)},
                            {"all_gather_ms", series_json(outcome.all_gather_ms)},
                            {"all_to_all_ms", series_json(outcome.all_to_all_ms)},
                            {"peak_memory", outcome.peak_memory},
                            {"peak_reserved", outcome.peak_reserved},
                            {"outside_allocator", outcome.device_memory.outside_allocator_bytes},
                            {"warmup_steps", outcome.warmup_steps}};
  posture.group->publish(outcome_key(posture.group->rank()), j.dump());
  if (outcome.failure) return RunResult{0, "failed", *outcome.failure, outcome.store_unwritable ? 2 : 1};
  return RunResult{0, "ok", "", 0};
}

void record_rank_profile(receipts::RunRecorder& recorder, RunProfiler& profiler) {
  if (profiler.status_text().rfind("disabled", 0) == 0) return;
  try {
    profiler.record(recorder);
  } catch (const std::exception& e) {
    fmt::print(stderr, "ablate: rank {}: its profiling rows were not recorded: {}\n", recorder.rank(), e.what());
  }
}

namespace {

// What one rank reported: its step times and per-step collective timings (warm-up steps included).
struct RankSeries {
  std::vector<double> steady_ms, comm_wait_ms, comm_ms;
  int64_t peak_memory = 0, warmup_steps = 0;
  std::vector<double> all_reduce_ms, reduce_scatter_ms, all_gather_ms, all_to_all_ms;
  int64_t peak_reserved = 0, outside_allocator = 0;
};

// The median of a per-step series' finite steady entries.
std::optional<double> steady_median(const std::vector<double>& per_step, int64_t warmup_steps) {
  std::vector<double> v;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, warmup_steps)); i < per_step.size(); ++i)
    if (std::isfinite(per_step[i])) v.push_back(per_step[i]);
  return v.empty() ? std::nullopt : finite_or_none(median(v));
}

// Per step, how long each rank's collectives ran beyond the quickest rank's: under synchronous data
// parallel the rank that arrives last waits least, so the difference is the time a rank waited for
// the slowest. The collectives' own timing where the backend has it (NCCL), else the host wait (Gloo).
std::vector<std::optional<double>> collective_waits(const std::vector<RankSeries>& ranks) {
  const bool timed = std::all_of(ranks.begin(), ranks.end(), [](const RankSeries& r) {
    return std::any_of(r.comm_ms.begin(), r.comm_ms.end(), [](double v) { return std::isfinite(v); });
  });
  auto per_step = [&](const RankSeries& r) -> const std::vector<double>& { return timed ? r.comm_ms : r.comm_wait_ms; };
  size_t steps = SIZE_MAX;
  for (const auto& r : ranks) steps = std::min(steps, per_step(r).size());
  std::vector<std::vector<double>> waits(ranks.size());
  for (size_t i = 0; i < steps; ++i) {
    double quickest = INFINITY;
    for (const auto& r : ranks) quickest = std::min(quickest, per_step(r)[i]);
    for (size_t k = 0; k < ranks.size(); ++k) waits[k].push_back(per_step(ranks[k])[i] - quickest);
  }
  std::vector<std::optional<double>> out;
  for (size_t k = 0; k < ranks.size(); ++k) out.push_back(steady_median(waits[k], ranks[k].warmup_steps));
  return out;
}

// Rank 0, after its own loop: waits for every other rank's outcome (their step and profiling rows are
// in the run by then) and works out the job's distributed facts. A rank that failed fails the run.
struct JobOutcome {
  std::optional<receipts::DistributedFacts> facts;
  std::optional<std::string> failure;
};
JobOutcome collect_rank_outcomes(ProcessGroup& group, const TrainOutcome& own) {
  // (The layout is the same on every rank: rank 0's own stands for the job.)
  JobOutcome job;
  std::vector<RankSeries> ranks;
  for (int64_t r = 0; r < group.world_size(); ++r) {
    RankSeries s{own.steady_ms,     own.comm_wait_ms,  own.comm_ms,           own.peak_memory,
                 own.warmup_steps,  own.all_reduce_ms, own.reduce_scatter_ms, own.all_gather_ms,
                 own.all_to_all_ms, own.peak_reserved, own.device_memory.outside_allocator_bytes};
    if (r != 0) {
      const auto j = nlohmann::json::parse(group.fetch(outcome_key(r)));
      if (!j.at("failure").is_null() && !job.failure)
        job.failure = fmt::format("rank {} failed: {}", r, j.at("failure").get<std::string>());
      s = {j.at("steady_ms").get<std::vector<double>>(), series(j.at("comm_wait_ms")), series(j.at("comm_ms")),
           j.at("peak_memory").get<int64_t>(),          j.at("warmup_steps").get<int64_t>(),
           series(j.at("all_reduce_ms")),               series(j.at("reduce_scatter_ms")),
           series(j.at("all_gather_ms")),               series(j.at("all_to_all_ms")),
           j.at("peak_reserved").get<int64_t>(),        j.at("outside_allocator").get<int64_t>()};
    }
    ranks.push_back(std::move(s));
  }
  receipts::DistributedFacts d;
  d.world_size = group.world_size();
  d.backend = group.backend_name();
  d.launcher = group.world().launcher;
  const auto waits = collective_waits(ranks);
  double slowest = 0, fastest = INFINITY, largest_wait = -1;
  std::vector<double> comm_share, wait_share, step_ms_all;
  for (int64_t r = 0; r < group.world_size(); ++r) {
    const auto& s = ranks[static_cast<size_t>(r)];
    receipts::RankFacts f;
    f.rank = r;
    f.median_step_ms = s.steady_ms.empty() ? std::nullopt : finite_or_none(median(s.steady_ms));
    f.median_comm_ms = steady_median(s.comm_ms, s.warmup_steps);
    f.median_comm_wait_ms = steady_median(s.comm_wait_ms, s.warmup_steps);
    f.collective_wait_ms = waits[static_cast<size_t>(r)];
    f.peak_memory_bytes = s.peak_memory;
    if (own.peak_reserved > 0) {  // a CUDA job (every rank on the same kind of device)
      f.peak_reserved_bytes = s.peak_reserved;
      f.outside_allocator_bytes = s.outside_allocator;
    }
    f.median_all_reduce_ms = steady_median(s.all_reduce_ms, s.warmup_steps);
    f.median_reduce_scatter_ms = steady_median(s.reduce_scatter_ms, s.warmup_steps);
    f.median_all_gather_ms = steady_median(s.all_gather_ms, s.warmup_steps);
    f.median_all_to_all_ms = steady_median(s.all_to_all_ms, s.warmup_steps);
    if (f.median_step_ms && *f.median_step_ms > 0) {
      slowest = std::max(slowest, *f.median_step_ms);
      fastest = std::min(fastest, *f.median_step_ms);
      step_ms_all.push_back(*f.median_step_ms);
      if (f.median_comm_wait_ms) wait_share.push_back(*f.median_comm_wait_ms / *f.median_step_ms);
      if (f.median_comm_ms) comm_share.push_back(*f.median_comm_ms / *f.median_step_ms);
    }
    if (f.collective_wait_ms && *f.collective_wait_ms > largest_wait) largest_wait = *f.collective_wait_ms;
    d.per_rank.push_back(f);
  }
  if (fastest < INFINITY) d.step_time_ratio = slowest / fastest;
  if (!comm_share.empty()) d.comm_share = median(comm_share);
  if (!wait_share.empty()) d.comm_wait_share = median(wait_share);
  // The straggler is the rank the others waited for: the one whose collectives waited least.
  std::optional<double> least;
  for (const auto& f : d.per_rank)
    if (f.collective_wait_ms && (!least || *f.collective_wait_ms < *least)) least = f.collective_wait_ms, d.straggler_rank = f.rank;
  if (d.straggler_rank && largest_wait >= 0 && !step_ms_all.empty()) d.straggler_wait_share = largest_wait / median(step_ms_all);
  d.sharding = own.sharding;
  job.facts = d;
  return job;
}

// What the MoE router did over the run, from every rank's step rows (none without E blocks): slots the
// capacity factor dropped against the slots routed (tokens x top_k x E layers of the recorded steps).
std::optional<receipts::MoeFacts> moe_facts(receipts::Store& store, int64_t run_id, const model::ModelConfig& m) {
  const auto layers = static_cast<int64_t>(std::count(m.pattern.begin(), m.pattern.end(), 'E'));
  if (layers == 0) return std::nullopt;
  const auto row = store.query(
      "SELECT count(moe_dropped_slots) AS rows, coalesce(sum(moe_dropped_slots), 0) AS dropped FROM steps "
      "WHERE run_id = ?",
      {run_id})[0];
  const auto last = store.query(
      "SELECT moe_aux_loss FROM steps WHERE run_id = ? AND rank = 0 AND moe_aux_loss IS NOT NULL ORDER BY step DESC "
      "LIMIT 1",
      {run_id});
  receipts::MoeFacts f;
  f.e_layers = layers;
  f.top_k = m.moe.top_k;
  f.capacity_factor = m.moe.capacity_factor;
  f.routed_slots = row["rows"].get<int64_t>() * m.batch_size * m.seq_len * m.moe.top_k * layers;
  f.dropped_slots = row["dropped"].get<int64_t>();
  if (f.routed_slots > 0) f.drop_rate = static_cast<double>(f.dropped_slots) / static_cast<double>(f.routed_slots);
  if (!last.empty()) f.final_aux_loss = last[0]["moe_aux_loss"].get<double>();
  return f;
}

}  // namespace

// ---- 6 -----------------------------------------------------------------------------------------


receipts::RunFacts run_facts(const ExperimentSpec& spec, const RunPosture& posture, const ModelState& state,
                             const data::DataSource& source, const TrainOutcome& outcome) {
  receipts::RunFacts f;
  const auto counts = model::parameter_count(spec.model);
  const double train_flops = model::training_flops_per_token(spec.model);
  f.final_loss = outcome.last_loss;
  f.final_validation_loss = outcome.last_validation_loss;
  f.final_validation_step = outcome.last_validation_step;
  f.first_step_ms = outcome.first_step_ms;
  f.warmup_steps = outcome.warmup_steps;
  f.steady_steps = static_cast<int64_t>(outcome.steady_ms.size());
  f.window_steps_excluded = outcome.window_steps_excluded;
  f.parameters = counts.total;
  f.active_parameters = counts.active_per_token;
  f.training_flops_per_token = train_flops;
  f.tokens_per_step = spec.model.batch_size * spec.model.seq_len * spec.distributed.nproc;  // the job's
  f.start_step = state.start_step;
  f.resumed_from = state.resumed_from;
  f.checkpoints_skipped = state.checkpoints_skipped;
  f.peak_memory_kind = posture.device.is_cuda() ? "cuda allocator allocated peak" : "process RSS";
  f.data = data::to_json(source.description());
  f.cuda_graphs = outcome.capture;
  if (f.cuda_graphs->eligible && f.cuda_graphs->outcome == receipts::CaptureOutcome::not_reached) {
    f.cuda_graphs->capture_step = state.start_step + kGraphWarmupEagerSteps;
    f.cuda_graphs->reason = fmt::format("eligible, but the run ended before its capture step {} ({} eager warm-up steps "
                                        "come first); the step ran eager: raise train.steps",
                                        *f.cuda_graphs->capture_step, kGraphWarmupEagerSteps);
  }
  receipts::ModelFacts m;
  m.config = spec.model.name;
  m.overrides = spec.overrides;
  m.config_overridden = spec.model_overridden();
  m.pattern = spec.model.pattern;
  m.d_model = spec.model.d_model;
  m.layers = static_cast<int64_t>(spec.model.pattern.size());
  m.seq_len = spec.model.seq_len;
  m.batch_size = spec.model.batch_size;
  m.parameters = counts.total;
  m.active_parameters = counts.active_per_token;
  m.training_flops_per_token = train_flops;
  f.model = m;
  receipts::PrecisionFacts p;
  p.dtype = posture.bf16 ? "bf16-autocast" : "fp32";
  p.flops_version = model::kFlopsVersion;
  const auto runs_fp8 = [&](const char* seam) {
    const auto* row = kernels::find_backend(seam, posture.dispatcher->chosen(seam));
    return row != nullptr && row->fp8_gemms;
  };
  p.fp8_flops_per_token =
      model::training_flops_by_precision(
          spec.model, {.projections = runs_fp8("dense_gemm"), .head = runs_fp8("loss"), .experts = runs_fp8("moe_dispatch")})
          .fp8;
  if (posture.device.is_cuda()) {
    const std::string gpu = device_fingerprint()["gpu_model"];
    p.mfu_peak_flops = dense_bf16_peak_flops(gpu);
    if (*p.fp8_flops_per_token > 0) p.mfu_fp8_peak_flops = dense_fp8_peak_flops(gpu);
    p.mfu_peak_source = !p.mfu_peak_flops ? fmt::format("no known dense peak for '{}': MFU is null", gpu)
                        : *p.fp8_flops_per_token == 0 ? fmt::format("{} dense bf16", gpu)
                        : p.mfu_fp8_peak_flops
                            ? fmt::format("{} dense bf16, and dense FP8 for the FP8 GEMMs' FLOPs", gpu)
                            : fmt::format("no known dense FP8 peak for '{}', whose FP8 GEMMs ran: MFU is null", gpu);
  } else {
    p.mfu_peak_source = "a CPU run: MFU is null";
  }
  f.precision = p;
  if (posture.device.is_cuda()) {
    receipts::MemoryFacts m;
    m.device_bytes = outcome.device_memory.device_bytes;
    if (posture.memory && posture.memory->limit_bytes() > 0) m.limit_bytes = posture.memory->limit_bytes();
    m.expandable_segments = outcome.device_memory.expandable_segments;
    m.peak_reserved_bytes = outcome.peak_reserved;
    m.outside_allocator_bytes = outcome.device_memory.outside_allocator_bytes;
    m.needed_bytes = m.peak_reserved_bytes + m.outside_allocator_bytes;
    f.memory = m;
  }
  return f;
}

void take_largest_rank_memory(receipts::RunFacts& facts) {
  if (!facts.memory || !facts.distributed) return;
  auto& m = *facts.memory;
  for (const auto& r : facts.distributed->per_rank) {
    if (!r.peak_reserved_bytes || !r.outside_allocator_bytes) continue;
    const int64_t needed = *r.peak_reserved_bytes + *r.outside_allocator_bytes;
    if (needed <= m.needed_bytes) continue;
    m.peak_reserved_bytes = *r.peak_reserved_bytes;
    m.outside_allocator_bytes = *r.outside_allocator_bytes;
    m.needed_bytes = needed;
  }
}

void add_exposed_communication(receipts::Store& store, int64_t run_id, receipts::DistributedFacts& d) {
  const auto rows = store.query(
      "SELECT * FROM profile_windows WHERE run_id = ? AND status = 'ok' AND window_ns > 0 "
      "AND exposed_communication_ns IS NOT NULL",
      {run_id});
  std::vector<double> shares;
  std::vector<receipts::CollectiveShares> by_kind;
  for (const auto& row : rows) {
    const auto rank = row["rank"].get<int64_t>();
    const auto it = std::find_if(d.per_rank.begin(), d.per_rank.end(),
                                 [&](const receipts::RankFacts& f) { return f.rank == rank; });
    if (it == d.per_rank.end()) continue;
    const double window = row["window_ns"].get<double>();
    it->exposed_comm_share = row["exposed_communication_ns"].get<double>() / window;
    shares.push_back(*it->exposed_comm_share);
    for (const auto& [kind, field] : receipts::kCollectiveShares) {
      const auto& exposed = row["exposed_" + std::string(kind) + "_ns"];
      if (exposed.is_null()) continue;  // a window recorded before the kinds were
      it->exposed_by_collective.*field = exposed.get<double>() / window;
    }
    by_kind.push_back(it->exposed_by_collective);
  }
  if (!shares.empty()) d.exposed_comm_share = median(shares);
  d.exposed_by_collective = receipts::median_by_collective(by_kind, &median);
}

RunResult fail_receipt(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                       const ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                       GoodputLedger& ledger, const TrainOutcome& outcome, const std::string& error) {
  recorder.goodput(ledger.totals());
  recorder.finish_failed(error, run_facts(spec, posture, state, source, outcome));
  Progress{opt.quiet}(fmt::format("run {} failed: {}", recorder.run_id(), error));
  return RunResult{recorder.run_id(), "failed", error, outcome.store_unwritable ? 2 : 1};
}

RunResult finalise_receipt(const ExperimentSpec& spec, const RunOptions& opt, const RunPosture& posture,
                           const ModelState& state, const data::DataSource& source, receipts::RunRecorder& recorder,
                           RunProfiler& profiler, GoodputLedger& ledger, const TrainOutcome& outcome) {
  const int64_t run_id = recorder.run_id();
  receipts::RunFacts facts = run_facts(spec, posture, state, source, outcome);
  if (posture.group) {
    JobOutcome job;
    try {
      job = collect_rank_outcomes(*posture.group, outcome);
    } catch (const std::exception& e) {
      job.failure = fmt::format("collecting the other ranks' results failed: {}", e.what());
    }
    if (job.failure) return fail_receipt(spec, opt, posture, state, source, recorder, ledger, outcome, *job.failure);
    facts.distributed = job.facts;
    take_largest_rank_memory(facts);
  }
  for (size_t i : slow_outliers(outcome.steady_ms)) facts.outlier_steps.push_back(outcome.steady_steps[i]);
  // Compile posture known only after the run: the first step (autotune, allocator growth, lazy init).
  recorder.env({{"compile.first_step_ms", fmt::format("{:.3f}", outcome.first_step_ms.value_or(NAN))},
                {"compile.warmup_steps", std::to_string(outcome.warmup_steps)},
                {"compile.launched_ahead_steps", std::to_string(outcome.launched_ahead)}});
  if (facts.cuda_graphs->outcome == receipts::CaptureOutcome::not_reached) recorder.capture(*facts.cuda_graphs);
  {
    GoodputLedger::Scope export_scope(ledger, Goodput::profiling);  // attribution, trace export, receipt rows
    facts.profile = profiler.record(recorder);
  }
  if (facts.distributed) add_exposed_communication(recorder.store(), run_id, *facts.distributed);
  recorder.goodput(ledger.totals());
  facts.moe = moe_facts(recorder.store(), run_id, spec.model);

  const int64_t world = spec.distributed.nproc;
  receipts::RunSummary summary;
  summary.steps = spec.train.steps - state.start_step;
  summary.flops_version = model::kFlopsVersion;
  if (!outcome.steady_ms.empty()) {
    summary.median_step_ms = median(outcome.steady_ms);
    summary.tokens_per_s = static_cast<double>(*facts.tokens_per_step) / (*summary.median_step_ms / 1000.0);
    // Per GPU: the job's tokens over its GPUs against one GPU's peak, the one facts.precision records.
    if (const auto& peak = facts.precision->mfu_peak_flops) {
      const double fp8 = facts.precision->fp8_flops_per_token.value_or(0.0);
      summary.mfu = flops_utilization(*facts.training_flops_per_token - fp8, fp8,
                                      *summary.tokens_per_s / static_cast<double>(world), *peak,
                                      facts.precision->mfu_fp8_peak_flops);
    }
  }
  summary.goodput_pct = 100.0 * ledger.goodput();
  summary.peak_memory_bytes = outcome.peak_memory;
  summary.facts = std::move(facts);
  recorder.finish_ok(summary);
  Progress{opt.quiet}(fmt::format(
      "run {} ok: median step {:.2f} ms, {:.0f} tokens/s, MFU {}, goodput {:.1f} %, peak memory {:.1f} MiB, final loss {:.4f}",
      run_id, summary.median_step_ms.value_or(NAN), summary.tokens_per_s.value_or(NAN),
      summary.mfu ? fmt::format("{:.1f} %", *summary.mfu * 100) : "-", *summary.goodput_pct,
      outcome.peak_memory / 1048576.0, outcome.last_loss.value_or(NAN)));
  return {run_id, "ok", "", 0};
}

}  // namespace ablate::harness
