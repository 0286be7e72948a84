// spec/spec.h: the typed experiment specification (one section per component, torchtitan style),
// parsed from a TOML file plus `--set section.key=value` overrides, validated fail-closed, and
// rendered as canonical JSON whose sha256 is the experiment's identity.
// Tests: tests/spec/spec_test.cpp (and the bad files in tests/fixtures/specs/).
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace ablate::spec {

struct ExperimentSection {
  std::string name = "default";
  std::string description;
  std::vector<std::string> tags;
  int64_t seed = 0;
};

struct DataSection {
  std::string source = "corpus";  // "corpus" | "synthetic"
  std::string corpus_dir = "/usr/include";
  std::vector<std::string> extensions = {".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cu", ".cuh"};
  int64_t max_bytes = 0;          // 0: the whole corpus
  std::string cache_dir;          // "": $ABLATE_CACHE_DIR or ~/.cache/ablate/corpus
  std::string synthetic_distribution = "uniform";  // "uniform" | "zipf"
  double zipf_exponent = 1.1;
  int64_t prefetch = 4;
  // Share of the documents held out for validation (data/source.h held_out_document), used when
  // train.eval_every > 0; without evaluation every document trains.
  double validation_fraction = 0.05;
};

struct TrainSection {
  int64_t steps = 100;
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  int64_t lr_warmup_steps = 100;  // linear warm-up of the learning rate, then cosine
  double min_lr_ratio = 0.1;      // cosine ends at lr * min_lr_ratio
  double grad_clip = 1.0;         // 0: no clipping
  std::string device = "auto";    // "auto" | "cpu" | "cuda"
  std::string dtype = "auto";     // "auto" (bf16 autocast on CUDA, fp32 on CPU) | "fp32" | "bf16"
  int64_t warmup_steps = 10;      // steps before steady state: excluded from step-time statistics
  int64_t checkpoint_every = 0;   // 0: no periodic checkpoints
  std::string checkpoint_dir;     // "": <folder of the receipt store>/checkpoints/<experiment name>
  bool resume = false;            // continue from the latest intact checkpoint in checkpoint_dir
  int64_t keep_checkpoints = 3;   // after each save the newest this many stay (0: every one)
  int64_t log_every = 10;
  int64_t eval_every = 0;         // validation loss after every this many steps and after the last (0: none)
  int64_t eval_tokens = 65536;    // target tokens of each evaluation: the same held-out rows every time
  // The most the CUDA caching allocator may hold on each rank's GPU, in GiB (0: the whole device): a run
  // that needs more fails out of memory as it would on a smaller GPU (harness/train/device_memory.h).
  double memory_limit_gib = 0;
  // The caching allocator maps segments that grow in place (PyTorch's expandable_segments) instead of
  // fixed-size ones: memory freed between a step's phases is not lost to fragmentation.
  bool expandable_segments = false;
};

struct BackendsSection {
  std::map<std::string, std::string> requested;  // every seam; "reference" unless the spec says otherwise
  bool strict = false;                           // an unavailable requested backend is an error
};

struct CompileSection {
  bool cuda_graphs = false;
  // A replayed step is launched before the previous step's numbers are read, so the GPU does not wait
  // for the host between replays (harness/train/step_executor.h); no effect without a captured graph.
  bool launch_ahead = true;
  bool cudnn_benchmark = false;
  bool tf32 = true;
  bool deterministic = false;
};

struct ProfileSection {
  bool enabled = false;
  int64_t start_step = 20;
  int64_t steps = 5;
  std::string trace_dir;  // "": next to the database, runs/<run id>/
};

struct DistributedSection {
  int64_t nproc = 1;
  std::string backend = "nccl";
  int64_t bucket_mb = 25;
  // A collective or rendezvous that waits longer fails the job, naming the ranks behind (world.h).
  int64_t timeout_s = 300;
  // "none": every rank holds the optimizer state of every parameter, gradients all-reduced; "optimizer"
  // (ZeRO-1): each rank updates its shard of flat buckets (fp32 master weights and AdamW moments),
  // gradients reduce-scattered into it, parameters all-gathered after the step; "gradients" (ZeRO-2):
  // also keeps only its shard of the reduced gradients (the full-size buckets are transient); "full"
  // (ZeRO-3): also only its shard of the parameters, each layer gathered just before use and freed after
  // (harness/shard_layout.h, harness/train/data_parallel.h).
  std::string sharding = "none";
  // The precision gradients are summed over the ranks in: "fp32", or "bf16" (half the bytes of each
  // reduce-scatter; the sum is rounded to bf16, so a change of numerics judged by convergence) under a
  // sharded stage (harness/train/data_parallel.h).
  std::string reduce_dtype = "fp32";
  // The precision the model's GEMM weights are kept and all-gathered in under a sharded stage: "fp32",
  // or "bf16" (FSDP2's param_dtype, Megatron's distributed optimizer): each rank keeps the fp32 master of
  // its shard, the optimizer's update is rounded into a bf16 copy, which the gathers carry (half the
  // bytes) and the GEMMs read without a cast. Needs bf16 autocast, whose casts already round the GEMM
  // weights so: the forward is unchanged, the weight gradients are rounded to bf16 before the reduction
  // (harness/train/data_parallel.h). Every other parameter (norms, biases, router, embedding) stays fp32.
  std::string param_dtype = "fp32";
  // Expert parallelism: groups of this many ranks each hold one copy of every E layer's experts, E/N a
  // rank, and send tokens to their experts' ranks by all-to-all (kernels/moe_dispatch/expert_exchange.h,
  // harness/train/expert_parallel.h); divides nproc and model.moe.experts. 1: every rank holds them all.
  int64_t expert_parallel = 1;
  // Under expert parallelism: each rank's experts run in this many chunks, each chunk's rows travelling
  // while another chunk's GEMMs run (kernels/moe_dispatch/expert_exchange.h); at most the experts a rank
  // holds. 1: one all-to-all each way, the experts waiting for all their rows.
  int64_t expert_exchange_chunks = 1;
};

struct ExperimentSpec {
  ExperimentSection experiment;
  model::ModelConfig model;
  DataSection data;
  TrainSection train;
  BackendsSection backends;
  CompileSection compile;
  ProfileSection profile;
  DistributedSection distributed;

  std::string source_path;  // "<embedded defaults>" when not from a file
  std::string source_text;
  // The "section.key=value" overrides (`--set`) applied on top of the source, in order. Not part of the
  // spec's identity (the canonical JSON holds their effect), but recorded: a named configuration
  // changed by a --set no longer describes the model by its name.
  std::vector<std::string> overrides;
  bool model_overridden() const;  // an override set a model.* key
  // Every section.key the file or a --set gave (a default is not given). Not part of the identity: it
  // lets a launcher fill in what the user left to it, and only that.
  std::set<std::string> given_keys;
  bool given(const std::string& dotted) const { return given_keys.count(dotted) > 0; }
};

// One problem in a spec: where (file:line:column, or the --set that caused it) and what.
struct SpecIssue {
  std::string where;
  std::string message;
  std::string str() const { return where.empty() ? message : where + ": " + message; }
};

// Thrown by parse functions with every problem found (not only the first). Bad input: exit code 2.
class SpecError : public std::runtime_error {
 public:
  explicit SpecError(std::vector<SpecIssue> issues);
  const std::vector<SpecIssue>& issues() const { return issues_; }

 private:
  std::vector<SpecIssue> issues_;
};

// Parses and validates. `overrides` are "section.key=value" strings (values parsed as TOML, else
// taken as strings). Throws SpecError.
ExperimentSpec parse_spec_file(const std::string& path, const std::vector<std::string>& overrides = {});
ExperimentSpec parse_spec_string(const std::string& toml_text, const std::string& source_name,
                                 const std::vector<std::string>& overrides = {});
// The embedded defaults: `tiny` on CPU, `nam56r-small` when a GPU is present.
ExperimentSpec default_spec(bool gpu, const std::vector<std::string>& overrides = {});

// Canonical JSON (sorted keys, every field resolved) and its sha256: the experiment's identity.
nlohmann::json canonical_json(const ExperimentSpec& spec);
std::string spec_hash(const ExperimentSpec& spec);
// sha256 of the model section alone: two runs of the same model compare even if other sections differ.
std::string model_hash(const ExperimentSpec& spec);

}  // namespace ablate::spec

namespace ablate::harness {
// The harness (runner, CLI) reads the spec everywhere; its names stay visible there unqualified.
using namespace ::ablate::spec;
}  // namespace ablate::harness
