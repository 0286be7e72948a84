// profiling/trace_writer.cpp: see trace_writer.h. Event fields follow what Kineto writes (the PyTorch
// profiler's trace), because that is what Holistic Trace Analysis parses: it keeps events with both
// `dur` and `cat`, reads args `stream`, `correlation`, `device`, `External id`, and finds ranks in
// `distributedInfo.rank`.
// Tests: tests/profiling/trace_writer_test.cpp (profiling_tests).
#include "profiling/trace_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
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

// Where a GPU activity is drawn: its stream's track (tid = stream), or, when it starts before earlier
// work on its stream has ended (programmatic dependent launch: a split-K reduce starts while its GEMM
// runs), an overlap lane of that stream. Perfetto's JSON importer needs the slices of one track to nest
// and drops the others, so overlapping kernels cannot share a track. Lanes get tids above every stream
// id of their device and a thread_name "stream N (overlap lane L)"; args.stream stays the real stream.
struct GpuTracks {
  struct Lane {
    uint32_t device, tid, stream, lane;
  };
  std::vector<uint32_t> tid;  // per activity of the log, in log order
  std::vector<Lane> lanes;    // lanes 1.. of every stream that needed them
};

// `spans`: each activity's [start, end) as written (whole microseconds), in log order: the lanes are
// laid out on the times the trace shows, so the written slices nest whatever the rounding merged.
GpuTracks gpu_tracks(const std::vector<GpuActivity>& gpu, const std::vector<std::pair<int64_t, int64_t>>& spans) {
  GpuTracks out;
  out.tid.resize(gpu.size());
  std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> by_stream;
  std::map<uint32_t, uint32_t> next_lane_tid;  // device -> the next free tid above its streams
  for (size_t i = 0; i < gpu.size(); ++i) {
    by_stream[{gpu[i].device, gpu[i].stream}].push_back(i);
    auto& next = next_lane_tid[gpu[i].device];
    next = std::max(next, gpu[i].stream + 1);
  }
  for (auto& [key, indices] : by_stream) {
    const auto [device, stream] = key;
    std::stable_sort(indices.begin(), indices.end(), [&](size_t a, size_t b) { return spans[a].first < spans[b].first; });
    std::vector<int64_t> lane_end;  // when the last activity of each lane ends
    std::vector<uint32_t> lane_tid;
    for (size_t i : indices) {
      const auto [start, end] = spans[i];
      size_t lane = 0;
      while (lane < lane_end.size() && lane_end[lane] > start) ++lane;
      if (lane == lane_end.size()) {
        lane_end.push_back(0);
        lane_tid.push_back(lane == 0 ? stream : next_lane_tid[device]++);
        if (lane > 0) out.lanes.push_back({device, lane_tid.back(), stream, static_cast<uint32_t>(lane)});
      }
      lane_end[lane] = end;
      out.tid[i] = lane_tid[lane];
    }
  }
  return out;
}

