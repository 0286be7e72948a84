// tests/profiling/trace_writer_test.cpp: the Chrome/Perfetto trace of a synthetic log parses back
// (through the gzip file when zlib is built in) and has the fields Perfetto and Holistic Trace
// Analysis read: traceEvents, deviceProperties, distributedInfo.rank, X events with pid = device and
// tid = stream, ts/dur in microseconds, args.correlation, launch -> kernel flows (s/f, bp "e").
// Run: build/tests/profiling_tests --gtest_filter='TraceWriter*'
#include "profiling/trace_writer.h"
#include "receipts/remove_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

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
  EXPECT_EQ(trace["baseTimeNanoseconds"], 1'000'100u);
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
  EXPECT_DOUBLE_EQ((*kernel)["ts"].get<double>(), 1.9);   // (1'002'000 - 1'000'100) ns in us
  EXPECT_DOUBLE_EQ((*kernel)["dur"].get<double>(), 2.5);
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
// graph node and its node's capture-time scope; the launch gets one flow, ending at the first kernel.
TEST(TraceWriter, GraphReplayKernelsNameTheirNodeAndShareOneFlow) {
  ActivityLog log;
  log.scopes[1] = {"forward", 3, "A", "attention", "sdpa_flash"};
  log.scopes[2] = {"optimizer", -1, "", "optimizer", "fused_adamw"};
  log.steps = {{40, 1'000'000, 2'000'000}};
  log.api.push_back({"cudaGraphLaunch", false, 1'000'100, 1'000'600, 4242, 17, 90});
  log.gpu.push_back({GpuActivity::Kind::kernel, "flash_fwd_kernel", 1'002'000, 1'004'500, 0, 7, 90, 0, 501});
  log.gpu.push_back({GpuActivity::Kind::kernel, "FusedAdamMathFunctor", 1'004'500, 1'005'000, 0, 7, 90, 0, 502});
  log.graph_node_scope = {{501, 1}, {502, 2}};
  const auto trace = chrome_trace(log, TraceMeta{});
  int flow_starts = 0, flow_ends = 0;
  std::map<std::string, nlohmann::json> kernels;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "s") ++flow_starts;
    if (e["ph"] == "f") ++flow_ends;
    if (e["ph"] == "X" && e["cat"] == "kernel") kernels[e["name"]] = e["args"];
  }
  EXPECT_EQ(flow_starts, 1);
  EXPECT_EQ(flow_ends, 1);
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
  ablate::receipts::remove_tree(dir);
}

}  // namespace
}  // namespace ablate::profiling
