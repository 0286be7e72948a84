// receipts/store_bench.cpp: Google Benchmark of the receipt store on a temp file (WAL on, as in use):
//   BM_AppendSteps/N  - step rows written in batches of N (one transaction per batch); rows/s counter.
//                       Target: >= 100,000 rows/s on a 2-core machine for batches >= 100.
//   BM_RunJson        - a full run (2,000 steps, backends, catalog, goodput, memory, kernels,
//                       artifacts, annotations) read back with run_json.
//   BM_ListRuns       - list_runs with a tag filter over 1,000 runs.
//   BM_StepBuffer/S   - the runner's per-step cost of StepBuffer::add (64 rows or 2 s, whichever first)
//                       for steps of S ms on a simulated clock: S = 1 writes by count (one transaction per
//                       64 steps), S = 500 by time (one per 4 steps), S = 3000 one per step. The time per
//                       iteration is the cost per step; divided by S ms it is the overhead of keeping rows.
//   BM_CheckCanRecord/R - Store::check_can_record (header against length, each table's first page,
//                       read-only test) on a store of R runs x 2,000 steps: what `ablate run` pays once
//                       before its run row, the same at every size.
//   BM_Import/R/S     - Store::import_stores (`ablate import`) of a store of R ok runs x S steps (each with
//                       its spec, 30 env keys and a summary) into a new store, all of it: hashing and
//                       copying the source, the merge, closing the destination. Step rows/s counter.
//                       Target (issue 34): >= 100,000 step rows/s.
//   BM_AtScale/R/S/Q  - what `ablate runs` and `ablate show` ask of a store of R ok runs x S steps (a tenth
//                       of them tagged nightly): Q = 0 the newest 50 runs (`ablate runs`), 1 the newest 50
//                       nightly ones (`--tag nightly`), 2 the newest 50 since a date (`--since`), 3 one run
//                       read whole (`ablate show`). Target (issue 34): < 100 ms each at 100 k runs and 10 M
//                       step rows. The default store is 10 k x 100 (built in ~1 min); ABLATE_BENCH_SCALE=1
//                       adds the target's 100 k x 100 (several minutes to build, once per process).
//   BM_CliAtScale<EXE>/R/S/Q - the same stores through each executable ABLATE_BENCH_CLI names (paths joined
//                       by :, e.g. build/ablate:build/ablate-train), as a user runs it: the whole process (start, open, query, print to /dev/null, exit), exit
//                       0 required: Q = 0 `ablate --help` (start-up alone), 1 `ablate runs`, 2 `ablate show
//                       N` (the middle run). Target (issue 34): `runs` and `show` < 100 ms at 100 k runs.
//                       Only when ABLATE_BENCH_CLI is set: this folder's benchmarks build no executable.
// Build and run: ninja -C build-receipts store_bench && build-receipts/bench/store_bench
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "receipts/step_buffer.h"
#include "receipts/store.h"
#include "base/temp_dir.h"