// The host thread the step markers go on: the one making the first API call of most step spans (the
// training loop's thread; LibTorch's autograd launches backward kernels from its own device thread).
std::optional<std::pair<uint32_t, uint32_t>> step_thread(const std::vector<StepSpan>& steps,
                                                         const std::vector<ApiCall>& api) {
  std::map<std::pair<uint32_t, uint32_t>, int> first_in_steps;
  for (const auto& s : steps) {
    const ApiCall* first = nullptr;
    for (const auto& c : api)
      if (c.start_ns >= s.begin_ns && c.start_ns <= s.end_ns && (first == nullptr || c.start_ns < first->start_ns)) first = &c;
    if (first != nullptr) ++first_in_steps[{first->process, first->thread}];
  }
  if (first_in_steps.empty()) return std::nullopt;
  return std::max_element(first_in_steps.begin(), first_in_steps.end(),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

}  // namespace

nlohmann::json chrome_trace(const ActivityLog& log, const TraceMeta& meta) {
  std::vector<StepSpan> steps;  // the spans that closed: a window cut short leaves end_ns 0
  for (const auto& s : log.steps)
    if (s.end_ns > s.begin_ns) steps.push_back(s);
  uint64_t base = UINT64_MAX;
  for (const auto& a : log.gpu) base = std::min(base, a.start_ns);
  for (const auto& c : log.api) base = std::min(base, c.start_ns);
  for (const auto& s : steps) base = std::min(base, s.begin_ns);
  if (base == UINT64_MAX) base = 0;
  // Whole microseconds since `base`, every start and end rounded to the nearest one by the same rule.
  // HTA's parser (0.5.0, hta/common/trace_parser.py round_down_time_stamps) rounds fractional times,
  // ts up and ts + dur down, which gives an event inside one microsecond a negative duration (Kineto's
  // times carry nanosecond digits and get the same); whole microseconds pass through it unchanged.
  // One monotone rule for both ends keeps every order between two times (a <= b stays a <= b), so
  // slices that nested or followed each other in nanoseconds still do; a sub-microsecond event may
  // shrink to dur 0 (its exact length is args "duration (ns)" on GPU work).
  auto us = [base](uint64_t ns) { return static_cast<int64_t>((ns - base + 500) / 1000); };
  auto span_us = [&](uint64_t begin, uint64_t end) { return std::pair{us(begin), us(std::max(begin, end))}; };

  // Every slice with the flow events bound to it, ordered by start and, at one start, longest first:
  // the trace event format gives events of equal timestamp no order but the file's (whole microseconds
  // make such ties common), so an enclosing slice comes before what it encloses, and a flow event right
  // after its slice binds to it in an importer that reads them so.
  struct Slice {
    nlohmann::json event;
    std::vector<nlohmann::json> flows;
    int64_t ts, dur;
  };
  std::vector<Slice> slices;
  auto add = [&](nlohmann::json event, std::pair<int64_t, int64_t> span) -> Slice& {
    event["ts"] = span.first;
    event["dur"] = span.second - span.first;
    slices.push_back({std::move(event), {}, span.first, span.second - span.first});
    return slices.back();
  };

  std::vector<std::pair<int64_t, int64_t>> gpu_spans;
  gpu_spans.reserve(log.gpu.size());
  for (const auto& a : log.gpu) gpu_spans.push_back(span_us(a.start_ns, a.end_ns));
  std::set<uint32_t> devices;
  std::set<std::pair<uint32_t, uint32_t>> streams;
  std::set<uint32_t> launched;  // correlations that reached the GPU: only those get a flow
  const GpuTracks tracks = gpu_tracks(log.gpu, gpu_spans);
  std::vector<size_t> gpu_slices;  // indices into `slices` of the GPU work, for their flow ends below
  for (const auto& r : attribute(log)) {
    const GpuActivity& a = *r.activity;
    const auto index = static_cast<size_t>(r.activity - log.gpu.data());
    const uint32_t tid = tracks.tid[index];
    devices.insert(a.device);
    streams.insert({a.device, a.stream});
    nlohmann::json args = {{"device", a.device}, {"stream", a.stream}, {"correlation", a.correlation},
                           {"family", r.family}, {"step", r.step}, {"duration (ns)", a.duration_ns()}};
    if (const auto ext = external_id_of(log, a); ext != 0) args["External id"] = ext;
    if (a.graph_node != 0) args["graph node"] = a.graph_node;
    if (r.scope != nullptr) {
      args["phase"] = r.scope->phase;
      args["layer"] = r.scope->layer;
      args["block"] = r.scope->block;
      args["seam"] = r.scope->seam;
      args["backend"] = r.scope->backend;
    }
    if (a.kind != GpuActivity::Kind::kernel) {
      args["bytes"] = a.bytes;
      // What Kineto writes and HTA's memory bandwidth analyses read: bytes per ns is GB/s.
      if (a.duration_ns() > 0)
        args["memory bandwidth (GB/s)"] = static_cast<double>(a.bytes) / static_cast<double>(a.duration_ns());
    }
    add({{"ph", "X"}, {"cat", category(a.kind)}, {"name", a.name}, {"pid", a.device}, {"tid", tid}, {"args", args}},
        gpu_spans[index]);
    gpu_slices.push_back(slices.size() - 1);
    launched.insert(a.correlation);
  }
  std::set<std::pair<uint32_t, uint32_t>> threads;
  std::set<uint32_t> flow_started;
  for (const auto& c : log.api) {
    threads.insert({c.process, c.thread});
    nlohmann::json args = {{"correlation", c.correlation}};
    if (const auto ext = log.external_id.find(c.correlation); ext != log.external_id.end())
      args["External id"] = ext->second;
    auto& slice = add({{"ph", "X"},
                       {"cat", c.driver ? "cuda_driver" : "cuda_runtime"},
                       {"name", c.name},
                       {"pid", c.process},
                       {"tid", c.thread},
                       {"args", args}},
                      span_us(c.start_ns, c.end_ns));
    // One flow start per launch: the outermost API record (runtime before driver when both exist).
    if (launched.count(c.correlation) && flow_started.insert(c.correlation).second)
      slice.flows.push_back({{"ph", "s"},
                             {"id", c.correlation},
                             {"pid", c.process},
                             {"tid", c.thread},
                             {"ts", slice.ts},
                             {"cat", "ac2g"},
                             {"name", "ac2g"}});
  }
  // A flow end on every piece of GPU work whose launch record exists (a dropped one would dangle). The
  // kernels of a graph replay share the cudaGraphLaunch's correlation and each gets its own end, as
  // Kineto writes them: Perfetto's JSON importer keeps a v1 flow open after an `f`, so every end of
  // the id links the launch to that kernel.
  for (size_t i : gpu_slices) {
    auto& slice = slices[i];
    const uint32_t correlation = slice.event["args"]["correlation"];
    if (!flow_started.count(correlation)) continue;
    slice.flows.push_back({{"ph", "f"},
                           {"id", correlation},
                           {"pid", slice.event["pid"]},
                           {"tid", slice.event["tid"]},
                           {"ts", slice.ts},
                           {"cat", "ac2g"},
                           {"name", "ac2g"},
                           {"bp", "e"}});
  }
  // Step markers as the PyTorch profiler writes them: HTA numbers iterations by the ProfilerStep#N
  // slice holding a host event (hta/common/trace.py add_iteration) and leaves the last step out of its
  // analyses, taking it for incomplete. Without a host call in any step there is no thread to put them on.
  if (const auto thread = step_thread(steps, log.api)) {
    for (const auto& s : steps)
      add({{"ph", "X"},
           {"cat", "user_annotation"},
           {"name", "ProfilerStep#" + std::to_string(s.step)},
           {"pid", thread->first},
           {"tid", thread->second}},
          span_us(s.begin_ns, s.end_ns));
  }
  std::stable_sort(slices.begin(), slices.end(),
                   [](const Slice& a, const Slice& b) { return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur; });
  nlohmann::json events = nlohmann::json::array();
  for (auto& s : slices) {
    events.push_back(std::move(s.event));
    for (auto& f : s.flows) events.push_back(std::move(f));
  }
  // Track names, as Kineto writes them: GPU n / stream n, the overlap lanes, and the host threads.
  for (uint32_t d : devices)
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", d}, {"tid", 0}, {"args", {{"name", "GPU " + std::to_string(d)}}}});
  for (const auto& [d, s] : streams)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", d}, {"tid", s}, {"args", {{"name", "stream " + std::to_string(s)}}}});
  for (const auto& l : tracks.lanes)
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", l.device},
                      {"tid", l.tid},
                      {"args", {{"name", "stream " + std::to_string(l.stream) + " (overlap lane " + std::to_string(l.lane) + ")"}}}});
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

