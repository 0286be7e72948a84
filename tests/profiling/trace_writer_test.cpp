// tests/profiling/trace_writer_test.cpp: the Chrome/Perfetto trace of a synthetic log parses back
// (through the gzip file when zlib is built in) and has the fields Perfetto and Holistic Trace
// Analysis read: traceEvents, deviceProperties, distributedInfo.rank (where HTA's line regex finds it),
// X events with pid = device and tid = stream (or an overlap lane of it), ts/dur in whole microseconds
// that HTA's rounding leaves as they are and that still nest,
// args.correlation, launch -> kernel flows (s/f, bp "e"), ProfilerStep#N slices, memory bandwidth.
// Run: build/tests/profiling_tests --gtest_filter='TraceWriter*'
#include "profiling/trace_writer.h"
#include "base/remove_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

namespace ablate::profiling {
namespace {

ActivityLog sample_log() {
  ActivityLog log;
  log.scopes[1] = {"forward", 3, "A", "attention", "sdpa_flash"};
  log.steps = {{20, 1'000'000, 2'000'000}};
  log.api.push_back({"cudaLaunchKernel", false, 1'000'100, 1'000'600, 4242, 17, 55});
  log.gpu.push_back({GpuActivity::Kind::kernel, "flash_fwd_kernel", 1'002'000, 1'004'500, 0, 7, 55, 0});
  log.external_id[55] = 1;
  log.api.push_back({"cudaMemcpyAsync", false, 1'010'000, 1'010'400, 4242, 17, 56});
  log.gpu.push_back({GpuActivity::Kind::memcpy, "Memcpy HtoD", 1'011'000, 1'012'000, 0, 13, 56, 1 << 20});
  // A kernel whose launch record was dropped: no flow end may dangle for it.
  log.gpu.push_back({GpuActivity::Kind::kernel, "orphan_kernel", 1'020'000, 1'021'000, 0, 7, 57, 0});
  return log;
}

TEST(TraceWriter, HasTheLayoutPerfettoAndHtaRead) {
  TraceMeta meta;
  meta.rank = 3;
  meta.world_size = 8;
  meta.device_properties = nlohmann::json::array({{{"id", 0}, {"name", "NVIDIA H100 80GB HBM3"}}});
  const auto trace = chrome_trace(sample_log(), meta);
  EXPECT_EQ(trace["distributedInfo"]["rank"], 3);
  EXPECT_EQ(trace["distributedInfo"]["world_size"], 8);
  EXPECT_EQ(trace["deviceProperties"][0]["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(trace["baseTimeNanoseconds"], 1'000'000u);  // the step's begin, before the first launch
  ASSERT_TRUE(trace["traceEvents"].is_array());

  const nlohmann::json* kernel = nullptr;
  const nlohmann::json* launch = nullptr;
  int flow_starts = 0, flow_ends = 0;
  for (const auto& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    if (e["ph"] == "X" && e["name"] == "flash_fwd_kernel") kernel = &e;
    if (e["ph"] == "X" && e["name"] == "cudaLaunchKernel") launch = &e;
    if (e["ph"] == "s") ++flow_starts;
    if (e["ph"] == "f") {
      ++flow_ends;
      EXPECT_EQ(e["bp"], "e");
      EXPECT_NE(e["id"], 57) << "flow end for a launch without a record";
    }
  }
  ASSERT_NE(kernel, nullptr);
  ASSERT_NE(launch, nullptr);
  EXPECT_EQ((*kernel)["cat"], "kernel");
  EXPECT_EQ((*kernel)["pid"], 0);  // device
  EXPECT_EQ((*kernel)["tid"], 7);  // stream
  // Whole microseconds since the base: 2.0 us stays 2, the end at 4.5 us rounds to 5; the exact length
  // stays in args.
  EXPECT_TRUE((*kernel)["ts"].is_number_integer() && (*kernel)["dur"].is_number_integer()) << kernel->dump();
  EXPECT_EQ((*kernel)["ts"], 2);
  EXPECT_EQ((*kernel)["dur"], 3);
  EXPECT_EQ((*kernel)["args"]["duration (ns)"], 2'500);
  EXPECT_EQ((*kernel)["args"]["correlation"], 55);
  EXPECT_EQ((*kernel)["args"]["stream"], 7);
  EXPECT_EQ((*kernel)["args"]["External id"], 1);
  EXPECT_EQ((*kernel)["args"]["seam"], "attention");
  EXPECT_EQ((*kernel)["args"]["layer"], 3);
  EXPECT_EQ((*kernel)["args"]["family"], "attention");
  EXPECT_EQ((*kernel)["args"]["step"], 20);
  EXPECT_EQ((*launch)["cat"], "cuda_runtime");
  EXPECT_EQ((*launch)["pid"], 4242);
  EXPECT_EQ((*launch)["tid"], 17);
  EXPECT_EQ(flow_starts, 2);  // the kernel and the memcpy
  EXPECT_EQ(flow_ends, 2);
}

// A graph replay: one cudaGraphLaunch runs two kernels with its correlation. Each kernel names its
// graph node and its node's capture-time scope; the launch's flow (one start) ends at each kernel, as
// Kineto writes a replay, so every kernel is linked to the launch that ran it.
TEST(TraceWriter, GraphReplayKernelsNameTheirNodeAndEachEndTheLaunchFlow) {
  ActivityLog log;
  log.scopes[1] = {"forward", 3, "A", "attention", "sdpa_flash"};
  log.scopes[2] = {"optimizer", -1, "", "optimizer", "fused_adamw"};
  log.steps = {{40, 1'000'000, 2'000'000}};
  log.api.push_back({"cudaGraphLaunch", false, 1'000'100, 1'000'600, 4242, 17, 90});
  log.gpu.push_back({GpuActivity::Kind::kernel, "flash_fwd_kernel", 1'002'000, 1'004'500, 0, 7, 90, 0, 501});
  log.gpu.push_back({GpuActivity::Kind::kernel, "FusedAdamMathFunctor", 1'004'500, 1'005'000, 0, 7, 90, 0, 502});
  log.graph_node_scope = {{501, 1}, {502, 2}};
  const auto trace = chrome_trace(log, TraceMeta{});
  int flow_starts = 0;
  std::vector<std::pair<int64_t, int64_t>> flow_ends;  // (ts, id)
  std::map<std::string, nlohmann::json> kernels;
  std::vector<std::pair<int64_t, int64_t>> kernel_starts;  // (ts, correlation)
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s") ++flow_starts;
    if (e["ph"] == "f") flow_ends.push_back({e["ts"], e["id"]});
    if (e["ph"] == "X" && e["cat"] == "kernel") {
      kernels[e["name"]] = e["args"];
      kernel_starts.push_back({e["ts"], e["args"]["correlation"]});
    }
  }
  EXPECT_EQ(flow_starts, 1);
  EXPECT_EQ(flow_ends, kernel_starts) << "one flow end at each replayed kernel, with the launch's id";
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels["flash_fwd_kernel"]["graph node"], 501);
  EXPECT_EQ(kernels["flash_fwd_kernel"]["External id"], 1);
  EXPECT_EQ(kernels["flash_fwd_kernel"]["seam"], "attention");
  EXPECT_EQ(kernels["FusedAdamMathFunctor"]["External id"], 2);
  EXPECT_EQ(kernels["FusedAdamMathFunctor"]["seam"], "optimizer");
  EXPECT_EQ(kernels["FusedAdamMathFunctor"]["correlation"], 90);
}

TEST(TraceWriter, FileRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() / ("ablate-trace-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto trace = chrome_trace(sample_log(), TraceMeta{});
  const std::string path = write_trace_file(trace, (dir / "rank0.trace").string());
  EXPECT_EQ(path.substr(path.size() - (trace_compression_available() ? 8 : 5)),
            trace_compression_available() ? ".json.gz" : ".json");
  if (trace_compression_available()) {  // really gzip: the magic bytes
    std::ifstream in(path, std::ios::binary);
    unsigned char magic[2] = {0, 0};
    in.read(reinterpret_cast<char*>(magic), 2);
    EXPECT_EQ(magic[0], 0x1f);
    EXPECT_EQ(magic[1], 0x8b);
  }
  EXPECT_EQ(read_trace_file(path), trace);
  ablate::base::remove_tree(dir);
}


// HTA reads a file's rank with the regex '"rank":\s+(\d+)' over its lines, first match wins
// (hta/common/trace_file.py): `"rank":3` (no space) would make every file rank 0.
TEST(TraceWriter, TextPutsTheRankWhereHtaFindsItAndOneEventPerLine) {
  TraceMeta meta;
  meta.rank = 3;
  meta.world_size = 8;
  meta.trace_name = "ablate run 1 rank 3";
  const auto trace = chrome_trace(sample_log(), meta);
  const std::string text = trace_text(trace);
  EXPECT_EQ(nlohmann::json::parse(text), trace);
  std::istringstream lines(text);
  std::string line;
  const std::regex hta_rank(R"("rank":\s+(\d+))");
  std::smatch m;
  int event_lines = 0, first_rank = -1;
  while (std::getline(lines, line)) {
    if (first_rank < 0 && std::regex_search(line, m, hta_rank)) first_rank = std::stoi(m[1].str());
    if (line.rfind("{\"", 0) == 0) {  // an event: one compact object per line
      ++event_lines;
      const std::string one = line.back() == ',' ? line.substr(0, line.size() - 1) : line;
      EXPECT_TRUE(nlohmann::json::parse(one).contains("ph")) << line;
    }
  }
  EXPECT_EQ(first_rank, 3);
  EXPECT_EQ(event_lines, static_cast<int>(trace["traceEvents"].size()));
  // The header is indented, the events are not: the file stays about as small as a compact dump.
  EXPECT_LT(text.size(), trace.dump().size() + 1000);
  EXPECT_EQ(nlohmann::json::parse(trace_text({{"traceEvents", nlohmann::json::array()}, {"a", 1}})),
            nlohmann::json({{"traceEvents", nlohmann::json::array()}, {"a", 1}}));
}

// Slices on one (pid, tid) track must nest in Perfetto's JSON importer; a kernel that overlaps earlier
// work on its stream (programmatic dependent launch) goes on an overlap lane of that stream.
TEST(TraceWriter, KernelsOverlappingOnAStreamGetLanes) {
  ActivityLog log;
  uint32_t correlation = 1;
  auto kernel = [&](const char* name, uint64_t start_us, uint64_t end_us, uint32_t stream) {
    const uint64_t start = start_us * 1'000, end = end_us * 1'000;
    log.api.push_back({"cudaLaunchKernel", false, start - 50'000, start - 40'000, 42, 1, correlation});
    log.gpu.push_back({GpuActivity::Kind::kernel, name, start, end, 0, stream, correlation++, 0});
  };
  kernel("gemm", 1'000, 2'000, 7);
  kernel("reduce", 1'900, 2'100, 7);   // starts before gemm ends: lane 1
  kernel("inner", 1'950, 1'990, 7);    // inside both: lane 2 (a lane, not a child slice)
  kernel("next", 2'100, 2'300, 7);     // after both: back on the stream's own track
  kernel("late", 2'200, 2'250, 7);     // overlaps next: lane 1 is free again
  kernel("other", 1'000, 3'000, 9);    // another stream: overlaps nothing of its own
  const auto trace = chrome_trace(log, TraceMeta{});

  std::map<std::string, const nlohmann::json*> by_name;
  std::map<uint32_t, const nlohmann::json*> flow_end;
  std::map<uint32_t, std::string> thread_names;
  std::map<uint32_t, std::vector<std::pair<double, double>>> gpu_tracks;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["pid"] == 0) {
      by_name[e["name"]] = &e;
      gpu_tracks[e["tid"]].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    }
    if (e["ph"] == "f") flow_end[e["id"]] = &e;
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0) thread_names[e["tid"]] = e["args"]["name"];
  }
  auto tid = [&](const char* name) { return (*by_name.at(name))["tid"].get<uint32_t>(); };
  EXPECT_EQ(tid("gemm"), 7u);
  EXPECT_EQ(tid("next"), 7u);
  EXPECT_EQ(tid("other"), 9u);
  // Lanes take tids above every stream of the device (9), in the order they are first needed.
  EXPECT_EQ(tid("reduce"), 10u);
  EXPECT_EQ(tid("inner"), 11u);
  EXPECT_EQ(tid("late"), 10u);
  EXPECT_EQ(thread_names[7], "stream 7");
  EXPECT_EQ(thread_names[9], "stream 9");
  EXPECT_EQ(thread_names[10], "stream 7 (overlap lane 1)");
  EXPECT_EQ(thread_names[11], "stream 7 (overlap lane 2)");
  for (const char* name : {"reduce", "inner", "late"}) {
    const auto& e = *by_name.at(name);
    EXPECT_EQ(e["args"]["stream"], 7) << name;  // HTA reads the stream from args, not tid
    const auto& f = *flow_end.at(e["args"]["correlation"].get<uint32_t>());
    EXPECT_EQ(f["tid"], e["tid"]) << name << ": the flow ends on the kernel's own track";
    EXPECT_EQ(f["ts"], e["ts"]) << name;
  }
  for (auto& [track, slices] : gpu_tracks) {  // nothing overlaps on any GPU track now
    std::sort(slices.begin(), slices.end());
    for (size_t i = 1; i < slices.size(); ++i) EXPECT_LE(slices[i - 1].second, slices[i].first) << "tid " << track;
  }
}

// Both at once: when a replayed kernel overlaps the one before it (PDL inside the graph) it goes on a
// lane, and the launch's flow ends there, on the lane's track.
TEST(TraceWriter, OverlappingGraphKernelsGetALaneAndTheirFlowEndsThere) {
  ActivityLog log;
  log.api.push_back({"cudaGraphLaunch", false, 100'000, 200'000, 42, 1, 90});
  log.gpu.push_back({GpuActivity::Kind::kernel, "first", 1'000'000, 2'000'000, 0, 7, 90, 0, 501});
  log.gpu.push_back({GpuActivity::Kind::kernel, "second", 1'900'000, 2'500'000, 0, 7, 90, 0, 502});
  const auto trace = chrome_trace(log, TraceMeta{});
  std::map<std::string, uint32_t> tid;
  std::vector<const nlohmann::json*> flow_ends;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "kernel") tid[e["name"]] = e["tid"];
    if (e["ph"] == "f") flow_ends.push_back(&e);
  }
  EXPECT_EQ(tid["first"], 7u);
  EXPECT_EQ(tid["second"], 8u);
  ASSERT_EQ(flow_ends.size(), 2u);
  EXPECT_EQ((*flow_ends[0])["tid"], 7);
  EXPECT_EQ((*flow_ends[0])["ts"], 900);
  EXPECT_EQ((*flow_ends[1])["tid"], 8);
  EXPECT_EQ((*flow_ends[1])["ts"], 1'800);
}

