// profiling/trace_writer.h: one rank's ActivityLog as a Chrome/Perfetto trace in the layout of the
// PyTorch profiler (Kineto), so Perfetto, chrome://tracing and Holistic Trace Analysis load it as is:
// top-level `schemaVersion`, `deviceProperties`, `distributedInfo` {backend, rank, world_size},
// `baseTimeNanoseconds`, `traceEvents`. GPU work is `ph: "X"` with `pid` = device, `tid` = stream,
// `cat` kernel / gpu_memcpy / gpu_memset; a kernel that starts before earlier work on its stream has
// ended (programmatic dependent launch) goes on an overlap lane of the stream instead, a tid above the
// device's stream ids named "stream N (overlap lane L)" (Perfetto drops slices that do not nest on a
// track), args.stream staying the real stream. Host launches are `ph: "X"` cuda_runtime / cuda_driver on
// (process, thread); each launch is linked to its GPU work by a flow (`ph: "s"` at the launch,
// `ph: "f"`, `bp: "e"` at the GPU work, on its track, id = correlation): a cudaGraphLaunch's flow has
// one end at every kernel of the replay, as Kineto writes it. Each closed step span is a
// `ProfilerStep#N` slice (cat user_annotation) on the thread that starts the steps, which HTA numbers
// iterations by. `ts`/`dur` are whole microseconds since baseTimeNanoseconds, every start and end rounded
// to the nearest one: Holistic Trace Analysis rounds fractional times (ts up, ts + dur down), which
// turns an event inside one microsecond negative, and leaves whole ones as they are; one rounding rule
// for both ends keeps slices nested. Slices are written by start, longest first at one start, each
// followed by its flow events (equal timestamps have no order but the file's). Args carry correlation,
// stream, device, "duration (ns)" (the exact length of GPU work), External id, the launch scope (phase,
// layer, block, seam, backend), family and step from attribution.h; memcpy/memset also bytes and
// "memory bandwidth (GB/s)".
// Tests: tests/profiling/trace_writer_test.cpp (profiling_tests); scripts/check-trace.sh loads a sample
// in HTA (and Perfetto where its trace_processor_shell is at hand).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profiling/activity.h"

namespace ablate::profiling {

struct TraceMeta {
  int64_t rank = 0, world_size = 1;
  std::string backend = "nccl";
  nlohmann::json device_properties = nlohmann::json::array();  // [{id, name, totalGlobalMem, ...}]
  std::string trace_name;                                      // e.g. "ablate run 12 rank 0"
};

nlohmann::json chrome_trace(const ActivityLog& log, const TraceMeta& meta);

// Writes `trace` to `path_stem` + ".json.gz" (gzip, when zlib was found at build time) or
// + ".json" (plain, otherwise) as trace_text lays it out, and returns the path written. Throws
// std::runtime_error on I/O errors.
std::string write_trace_file(const nlohmann::json& trace, const std::string& path_stem);
// The text write_trace_file writes: the top-level fields first, indented, so that `"rank": N` has the
// space HTA's line-by-line rank regex needs ('"rank":\s+(\d+)', hta/common/trace_file.py), then
// traceEvents, one compact event per line.
std::string trace_text(const nlohmann::json& trace);
// Reads a file written by write_trace_file back (gunzips .gz): for tests and `ablate` tooling.
nlohmann::json read_trace_file(const std::string& path);
// Whether write_trace_file compresses (zlib at build time).
bool trace_compression_available();

}  // namespace ablate::profiling
