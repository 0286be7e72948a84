// profiling/trace_writer.cpp: see trace_writer.h. Event fields follow what Kineto writes (the PyTorch
// profiler's trace), because that is what Holistic Trace Analysis parses: it keeps events with both
// `dur` and `cat`, reads args `stream`, `correlation`, `device`, `External id`, and finds ranks in
// `distributedInfo.rank`.
// Tests: tests/profiling/trace_writer_test.cpp (profiling_tests).
#include "profiling/trace_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>

#if defined(ABLATE_HAVE_ZLIB)
#include <zlib.h>
#endif

#include "profiling/attribution.h"

namespace ablate::profiling {
namespace {

const char* category(GpuActivity::Kind kind) {
  switch (kind) {
    case GpuActivity::Kind::kernel:
      return "kernel";
    case GpuActivity::Kind::memcpy:
      return "gpu_memcpy";
    case GpuActivity::Kind::memset:
      return "gpu_memset";
  }
  return "kernel";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

nlohmann::json chrome_trace(const ActivityLog& log, const TraceMeta& meta) {
  uint64_t base = UINT64_MAX;
  for (const auto& a : log.gpu) base = std::min(base, a.start_ns);
  for (const auto& c : log.api) base = std::min(base, c.start_ns);
  if (base == UINT64_MAX) base = 0;
  // Microseconds since `base` with nanosecond digits: Kineto writes the same (pytorch/pytorch#122425).
  auto us = [base](uint64_t ns) { return static_cast<double>(ns - base) / 1000.0; };
  auto dur_us = [](uint64_t begin, uint64_t end) { return end > begin ? static_cast<double>(end - begin) / 1000.0 : 0.0; };

  nlohmann::json events = nlohmann::json::array();
  std::set<uint32_t> devices;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  std::set<uint32_t> launched;  // correlations that reached the GPU: only those get a flow
  for (const auto& r : attribute(log)) {
    const GpuActivity& a = *r.activity;
    devices.insert(a.device);
    streams.insert({a.device, a.stream});
    nlohmann::json args = {{"device", a.device}, {"stream", a.stream}, {"correlation", a.correlation},
                           {"family", r.family}, {"step", r.step}};
    if (const auto ext = external_id_of(log, a); ext != 0) args["External id"] = ext;
    if (a.graph_node != 0) args["graph node"] = a.graph_node;
    if (r.scope != nullptr) {
      args["phase"] = r.scope->phase;
      args["layer"] = r.scope->layer;
      args["block"] = r.scope->block;
      args["seam"] = r.scope->seam;
      args["backend"] = r.scope->backend;
    }
    if (a.kind != GpuActivity::Kind::kernel) args["bytes"] = a.bytes;
    events.push_back({{"ph", "X"},
                      {"cat", category(a.kind)},
                      {"name", a.name},
                      {"pid", a.device},
                      {"tid", a.stream},
                      {"ts", us(a.start_ns)},
                      {"dur", dur_us(a.start_ns, a.end_ns)},
                      {"args", args}});
    // One flow end per launch: a graph launch's kernels share its correlation, and a flow id ends once.
    if (!launched.insert(a.correlation).second) continue;
    events.push_back({{"ph", "f"},
                      {"id", a.correlation},
                      {"pid", a.device},
                      {"tid", a.stream},
                      {"ts", us(a.start_ns)},
                      {"cat", "ac2g"},
                      {"name", "ac2g"},
                      {"bp", "e"}});
  }
  std::set<std::pair<uint32_t, uint32_t>> threads;
  std::set<uint32_t> flow_started;
  for (const auto& c : log.api) {
    threads.insert({c.process, c.thread});
    nlohmann::json args = {{"correlation", c.correlation}};
    if (const auto ext = log.external_id.find(c.correlation); ext != log.external_id.end())
      args["External id"] = ext->second;
    events.push_back({{"ph", "X"},
                      {"cat", c.driver ? "cuda_driver" : "cuda_runtime"},
                      {"name", c.name},
                      {"pid", c.process},
                      {"tid", c.thread},
                      {"ts", us(c.start_ns)},
                      {"dur", dur_us(c.start_ns, c.end_ns)},
                      {"args", args}});
    // One flow start per launch: the outermost API record (runtime before driver when both exist).
    if (launched.count(c.correlation) && flow_started.insert(c.correlation).second) {
      events.push_back({{"ph", "s"},
                        {"id", c.correlation},
                        {"pid", c.process},
                        {"tid", c.thread},
                        {"ts", us(c.start_ns)},
                        {"cat", "ac2g"},
                        {"name", "ac2g"}});
    }
  }
  // Flow ends whose launch record is missing (dropped) would dangle: drop them.
  events.erase(std::remove_if(events.begin(), events.end(),
                              [&](const nlohmann::json& e) {
                                return e["ph"] == "f" && !flow_started.count(e["id"].get<uint32_t>());
                              }),
               events.end());
  // Track names, as Kineto writes them: GPU n / stream n, and the host threads.
  for (uint32_t d : devices)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", d}, {"tid", 0}, {"args", {{"name", "GPU " + std::to_string(d)}}}});
  for (const auto& [d, s] : streams)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", d}, {"tid", s}, {"args", {{"name", "stream " + std::to_string(s)}}}});
  for (const auto& [p, t] : threads)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", p}, {"tid", t}, {"args", {{"name", "thread " + std::to_string(t)}}}});

  nlohmann::json trace = {{"schemaVersion", 1},
                          {"deviceProperties", meta.device_properties},
                          {"distributedInfo",
                           {{"backend", meta.backend}, {"rank", meta.rank}, {"world_size", meta.world_size}}},
                          {"displayTimeUnit", "ms"},
                          {"baseTimeNanoseconds", base},
                          {"traceName", meta.trace_name},
                          {"traceEvents", std::move(events)}};
  return trace;
}

bool trace_compression_available() {
#if defined(ABLATE_HAVE_ZLIB)
  return true;
#else
  return false;
#endif
}

std::string write_trace_file(const nlohmann::json& trace, const std::string& path_stem) {
  const std::string text = trace.dump();
#if defined(ABLATE_HAVE_ZLIB)
  const std::string path = path_stem + ".json.gz";
  gzFile gz = gzopen(path.c_str(), "wb6");
  if (gz == nullptr) throw std::runtime_error("cannot write trace " + path);
  size_t written = 0;
  while (written < text.size()) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(text.size() - written, 1u << 30));
    const int n = gzwrite(gz, text.data() + written, chunk);
    if (n <= 0) {
      gzclose(gz);
      throw std::runtime_error("cannot write trace " + path + ": gzwrite failed");
    }
    written += static_cast<size_t>(n);
  }
  if (gzclose(gz) != Z_OK) throw std::runtime_error("cannot write trace " + path + ": gzclose failed");
  return path;
#else
  const std::string path = path_stem + ".json";
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write trace " + path);
  return path;
#endif
}

nlohmann::json read_trace_file(const std::string& path) {
  if (ends_with(path, ".gz")) {
#if defined(ABLATE_HAVE_ZLIB)
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) throw std::runtime_error("cannot read trace " + path);
    std::string text;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(gz, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    gzclose(gz);
    if (n < 0) throw std::runtime_error("cannot read trace " + path + ": not gzip");
    return nlohmann::json::parse(text);
#else
    throw std::runtime_error("cannot read " + path + ": built without zlib");
#endif
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read trace " + path);
  return nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

}  // namespace ablate::profiling