namespace {

// The file's text, handed to `out` in pieces of about 1 MiB: the top-level fields first, indented
// (HTA finds a file's rank with the regex '"rank":\s+(\d+)' line by line, hta/common/trace_file.py:45,
// so `"rank": 3` needs its space), then traceEvents last, one compact event per line (small files).
// Invalid UTF-8 in a name is replaced rather than thrown on.
void write_text(const nlohmann::json& trace, const std::function<void(const std::string&)>& out) {
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  std::string buf;
  auto flush_if_full = [&] {
    if (buf.size() >= (1u << 20)) {
      out(buf);
      buf.clear();
    }
  };
  if (!trace.is_object()) {
    out(trace.dump(-1, ' ', false, kReplace));
    return;
  }
  buf += "{";
  const char* sep = "\n";
  for (const auto& [key, value] : trace.items()) {
    if (key == "traceEvents") continue;
    std::string text = value.dump(2, ' ', false, kReplace);
    for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 3)) text.replace(at, 1, "\n  ");
    buf += sep;
    buf += "  " + nlohmann::json(key).dump() + ": " + text;
    sep = ",\n";
  }
  if (const auto it = trace.find("traceEvents"); it != trace.end()) {
    buf += sep;
    buf += "  \"traceEvents\": ";
    if (it->is_array() && !it->empty()) {
      const char* event_sep = "[\n";
      for (const auto& e : *it) {
        buf += event_sep;
        buf += e.dump(-1, ' ', false, kReplace);
        event_sep = ",\n";
        flush_if_full();
      }
      buf += "\n  ]";
    } else {
      buf += it->dump(-1, ' ', false, kReplace);
    }
  }
  buf += "\n}\n";
  out(buf);
}

}  // namespace

std::string trace_text(const nlohmann::json& trace) {
  std::string text;
  write_text(trace, [&](const std::string& piece) { text += piece; });
  return text;
}

bool trace_compression_available() {
#if defined(ABLATE_HAVE_ZLIB)
  return true;
#else
  return false;
#endif
}

std::string write_trace_file(const nlohmann::json& trace, const std::string& path_stem) {
#if defined(ABLATE_HAVE_ZLIB)
  const std::string path = path_stem + ".json.gz";
  gzFile gz = gzopen(path.c_str(), "wb6");
  if (gz == nullptr) throw std::runtime_error("cannot write trace " + path);
  try {
    write_text(trace, [&](const std::string& piece) {
      // Pieces are about 1 MiB (one event more at most): within gzwrite's unsigned length.
      if (!piece.empty() && gzwrite(gz, piece.data(), static_cast<unsigned>(piece.size())) != static_cast<int>(piece.size()))
        throw std::runtime_error("cannot write trace " + path + ": gzwrite failed");
    });
  } catch (...) {
    gzclose(gz);
    throw;
  }
  if (gzclose(gz) != Z_OK) throw std::runtime_error("cannot write trace " + path + ": gzclose failed");
  return path;
#else
  const std::string path = path_stem + ".json";
  std::ofstream out(path, std::ios::binary);
  write_text(trace, [&](const std::string& piece) { out << piece; });
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