// HTA 0.5.0's parser on a trace's times (hta/common/trace_parser.py round_down_time_stamps, on by
// default): ts rounded up, ts + dur rounded down, dur the difference.
double hta_dur(double ts, double dur) { return std::floor(ts + dur) - std::ceil(ts); }

// A busy stretch of sub-microsecond GPU work, as a graph replay or an elementwise tail makes it: kernels
// of 0.1-3 us, back to back or with gaps under a microsecond, some starting before the previous one
// ends (PDL), on two streams; launches as runtime calls with the driver call inside, inside step spans.
// Every written time must come through HTA's rounding unchanged (no negative duration), and every
// track must still nest when equal timestamps are read in file order, each flow event right after the
// slice it binds to.
TEST(TraceWriter, TimesSurviveHtaRoundingAndSlicesStillNest) {
  ActivityLog log;
  uint64_t rng = 12345;
  auto next = [&](uint64_t n) { rng = rng * 6364136223846793005ull + 1442695040888963407ull; return (rng >> 33) % n; };
  const uint64_t t0 = 1'700'000'000'000'000'000ull;
  uint64_t host = t0 + 137, gpu7 = t0 + 20'000, gpu9 = t0 + 20'000;
  uint32_t correlation = 1;
  log.steps.push_back({0, t0, 0});
  for (int i = 0; i < 400; ++i) {
    if (i == 200) {  // the step boundary lands on host time that is not a whole microsecond
      log.steps[0].end_ns = host;
      log.steps.push_back({1, host, 0});
      host += next(900);
    }
    const uint64_t call = 1'000 + next(4'000);
    log.api.push_back({"cudaLaunchKernel", false, host, host + call, 42, 1, correlation});
    log.api.push_back({"cuLaunchKernel", true, host + next(2) * next(400), host + call - next(300), 42, 1, correlation});
    auto& gpu = next(4) == 0 ? gpu9 : gpu7;
    const uint64_t start = next(5) == 0 && gpu > t0 + 20'000 ? gpu - 1 - next(300) : gpu + next(3) * next(700);
    const uint64_t end = start + 100 + next(next(3) == 0 ? 3'000 : 900);
    log.gpu.push_back({GpuActivity::Kind::kernel, "elementwise_kernel", start, end, 0, &gpu == &gpu9 ? 9u : 7u,
                       correlation++, 0});
    gpu = std::max(gpu, end);
    host += call + 200 + next(2'000);
  }
  log.steps.back().end_ns = host;
  const auto trace = chrome_trace(log, TraceMeta{});

  int sub_us = 0, kineto_negative = 0, slices = 0;
  for (const auto& a : log.gpu) {
    sub_us += a.duration_ns() < 1'000;
    // The same event with Kineto's times, nanosecond digits since the base: what HTA makes of it.
    const double ts = static_cast<double>(a.start_ns - trace["baseTimeNanoseconds"].get<uint64_t>()) / 1000.0;
    kineto_negative += hta_dur(ts, static_cast<double>(a.duration_ns()) / 1000.0) < 0;
  }
  EXPECT_GT(sub_us, 100);
  EXPECT_GT(kineto_negative, 10) << "the sample must hold events HTA's rounding turns negative";

  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> open;  // track -> ends of the open slices
  std::map<std::pair<int64_t, int64_t>, int64_t> last_ts;            // track -> latest start taken
  const nlohmann::json* previous_slice = nullptr;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s" || e["ph"] == "f") {
      ASSERT_NE(previous_slice, nullptr) << e.dump();
      EXPECT_EQ(e["pid"], (*previous_slice)["pid"]) << "a flow event follows the slice it binds to: " << e.dump();
      EXPECT_EQ(e["tid"], (*previous_slice)["tid"]) << e.dump();
      EXPECT_EQ(e["ts"], (*previous_slice)["ts"]) << e.dump();
      continue;
    }
    if (e["ph"] != "X") continue;
    ++slices;
    previous_slice = &e;
    ASSERT_TRUE(e["ts"].is_number_integer() && e["dur"].is_number_integer()) << e.dump();
    const int64_t ts = e["ts"], dur = e["dur"];
    ASSERT_GE(dur, 0) << e.dump();
    EXPECT_EQ(hta_dur(static_cast<double>(ts), static_cast<double>(dur)), static_cast<double>(dur)) << e.dump();
    const std::pair<int64_t, int64_t> track{e["pid"], e["tid"]};
    auto& last = last_ts.try_emplace(track, ts).first->second;
    EXPECT_GE(ts, last) << "slices of a track in start order: " << e.dump();
    last = ts;
    auto& stack = open[track];
    while (!stack.empty() && stack.back() <= ts) stack.pop_back();
    if (!stack.empty()) {
      EXPECT_LE(ts + dur, stack.back()) << "does not nest in the slice open on its track: " << e.dump();
    }
    stack.push_back(ts + dur);
  }
  EXPECT_EQ(slices, static_cast<int>(log.gpu.size() + log.api.size() + log.steps.size()));
}