namespace ablate::receipts {
namespace {

RunStart bench_start(const std::string& name) {
  RunStart start;
  start.name = name;
  start.tags = {"bench", name};
  start.lane = "bench/1gpu";
  start.spec_json = R"({"model":{"pattern":"AMEMAMEM","d_model":1024},"train":{"steps":2000}})";
  for (int i = 0; i < 30; ++i) start.env[fmt::format("key{:02}", i)] = fmt::format("value {}", i);
  return start;
}

std::vector<StepRow> steps_from(std::int64_t first, std::int64_t count) {
  std::vector<StepRow> rows(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    StepRow& r = rows[static_cast<std::size_t>(i)];
    r.step = first + i;
    r.wall_ms = 100.0 + static_cast<double>(i % 7);
    r.tokens = 65536;
    r.loss = 3.0 + 1.0 / static_cast<double>(first + i + 1);
    r.grad_norm = 0.9;
    r.lr = 3e-4;
    r.mem_allocated_peak = std::int64_t{40} << 30;
    r.mem_reserved_peak = std::int64_t{48} << 30;
    r.rss_bytes = std::int64_t{12} << 30;
    r.data_wait_ms = 0.1;
  }
  return rows;
}

void BM_AppendSteps(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  base::TempDir dir("ablate-store-bench");
  auto store = Store::open(dir.file("receipts.db"));
  const auto run_id = store.begin_run(bench_start("append"));
  std::int64_t next = 0;
  for (auto _ : state) {
    state.PauseTiming();  // building the rows is the runner's cost, not the store's
    auto rows = steps_from(next, batch);
    state.ResumeTiming();
    store.append_steps(run_id, rows);
    next += batch;
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(next), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(next);
}
BENCHMARK(BM_AppendSteps)->Arg(1)->Arg(100)->Arg(1000)->Arg(10000)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The summary of a finished run of `steps` steps: what makes it evidence.
RunSummary bench_summary(std::int64_t steps) {
  RunSummary summary;
  summary.steps = steps;
  summary.median_step_ms = 103;
  summary.tokens_per_s = 636000;
  summary.goodput_pct = 91;
  summary.peak_memory_bytes = std::int64_t{48} << 30;
  return summary;
}

// A run shaped like a real one: 2,000 steps and every other kind of receipt.
std::int64_t write_full_run(Store& store, const std::string& dir) {
  const auto id = store.begin_run(bench_start("full"));
  store.append_steps(id, steps_from(0, 2000));
  std::vector<BackendRow> backends;
  std::vector<CatalogRow> catalog;
  for (const char* seam :
       {"attention", "rope", "residual_norm", "swiglu", "moe_dispatch", "ssm_scan", "recurrent_scan", "loss"}) {
    backends.push_back({seam, "fused", "fused", "fused", "", false});
    catalog.push_back({seam, "fused", "keep", "reference", {fmt::format("{}_fused*", seam)}});
    catalog.push_back({seam, "reference", "reference", std::nullopt, {}});
  }
  store.record_backends(id, backends);
  store.record_catalog(id, catalog);
  std::map<std::string, double> goodput;
  for (const auto& category : goodput_categories()) goodput[category] = 1.5;
  store.record_goodput(id, goodput);
  std::vector<MemoryRow> memory;
  for (std::int64_t step = 0; step < 2000; step += 10) {
    for (const char* phase : {"forward", "backward", "optimizer"})
      memory.push_back({step, 0, phase, 1, 2, 3, 0, 0, 0.1});
  }
  store.record_memory(id, memory);
  std::vector<KernelRow> kernels;
  for (int k = 0; k < 200; ++k) kernels.push_back({fmt::format("kernel_{}", k), "gemm", "swiglu", 0, 100, 100000 + k});
  store.record_kernels(id, kernels);
  for (int a = 0; a < 3; ++a) {
    const std::string path = fmt::format("{}/artifact{}.json", dir, a);
    std::ofstream(path) << std::string(4096, 'x');
    store.add_artifact(id, "trace", path);
  }
  store.finish_run(id, RunStatus::ok, "", bench_summary(2000));
  store.annotate(id, "benchmark run");
  store.annotate(id, "second note");
  return id;
}

void BM_RunJson(benchmark::State& state) {
  base::TempDir dir("ablate-store-bench");
  auto store = Store::open(dir.file("receipts.db"));
  const auto id = write_full_run(store, dir.file(""));
  std::size_t steps = 0;
  for (auto _ : state) {
    const nlohmann::json doc = store.run_json(id);
    steps = doc["steps"].size();
    benchmark::DoNotOptimize(doc);
  }
  if (steps != 2000) state.SkipWithError("run_json did not return the 2,000 steps");
  state.counters["runs/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * steps), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RunJson)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ListRuns(benchmark::State& state) {
  base::TempDir dir("ablate-store-bench");
  auto store = Store::open(dir.file("receipts.db"));
  for (int i = 0; i < 1000; ++i) {
    RunStart start = bench_start(fmt::format("run-{}", i));
    start.tags = {i % 10 == 0 ? "nightly" : "adhoc"};
    store.finish_run(store.begin_run(start), RunStatus::ok, "", {});
  }
  RunFilter filter;
  filter.tag = "nightly";
  std::size_t found = 0;
  for (auto _ : state) {
    found = store.list_runs(filter).size();
    benchmark::DoNotOptimize(found);
  }
  if (found != 100) state.SkipWithError("expected 100 nightly runs");
  state.counters["queries/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ListRuns)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_StepBuffer(benchmark::State& state) {
  const auto step = std::chrono::milliseconds(state.range(0));
  base::TempDir dir("ablate-store-bench");
  auto store = Store::open(dir.file("receipts.db"));
  const auto run_id = store.begin_run(bench_start("buffer"));
  auto clock = StepBuffer::Clock::now();  // simulated: each step ends `step` after the previous one
  StepBuffer buffer(store, run_id, StepBuffer::kMaxRows, StepBuffer::kMaxSeconds, clock);
  std::int64_t next = 0, writes = 0;
  std::vector<StepRow> row(1);
  for (auto _ : state) {
    state.PauseTiming();
    row = steps_from(next++, 1);
    clock += step;
    state.ResumeTiming();
    writes += buffer.add(row[0], clock);
  }
  state.counters["steps/write"] = static_cast<double>(next) / static_cast<double>(std::max<std::int64_t>(writes, 1));
}
BENCHMARK(BM_StepBuffer)->Arg(1)->Arg(500)->Arg(3000)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CheckCanRecord(benchmark::State& state) {
  base::TempDir dir("ablate-store-bench");
  const std::string path = dir.file("receipts.db");
  {
    auto store = Store::open(path);
    for (std::int64_t r = 0; r < state.range(0); ++r) {
      const auto id = store.begin_run(bench_start("check"));
      store.append_steps(id, steps_from(0, 2000));
      store.finish_run(id, RunStatus::ok, "", {});
    }
  }
  auto store = Store::open(path);
  for (auto _ : state) store.check_can_record();
  const auto bytes = static_cast<double>(std::filesystem::file_size(path));
  state.counters["MB"] = bytes / 1e6;
}
BENCHMARK(BM_CheckCanRecord)->Arg(10)->Arg(100)->Arg(400)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Import(benchmark::State& state) {
  const std::int64_t runs = state.range(0), steps = state.range(1);
  base::TempDir dir("ablate-store-bench");
  const std::string source = dir.file("source.db");
  {
    auto store = Store::open(source);
    const auto rows = steps_from(0, steps);
    for (std::int64_t r = 0; r < runs; ++r) {
      const auto id = store.begin_run(bench_start("import"));
      store.append_steps(id, rows);
      store.finish_run(id, RunStatus::ok, "", bench_summary(steps));
    }
  }
  std::int64_t imported = 0, iteration = 0;
  for (auto _ : state) {
    const std::string dest = dir.file(fmt::format("dest{}.db", iteration++));
    imported += Store::import_stores(dest, {source})[0].step_rows_added;
    state.PauseTiming();
    std::filesystem::remove(dest);
    state.ResumeTiming();
  }
  if (imported != runs * steps * iteration) state.SkipWithError("the import did not add every step row");
  state.counters["step rows/s"] = benchmark::Counter(static_cast<double>(imported), benchmark::Counter::kIsRate);
  state.counters["source MB"] = static_cast<double>(std::filesystem::file_size(source)) / 1e6;
}
BENCHMARK(BM_Import)->Args({100, 1000})->Args({1000, 1000})->Unit(benchmark::kSecond)->UseRealTime();

// One store per size, built on first use and kept for the process (the cases only read it).
struct ScaleStore {
  base::TempDir dir{"ablate-store-bench-scale"};
  std::string path;
  std::int64_t middle_run = 0, since = 0;
};
ScaleStore& scale_store(std::int64_t runs, std::int64_t steps) {
  static std::map<std::pair<std::int64_t, std::int64_t>, std::unique_ptr<ScaleStore>> stores;
  auto& slot = stores[{runs, steps}];
  if (slot) return *slot;
  slot = std::make_unique<ScaleStore>();
  slot->path = slot->dir.file("receipts.db");
  auto store = Store::open(slot->path);
  const auto rows = steps_from(0, steps);
  for (std::int64_t r = 0; r < runs; ++r) {
    RunStart start = bench_start(fmt::format("run-{}", r));
    start.tags = {r % 10 == 0 ? "nightly" : "adhoc"};
    const auto id = store.begin_run(start);
    store.append_steps(id, rows);
    store.finish_run(id, RunStatus::ok, "", bench_summary(steps));
    if (r == runs / 2) slot->middle_run = id, slot->since = static_cast<std::int64_t>(base::unix_now());
  }
  return *slot;
}

void BM_AtScale(benchmark::State& state) {
  const std::int64_t runs = state.range(0), steps = state.range(1), query = state.range(2);
  auto& scale = scale_store(runs, steps);
  auto store = Store::open_existing(scale.path);
  RunFilter filter;
  filter.limit = 50;  // `ablate runs`' default
  if (query == 1) filter.tag = "nightly";
  if (query == 2) filter.since = std::to_string(scale.since);
  std::size_t found = 0;
  for (auto _ : state) {
    if (query == 3) {
      const nlohmann::json doc = store.run_json(scale.middle_run);
      found = doc["steps"].size();
    } else {
      found = store.list_runs(filter).size();
    }
    benchmark::DoNotOptimize(found);
  }
  if (found != static_cast<std::size_t>(query == 3 ? steps : 50)) state.SkipWithError("unexpected result size");
  state.counters["MB"] = static_cast<double>(std::filesystem::file_size(scale.path)) / 1e6;
}

// The exit status of `cli args...` with its output thrown away.
int run_quietly(const std::string& cli, std::vector<std::string> args) {
  args.insert(args.begin(), cli);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, cli.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void BM_CliAtScale(benchmark::State& state, const std::string& cli) {
  const std::int64_t runs = state.range(0), steps = state.range(1), query = state.range(2);
  auto& scale = scale_store(runs, steps);
  const std::vector<std::string> args =
      query == 0   ? std::vector<std::string>{"--help"}
      : query == 1 ? std::vector<std::string>{"runs", "--db", scale.path}
                   : std::vector<std::string>{"show", std::to_string(scale.middle_run), "--db", scale.path};
  for (auto _ : state) {
    if (const int rc = run_quietly(cli, args); rc != 0) {
      state.SkipWithError(fmt::format("{} {} exited with {}", cli, args[0], rc).c_str());
      break;
    }
  }
}

void register_scale_cases() {
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {{10000, 100}};
  if (const char* big = std::getenv("ABLATE_BENCH_SCALE"); big != nullptr && std::string(big) == "1")
    sizes.push_back({100000, 100});
  const char* cli = std::getenv("ABLATE_BENCH_CLI");
  for (const auto& [runs, steps] : sizes) {
    for (std::int64_t query = 0; query < 4; ++query)
      benchmark::RegisterBenchmark("BM_AtScale", BM_AtScale)
          ->Args({runs, steps, query})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    std::stringstream paths(cli ? cli : "");
    for (std::string path; std::getline(paths, path, ':');) {
      if (path.empty()) continue;
      const std::string name = fmt::format("BM_CliAtScale<{}>", std::filesystem::path(path).filename().string());
      for (std::int64_t query = 0; query < 3; ++query)
        benchmark::RegisterBenchmark(name.c_str(), BM_CliAtScale, path)
            ->Args({runs, steps, query})
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace ablate::receipts

int main(int argc, char** argv) {
  ablate::receipts::register_scale_cases();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
