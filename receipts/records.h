// receipts/records.h: plain value types exchanged with the receipt store (what the runner writes, what
// reports read). No SQLite here. Optional fields map to NULL columns. Timestamps are unix seconds.
// Tested through tests/receipts/store_test.cpp and query_test.cpp (receipts_tests).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "receipts/run_facts.h"

namespace ablate::receipts {

// Stored statuses are running/ok/failed/killed; `abandoned` is derived when reading: a `running` run
// whose heartbeat is older than the store's stale limit.
enum class RunStatus { running, ok, failed, killed, abandoned };
std::string_view to_string(RunStatus status);
// Throws StoreError naming the valid statuses.
RunStatus parse_run_status(std::string_view text);

// Goodput ledger categories (docs/architecture.md "Goodput ledger"); the schema accepts exactly these.
const std::vector<std::string>& goodput_categories();
// Catalog roles (docs/adding-a-backend.md); the schema accepts exactly these.
const std::vector<std::string>& backend_roles();

// Everything known when a run opens (docs/architecture.md "One run", steps 1-3).
struct RunStart {
  std::string name;
  std::vector<std::string> tags;
  std::string lane;         // model + topology + backends, for trends
  std::string spec_json;    // canonical JSON of the experiment spec (must parse)
  std::string spec_hash;    // empty: sha256 of spec_json
  std::string source_path;  // the TOML it came from, if any
  std::string source_text;
  std::map<std::string, std::string> env;  // environment fingerprint
  std::int64_t pid = 0;                    // 0: this process
  std::string host;                        // empty: this host's name
  std::optional<std::int64_t> matrix_id;   // set together with cell and repeat
  std::optional<std::string> cell;
  std::optional<std::int64_t> repeat;
};

// One dispatch seam's backend resolution (requested -> chosen, and what CUPTI observed).
struct BackendRow {
  std::string seam;
  std::string requested;
  std::string chosen;
  std::optional<std::string> observed;  // unknown until profiled
  std::string reason;                   // why chosen differs from requested, e.g. "no GPU, fell back"
  std::optional<bool> mismatch;         // observed disagrees with chosen
};

// The catalog as the run saw it, so reports know roles without LibTorch.
struct CatalogRow {
  std::string seam;
  std::string backend;
  std::string role;  // one of backend_roles()
  std::optional<std::string> fallback;
  std::vector<std::string> patterns;  // CUPTI kernel-name patterns
  bool changes_numerics = false;      // beyond reduction order (kernels/catalog.h); unknown before schema v6
};

// One evaluation of a run on held-out data (train.eval_every), written by rank 0.
struct EvaluationRow {
  std::int64_t step = 0;   // steps trained when evaluated
  double loss = 0;         // token-weighted mean cross-entropy; NaN is stored as NULL
  std::int64_t tokens = 0; // target tokens evaluated, over every rank
  double seconds = 0;
};

struct StepRow {
  std::int64_t step = 0;
  std::int64_t rank = 0;
  double wall_ms = 0;
  std::optional<std::int64_t> tokens;
  std::optional<double> loss;  // NaN is stored as NULL by SQLite
  std::optional<double> grad_norm;
  std::optional<double> lr;
  std::optional<std::int64_t> mem_allocated_peak;
  std::optional<std::int64_t> mem_reserved_peak;
  std::optional<std::int64_t> rss_bytes;
  std::optional<double> data_wait_ms;
  bool outlier = false;  // median + 3*MAD rule, decided by the harness
  // MoE router evidence (schema v4), unset for models without E blocks: the load-balancing loss alone
  // and the expert slots the capacity factor dropped in this rank's rows (0 when dropless).
  std::optional<double> moe_aux_loss;
  std::optional<std::int64_t> moe_dropped_slots;
};

struct MemoryRow {
  std::int64_t step = 0;
  std::int64_t rank = 0;
  std::string phase;  // e.g. forward, backward, optimizer
  std::optional<std::int64_t> allocated;
  std::optional<std::int64_t> reserved;
  std::optional<std::int64_t> active;
  std::optional<std::int64_t> alloc_retries;
  std::optional<std::int64_t> ooms;
  std::optional<double> fragmentation;
};

// Kernel time summed over a profiling window; repeated records of the same (rank, name) accumulate.
struct KernelRow {
  std::string name;
  std::string family;
  std::string seam;
  std::int64_t rank = 0;
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;
};

// What the profiler did for one rank (schema v3 `profile_windows`, v8 its communication columns): status
// ok, unavailable (reason: e.g. no CUDA device, CUPTI held by nsys/ncu) or off (--no-profile); the
// breakdown fields need status ok.
struct ProfileWindowRow {
  std::int64_t rank = 0;
  std::string status;  // ok | unavailable | off
  std::string reason;
  std::optional<std::int64_t> start_step, steps;
  std::optional<std::int64_t> records, dropped_records, buffers, buffers_refused;
  std::optional<std::int64_t> window_ns, compute_ns, non_compute_ns, idle_ns;
  // v8: union of the communication kernels, and the part of it no other GPU work ran beside.
  std::optional<std::int64_t> communication_ns, exposed_communication_ns;
  // v9: the same two by collective kind (profiling::Collective; NCCL's other kinds count in the totals
  // only), columns <kind>_ns and exposed_<kind>_ns.
  struct ByCollective {
    std::optional<std::int64_t> all_reduce, reduce_scatter, all_gather, all_to_all;
  };
  ByCollective collective_ns, exposed_collective_ns;
};

// The collective kinds of ProfileWindowRow::ByCollective, by column stem, in column order.
constexpr std::pair<const char*, std::optional<std::int64_t> ProfileWindowRow::ByCollective::*> kCollectiveKinds[] = {
    {"all_reduce", &ProfileWindowRow::ByCollective::all_reduce},
    {"reduce_scatter", &ProfileWindowRow::ByCollective::reduce_scatter},
    {"all_gather", &ProfileWindowRow::ByCollective::all_gather},
    {"all_to_all", &ProfileWindowRow::ByCollective::all_to_all}};

// GPU time of one profiled step along one dimension ("family" or "seam"; key '' = outside every seam).
struct ProfileTimeRow {
  std::int64_t rank = 0;
  std::int64_t step = 0;
  std::string dimension;
  std::string key;
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;
};

// One kernel name summed over the window per launch site (phase, layer, block, seam, backend).
struct KernelAttributionRow {
  std::int64_t rank = 0;
  std::string name;
  std::string phase;
  std::int64_t layer = -1;  // -1: outside the model's layers
  std::string block;        // pattern letter, "" outside a layer
  std::string seam;         // "" outside a seam
  std::string backend;
  std::string family;
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;
};

// A kernel that ran inside a seam, and the catalog backend whose patterns it matches ("" = none).
struct BackendEvidenceRow {
  std::string seam;
  std::string kernel;
  std::string matches;
  std::int64_t calls = 0;
  std::int64_t total_ns = 0;
};

struct ArtifactRow {
  std::string kind;
  std::string path;  // absolute
  std::string sha256;
  std::int64_t bytes = 0;
};

// The run-level result written by finish_run (docs/architecture.md "One run", step 7).
struct RunSummary {
  std::optional<std::int64_t> steps;
  std::optional<double> median_step_ms;
  std::optional<double> tokens_per_s;
  std::optional<double> mfu;
  std::optional<double> goodput_pct;
  std::optional<std::int64_t> peak_memory_bytes;
  std::string flops_version;
  RunFacts facts;  // everything else known about the run (receipts/run_facts.h), stored as summary_json
};

struct RunRow {
  std::int64_t id = 0;  // this store's number for the run
  std::string uid;      // 32 hex digits, the same in every store the run is imported into (schema v7)
  std::string name;
  RunStatus status = RunStatus::running;         // derived: may read `abandoned`
  RunStatus stored_status = RunStatus::running;  // as recorded
  std::optional<std::string> error;
  double started_at = 0;
  std::optional<double> ended_at;
  double heartbeat_at = 0;
  std::optional<std::int64_t> pid;
  std::string host;
  std::vector<std::string> tags;
  std::string lane;
  std::string spec_hash;
  std::optional<std::int64_t> matrix_id;
  std::optional<std::string> cell;
  std::optional<std::int64_t> repeat;
  RunSummary summary;
};

// docs/architecture.md: "Only ok runs with every required field are evidence": ok, a spec hash, steps > 0, and the
// median step time, tokens/s, goodput and peak memory present (MFU may be NULL).
bool is_evidence(const RunRow& run);

// Filters of list_runs; empty/unset fields do not filter.
struct RunFilter {
  std::string status;  // running | ok | failed | killed | abandoned
  std::string name;    // substring, or a glob when it contains * ? or [
  std::string tag;     // exact tag
  std::string lane;    // exact lane (model + topology + backends), for trends
  std::string since;   // unix seconds, ISO date/time (UTC), or an age such as 90m, 12h, 7d
  std::optional<std::int64_t> limit;
};

enum class Verdict { keep, drop, inconclusive };
std::string_view to_string(Verdict verdict);  // KEEP / DROP / INCONCLUSIVE
Verdict parse_verdict(std::string_view text);

// A keep/drop gate decision (docs/architecture.md "Keep/drop gate").
struct Decision {
  std::int64_t id = 0;  // assigned by the store
  std::string seam;
  std::string backend;
  Verdict verdict = Verdict::inconclusive;
  std::vector<std::int64_t> evidence_run_ids;
  std::optional<std::int64_t> matrix_id;
  std::string details;
  double decided_at = 0;  // assigned by the store
};

struct MatrixCell {
  std::string cell;
  std::int64_t repeat = 0;
  std::int64_t run_id = 0;
};

// What a matrix runner found when it went to take a (cell, repeat) pair (Store::claim_matrix_slot).
struct MatrixClaim {
  enum class Outcome {
    claimed,  // the pair is this runner's to run
    done,     // the matrix already has an `ok` run for it
    taken,    // another live runner holds it, or a live run is recording it
  };
  Outcome outcome = Outcome::claimed;
  std::string holder;  // done: "run 12"; taken: "runner 3 (pid 4242 on gpu-node-07)" or "run 12 (running)"
};

}  // namespace ablate::receipts
