// receipts/run_facts.h: the typed facts of one run, stored as `runs.summary_json` and read back by
// `show`, `report`, `compare`, `gate` and `export` through these types only. Each section has one
// to_json / from_json pair here, so a key written by the runner and read by the gate cannot drift
// apart (a misspelt key is a compile error, not a silent null).
//
// Layout: the training facts sit at the top level of the JSON object ("final_loss", "warmup_steps",
// ...), the sections under their own keys ("cuda_graphs", "moe", "distributed", "profile", "model",
// "precision", "data"), as receipts written before these types existed have them: old stores read
// back unchanged. A key absent or null reads as unknown (std::nullopt or the section left empty); a
// value of the wrong type is a StoreError naming the key. Keys this version does not know are kept in
// `unknown` and written back, so nothing stored is lost by reading it.
// Tests: tests/receipts/run_facts_test.cpp (receipts_tests).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

namespace ablate::receipts {

// How a requested whole-step CUDA graph ended up (docs/architecture.md "Compile posture").
enum class CaptureOutcome {
  not_requested,  // [compile] cuda_graphs = false
  refused,        // decided up front (CPU, a host sync in a seam, data parallel): the reason says which
  not_reached,    // eligible, but the run ended before its capture step
  failed,         // the capture was tried and failed; the run went on eager
  captured,       // captured and replayed
};
std::string_view to_string(CaptureOutcome outcome);
// Throws StoreError naming the valid outcomes. Both in records.cpp, with the other enum names.
CaptureOutcome parse_capture_outcome(std::string_view text);

struct CaptureFacts {
  bool requested = false;
  bool eligible = false;
  bool achieved = false;  // true exactly when outcome == captured
  CaptureOutcome outcome = CaptureOutcome::not_requested;
  std::optional<std::int64_t> capture_step{};  // the step it was captured (or tried) at
  std::optional<double> capture_ms{};          // capture + instantiation time
  std::string reason{};
};

// The MoE router over the run (models with E blocks).
struct MoeFacts {
  std::int64_t e_layers = 0;
  std::int64_t top_k = 0;
  double capacity_factor = 0;  // 0: dropless
  std::int64_t dropped_slots = 0;
  std::int64_t routed_slots = 0;
  std::optional<double> drop_rate{};  // dropped / routed; unknown when nothing was routed
  std::optional<double> final_aux_loss{};
};

// A share of the profile window by collective kind (receipts::kCollectiveKinds): exposed_<kind>_ns over
// window_ns, the time that collective ran with no other GPU work beside it. Absent without a traced
// window (profile_windows v9), and in receipts made before it was measured.
struct CollectiveShares {
  std::optional<double> all_reduce{}, reduce_scatter{}, all_gather{}, all_to_all{};
};
constexpr std::pair<const char*, std::optional<double> CollectiveShares::*> kCollectiveShares[] = {
    {"all_reduce", &CollectiveShares::all_reduce},
    {"reduce_scatter", &CollectiveShares::reduce_scatter},
    {"all_gather", &CollectiveShares::all_gather},
    {"all_to_all", &CollectiveShares::all_to_all}};

// One data-parallel rank's medians over its steady steps.
struct RankFacts {
  std::int64_t rank = 0;
  std::optional<double> median_step_ms{};
  std::optional<double> median_comm_ms{};       // its collectives' own (stream) time a step; NCCL only
  std::optional<double> median_comm_wait_ms{};  // host time blocked on them after backward
  std::optional<double> collective_wait_ms{};   // time this rank's collectives waited for the slowest rank
  std::int64_t peak_memory_bytes = 0;
  // median_comm_ms by kind (NCCL's timing; absent for a kind the stage does not run, on Gloo, and in
  // receipts made before they were recorded): the bucket all-reduces, or the gradient reduce-scatters
  // and the parameter all-gathers.
  std::optional<double> median_all_reduce_ms{}, median_reduce_scatter_ms{}, median_all_gather_ms{};
  std::optional<double> median_all_to_all_ms{};  // expert parallelism's token exchanges
  // From the rank's profile window (profile_windows, v8): exposed_communication_ns over window_ns, the
  // share of the traced GPU span in which communication ran with no other GPU work beside it. Absent
  // without a traced window, and in receipts made before it was measured.
  std::optional<double> exposed_comm_share{};
  CollectiveShares exposed_by_collective{};  // exposed_comm_share by collective kind (v9 windows)
  // Its GPU: the caching allocator's reserved peak, and what was in use beside it after the last step
  // (MemoryFacts); absent on the CPU and in receipts made before they were recorded.
  std::optional<std::int64_t> peak_reserved_bytes{}, outside_allocator_bytes{};
};

// How data parallel laid out and sharded the gradients and optimizer state (harness/shard_layout.h),
// rank 0's view (every rank's shard has the same length).
struct ShardingFacts {
  std::string stage{};                      // distributed.sharding: none | optimizer | gradients | full
  std::int64_t buckets = 0;
  std::int64_t shard_elements = 0;        // fp32 elements of a rank's shard, all buckets (the whole bucket unsharded)
  std::int64_t padding_elements = 0;      // elements of the buckets that belong to no parameter
  std::int64_t optimizer_state_bytes = 0; // the rank's AdamW moments (2 fp32 a parameter element it updates)
  // Gradient buffers the rank keeps between steps: every bucket, or its shards under "gradients";
  // 0 in receipts made before it was recorded.
  std::int64_t gradient_bytes = 0;
  // "gradients": the most bytes of transient full-size buckets one step held at once (0 otherwise).
  std::int64_t staging_peak_bytes = 0;
  // Bytes a rank's buckets carry through each kind of collective a step (0: not run, or not recorded).
  std::int64_t all_reduce_bytes = 0, reduce_scatter_bytes = 0, all_gather_bytes = 0;
  // Parameters the rank keeps between uses: the whole model, or its shard under "full"; with bf16 GEMM
  // weights their bf16 copies and fp32 master shards (0: not recorded).
  std::int64_t parameter_bytes = 0;
  // distributed.expert_parallel: ranks sharing one copy of the experts (1: every rank holds them all),
  // and the bytes a rank sent by all-to-all a step (forward and backward, its own rows included).
  std::int64_t expert_parallel = 1;
  std::int64_t all_to_all_bytes = 0;
  // distributed.expert_exchange_chunks: the chunks the expert exchange was pipelined in (1 in receipts made
  // before it existed, when it was one all-to-all each way).
  std::int64_t expert_exchange_chunks = 1;
  // distributed.reduce_dtype: what the gradients were summed over the ranks in (fp32 in receipts made
  // before it was recorded, when every reduction was fp32).
  std::string reduce_dtype = "fp32";
  // distributed.param_dtype: what the GEMM weights were kept and all-gathered in (fp32 in receipts made
  // before it was recorded, when every parameter was fp32).
  std::string param_dtype = "fp32";
};

struct DistributedFacts {
  std::int64_t world_size = 1;
  std::string backend{};   // nccl | gloo
  std::string launcher{};  // ablate launch | torchrun | slurm | ...
  std::vector<RankFacts> per_rank{};
  // Slowest rank's median step over the fastest's. Under synchronous data parallel every rank waits
  // for the slowest at each collective, so this is ~1 by construction: it is kept for the record, and
  // stragglers are judged by the collective waits below.
  std::optional<double> step_time_ratio{};
  // The straggler: the rank whose collectives waited least (the others waited for it), and the
  // largest collective wait a step any rank had for it, over the step time (median of the ranks).
  std::optional<std::int64_t> straggler_rank{};
  std::optional<double> straggler_wait_share{};
  std::optional<double> comm_share{};       // collectives' own time over the step (NCCL), median of ranks
  std::optional<double> comm_wait_share{};  // host wait for them over the step, median of ranks
  std::optional<double> exposed_comm_share{};  // RankFacts::exposed_comm_share, median of the ranks that have it
  CollectiveShares exposed_by_collective{};    // RankFacts::exposed_by_collective, each the median of the ranks
  std::optional<ShardingFacts> sharding{};  // absent in receipts made before sharding existed
};

// A backend whose kernels contradicted its chosen backend in the profiled window.
struct BackendMismatchFact {
  std::string seam{}, chosen{}, observed{}, note{};
};

// What the profiler did (harness/train/run_profiler.h); the rows themselves are in their tables.
struct ProfileFacts {
  std::string status{};  // ok | unavailable | off | disabled
  std::string reason{};
  std::optional<std::string> trace{};  // the trace artifact's path
  std::optional<std::int64_t> records{}, dropped_records{}, unmatched_scope_pops{}, graph_nodes_tagged{};
  std::optional<double> flush_s{};
  std::optional<std::string> cupti_detached_after_window{}, graph_node_tags{};
  std::vector<BackendMismatchFact> backend_mismatches{};
  std::string memory_by_phase{};
  std::optional<std::int64_t> window_start{}, window_end{};  // [start, end) steps
  std::optional<double> median_step_ms_inside_window{}, median_step_ms_outside_window{}, median_step_ms_around_window{};
  std::optional<double> overhead_pct{};
  std::string overhead_baseline{};
};

// The model as it ran: the named configuration it started from, and whether `--set` changed it.
struct ModelFacts {
  std::string config{};                   // model.config of the spec ("" for none)
  std::vector<std::string> overrides{};   // the run's --set arguments, in order ("" none)
  bool config_overridden = false;       // a --set changed a model.* key: the name no longer tells the shape
  std::string pattern{};
  std::int64_t d_model = 0;
  std::int64_t layers = 0;
  std::int64_t seq_len = 0;
  std::int64_t batch_size = 0;  // per rank
  std::optional<std::int64_t> parameters{}, active_parameters{};
  std::optional<double> training_flops_per_token{};
};

// The precision the run computed in, and what its MFU was measured against.
struct PrecisionFacts {
  std::string dtype{};  // bf16-autocast | fp32
  std::string flops_version{};
  std::optional<double> mfu_peak_flops{};  // the dense peak (FLOP/s) MFU divides by; unknown GPU: none
  std::string mfu_peak_source{};           // which GPU the peak is for, or why there is none
  // flops-v2: the part of training_flops_per_token that FP8 GEMMs ran (0 without them) and the FP8
  // peak it is divided by (none without FP8 GEMMs, or for a GPU without a known one).
  std::optional<double> fp8_flops_per_token{};
  std::optional<double> mfu_fp8_peak_flops{};
};

// A CUDA run's GPU memory: the cap it ran under (train.memory_limit_gib, harness/train/device_memory.h)
// and what it needed of a GPU. Data parallel: the largest of the ranks (each rank's own in RankFacts).
struct MemoryFacts {
  std::int64_t device_bytes = 0;              // the GPU's memory (rank 0's)
  std::optional<std::int64_t> limit_bytes{};    // the caching allocator's cap; none: the whole device
  std::int64_t peak_reserved_bytes = 0;       // the allocator's reserved peak over the steps
  std::int64_t outside_allocator_bytes = 0;   // in use beside the allocator after the last step (CUDA context, NCCL)
  std::int64_t needed_bytes = 0;              // reserved peak + beside it: what the run needed of a GPU
  bool expandable_segments = false;           // the allocator held expandable segments (train.expandable_segments)
};

struct RunFacts {
  // Training, at the top level of the JSON.
  std::optional<double> final_loss{};
  // The last evaluation on held-out data (train.eval_every; its rows are in `evaluations`): the loss
  // and the step it was taken after. Unknown without evaluation.
  std::optional<double> final_validation_loss{};
  std::optional<std::int64_t> final_validation_step{};
  std::optional<double> first_step_ms{};
  std::optional<std::int64_t> warmup_steps{};
  std::optional<std::int64_t> steady_steps{};
  std::optional<std::int64_t> window_steps_excluded{};  // profiled steps left out of the median
  std::vector<std::int64_t> outlier_steps{};
  std::optional<std::int64_t> parameters{}, active_parameters{};  // as "model", kept for older readers
  std::optional<double> training_flops_per_token{};
  std::optional<std::int64_t> tokens_per_step{};
  std::optional<std::int64_t> start_step{};
  std::string resumed_from{};
  std::vector<std::string> checkpoints_skipped{};  // newer checkpoints resume passed over: "step-N: why"
  std::string peak_memory_kind{};