// HTA numbers iterations by ProfilerStep#N slices (cat user_annotation) holding the host events
// (hta/common/trace.py add_iteration); they go on the thread that starts the steps.
TEST(TraceWriter, StepSpansBecomeProfilerStepSlicesOnTheTrainingThread) {
  ActivityLog log;
  log.steps = {{20, 10'000, 20'000}, {21, 20'500, 30'000}, {22, 30'500, 0}};  // 22: a window cut short
  uint32_t correlation = 1;
  auto call = [&](uint32_t thread, uint64_t at) {
    log.api.push_back({"cudaLaunchKernel", false, at, at + 100, 42, thread, correlation});
    log.gpu.push_back({GpuActivity::Kind::kernel, "k", at + 500, at + 600, 0, 7, correlation++, 0});
  };
  // Thread 1 starts each step; the autograd thread 2 makes more calls.
  for (uint64_t step_begin : {10'000u, 20'500u}) {
    call(1, step_begin + 100);
    for (uint64_t i = 0; i < 5; ++i) call(2, step_begin + 1'000 + i * 1'000);
  }
  const auto trace = chrome_trace(log, TraceMeta{});
  EXPECT_EQ(trace["baseTimeNanoseconds"], 10'000u);
  std::vector<const nlohmann::json*> steps;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "user_annotation") steps.push_back(&e);
  ASSERT_EQ(steps.size(), 2u);  // the unclosed span is left out
  EXPECT_EQ((*steps[0])["name"], "ProfilerStep#20");
  EXPECT_EQ((*steps[1])["name"], "ProfilerStep#21");
  for (const auto* s : steps) {
    EXPECT_EQ((*s)["pid"], 42);
    EXPECT_EQ((*s)["tid"], 1);
  }
  EXPECT_EQ((*steps[0])["ts"], 0);
  EXPECT_EQ((*steps[0])["dur"], 10);
  EXPECT_EQ((*steps[1])["ts"], 11);  // 10.5 us rounds to 11, the end at 20 us stays
  EXPECT_EQ((*steps[1])["dur"], 9);

  ActivityLog no_calls;  // no host thread to put them on
  no_calls.steps = {{0, 100, 200}};
  no_calls.gpu.push_back({GpuActivity::Kind::kernel, "k", 150, 160, 0, 7, 1, 0});
  const auto without_calls = chrome_trace(no_calls, TraceMeta{});
  for (const auto& e : without_calls["traceEvents"]) EXPECT_NE(e["name"], "ProfilerStep#0");
}

// Kineto's arg, which HTA's memory bandwidth analyses read (hta/configs/default_event_args.py).
TEST(TraceWriter, MemcpyAndMemsetCarryTheirBandwidth) {
  ActivityLog log;
  log.gpu.push_back({GpuActivity::Kind::memcpy, "Memcpy HtoD", 1'000, 2'000, 0, 7, 1, 1 << 20});
  log.gpu.push_back({GpuActivity::Kind::memset, "Memset", 3'000, 3'000, 0, 7, 2, 64});  // no time: no bandwidth
  log.gpu.push_back({GpuActivity::Kind::kernel, "k", 4'000, 5'000, 0, 7, 3, 0});
  std::map<std::string, nlohmann::json> args;
  const auto trace = chrome_trace(log, TraceMeta{});
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") args[e["name"]] = e["args"];
  EXPECT_DOUBLE_EQ(args["Memcpy HtoD"]["memory bandwidth (GB/s)"].get<double>(), 1048.576);  // bytes / ns
  EXPECT_EQ(args["Memcpy HtoD"]["bytes"], 1 << 20);
  EXPECT_FALSE(args["Memset"].contains("memory bandwidth (GB/s)"));
  EXPECT_FALSE(args["k"].contains("memory bandwidth (GB/s)"));
}

}  // namespace
}  // namespace ablate::profiling