  std::optional<CaptureFacts> cuda_graphs{};  // receipts older than the section have none
  std::optional<MoeFacts> moe{};
  std::optional<DistributedFacts> distributed{};
  std::optional<ProfileFacts> profile{};
  std::optional<ModelFacts> model{};
  std::optional<PrecisionFacts> precision{};
  std::optional<MemoryFacts> memory{};  // CUDA runs; receipts older than the section have none
  nlohmann::json data;     // data::to_json(DataDescription): the corpus or synthetic source (data/)
  nlohmann::json unknown;  // keys this version does not know, kept as read

  bool empty() const;  // nothing recorded (a run that ended before any fact was known)
  // Expert parallel at a capacity: the experts ran the kept slots alone (one process runs the dropped
  // ones at weight 0), while MFU counts every routed slot's FLOPs.
  bool experts_skip_dropped_slots() const;
};

nlohmann::json to_json(const RunFacts& facts);
// {all_reduce, reduce_scatter, all_gather, all_to_all: share or null}, as the facts write it.
nlohmann::json to_json(const CollectiveShares& shares);
// Each kind's `median` over the shares that know it; unknown where none does.
CollectiveShares median_by_collective(const std::vector<CollectiveShares>& shares,
                                      double (*median)(std::vector<double>));
// `what` names the object in errors ("run 12 summary").
RunFacts run_facts_from_json(const nlohmann::json& j, std::string_view what = "run summary");

}  // namespace ablate::receipts
