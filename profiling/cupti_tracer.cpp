// profiling/cupti_tracer.cpp: see cupti_tracer.h. Record layouts are those of the CUDA 13.0 headers:
// CUpti_ActivityKernel10 (CONCURRENT_KERNEL), CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
// CUpti_ActivityAPI (RUNTIME, DRIVER), CUpti_ActivityExternalCorrelation. Newer CUPTI versions only
// append fields to the latest record struct, so reading these prefixes stays valid.
// Kernel names are demangled and API names lose CUPTI's version suffix here (profiling/cupti_names.h),
// so everything downstream sees the names Kineto writes.
// Tests: tests/harness/profiling_gpu_test.cpp (GPU, self-skipping); the name rules in
// tests/profiling/cupti_names_test.cpp.
#include "profiling/cupti_tracer.h"

#include <cstdlib>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiling/cupti_names.h"

#if defined(ABLATE_HAVE_CUPTI)
#include <cupti.h>
#endif

namespace ablate::profiling {

CuptiTracer& CuptiTracer::instance() {
  static CuptiTracer tracer;
  return tracer;
}

bool CuptiTracer::compiled_in() {
#if defined(ABLATE_HAVE_CUPTI)
  return true;
#else
  return false;
#endif
}

ActivityLog CuptiTracer::take() {
  std::lock_guard lock(mutex_);
  ActivityLog out = std::move(log_);
  log_ = ActivityLog{};
  std::lock_guard graph_lock(graph_mutex_);
  out.graph_node_scope = graph_node_scope_;
  return out;
}

void CuptiTracer::on_graph_node_created(uint64_t node_id) {
  std::lock_guard lock(graph_mutex_);
  if (!current_scope_) return;
  if (const uint64_t scope = current_scope_(); scope != 0) graph_node_scope_[node_id] = scope;
}

void CuptiTracer::on_graph_node_cloned(uint64_t original_id, uint64_t clone_id) {
  std::lock_guard lock(graph_mutex_);
  if (const auto it = graph_node_scope_.find(original_id); it != graph_node_scope_.end())
    graph_node_scope_[clone_id] = it->second;
}

#if !defined(ABLATE_HAVE_CUPTI)

std::string CuptiTracer::start(const TracerOptions&) { return "built without CUPTI (no CUPTI headers at configure time)"; }
std::string CuptiTracer::track_graph_nodes(std::function<uint64_t()>) {
  return "built without CUPTI (no CUPTI headers at configure time)";
}
void CuptiTracer::stop_tracking_graph_nodes() {}
std::string CuptiTracer::detach() { return "built without CUPTI (no CUPTI headers at configure time)"; }
void CuptiTracer::stop() {}
uint64_t CuptiTracer::timestamp_ns() const { return 0; }
void CuptiTracer::push_external(uint64_t) {}
void CuptiTracer::pop_external() {}
void CuptiTracer::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
}
void CuptiTracer::on_buffer_completed(void*, uint32_t, uint8_t*, size_t, size_t) {}

#else

namespace {

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_RUNTIME,
                                         CUPTI_ACTIVITY_KIND_DRIVER,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
constexpr size_t kAlignment = 8;  // CUPTI requires 8-byte aligned activity buffers

// API calls that launch no GPU work and only query state: no record for them (as Kineto leaves them out
// of its traces). On nam56r-small they were 80 % of a window's 360,000 API records (cudaGetDevice
// alone 200,000), and recording them put the window's steps at +13 % over the steps outside it.
constexpr CUpti_CallbackId kQuietRuntimeApis[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,          CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020,    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceGetAttribute_v5000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020,     CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000};
constexpr CUpti_CallbackId kQuietDriverApis[] = {
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState, CUPTI_DRIVER_TRACE_CBID_cuKernelGetName,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute,       CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
    CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction,        CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice,
    CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute,
    CUPTI_DRIVER_TRACE_CBID_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags};

std::string cupti_error(const char* call, CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return std::string(call) + " failed: " + (text ? text : "unknown CUPTI error") + " (" + std::to_string(r) + ")";
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiTracer::instance().on_buffer_requested(buffer, size, max_records);
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  CuptiTracer::instance().on_buffer_completed(ctx, stream, buffer, size, valid);
}

// Resource callbacks while a graph is captured: node creation (stream capture adds one node per
// launch, on the launching thread) and node cloning (instantiation copies the graph's nodes).
void CUPTIAPI graph_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || data == nullptr) return;
  const auto* resource = static_cast<const CUpti_ResourceData*>(data);
  const auto* graph = static_cast<const CUpti_GraphData*>(resource->resourceDescriptor);
  if (graph == nullptr) return;
  uint64_t node = 0, original = 0;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    if (cuptiGetGraphNodeId(graph->node, &node) == CUPTI_SUCCESS) CuptiTracer::instance().on_graph_node_created(node);
  } else if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) {
    if (cuptiGetGraphNodeId(graph->node, &node) == CUPTI_SUCCESS &&
        cuptiGetGraphNodeId(graph->originalNode, &original) == CUPTI_SUCCESS)
      CuptiTracer::instance().on_graph_node_cloned(original, node);
  }
}

const char* memcpy_name(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "Memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "Memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "Memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "Memcpy PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "Memcpy HtoH";
    default:
      return "Memcpy";
  }
}

// API names by (domain, callback id), without CUPTI's version suffix, cached: cuptiGetCallbackName is
// not free and a window has hundreds of thousands of API records.
const std::string& api_name(bool driver, uint32_t cbid) {
  static std::map<std::pair<bool, uint32_t>, std::string> cache;  // guarded by the tracer's parse mutex
  auto [it, inserted] = cache.try_emplace({driver, cbid});
  if (inserted) {
    const char* name = nullptr;
    cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name);
    it->second = name ? api_name_without_version(name) : (driver ? "driver api " : "runtime api ") + std::to_string(cbid);
  }
  return it->second;
}

// Demangled kernel names by raw name, cached: a window has a few hundred kernels and many thousands
// of launches of them.
const std::string& kernel_name(const char* raw) {
  static std::unordered_map<std::string, std::string> cache;  // guarded by the tracer's parse mutex
  if (raw == nullptr) raw = "<unnamed kernel>";
  auto [it, inserted] = cache.try_emplace(raw);
  if (inserted) it->second = demangle_kernel_name(raw);
  return it->second;
}

}  // namespace

std::string CuptiTracer::start(const TracerOptions& options) {
  std::lock_guard lock(mutex_);
  if (active_.load()) return "a profiling window is already open";
  options_ = options;
  buffers_in_window_ = 0;
  log_ = ActivityLog{};
  if (!callbacks_registered_) {
    if (const auto r = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed); r != CUPTI_SUCCESS)
      return cupti_error("cuptiActivityRegisterCallbacks", r);
    callbacks_registered_ = true;
  }
  std::vector<CUpti_ActivityKind> enabled;
  for (const auto kind : kKinds) {
    if (const auto r = cuptiActivityEnable(kind); r != CUPTI_SUCCESS) {
      for (const auto k : enabled) cuptiActivityDisable(k);
      return cupti_error(("cuptiActivityEnable(kind " + std::to_string(kind) + ")").c_str(), r);
    }
    enabled.push_back(kind);
  }
  // After the kinds: enabling CUPTI_ACTIVITY_KIND_RUNTIME/DRIVER resets these per-API settings. A
  // failure here only costs records, so it is not fatal.
  for (const auto cbid : kQuietRuntimeApis) cuptiActivityEnableRuntimeApi(cbid, 0);
  for (const auto cbid : kQuietDriverApis) cuptiActivityEnableDriverApi(cbid, 0);
  active_.store(true, std::memory_order_release);
  return "";
}

std::string CuptiTracer::track_graph_nodes(std::function<uint64_t()> current_scope) {
  std::lock_guard lock(graph_mutex_);
  if (subscriber_ != nullptr) return "graph nodes are already being tracked";
  CUpti_SubscriberHandle handle = nullptr;
  if (const auto r = cuptiSubscribe(&handle, &graph_callback, nullptr);
      r != CUPTI_SUCCESS)
    return cupti_error("cuptiSubscribe", r);
  for (const auto cbid : {CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED}) {
    if (const auto r = cuptiEnableCallback(1, handle, CUPTI_CB_DOMAIN_RESOURCE, cbid); r != CUPTI_SUCCESS) {
      cuptiUnsubscribe(handle);
      return cupti_error(("cuptiEnableCallback(resource " + std::to_string(cbid) + ")").c_str(), r);
    }
  }
  subscriber_ = handle;
  current_scope_ = std::move(current_scope);
  return "";
}

void CuptiTracer::stop_tracking_graph_nodes() {
  std::lock_guard lock(graph_mutex_);
  if (subscriber_ == nullptr) return;
  cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber_));
  subscriber_ = nullptr;
  current_scope_ = nullptr;
}

std::string CuptiTracer::detach() {
  std::lock_guard lock(mutex_);
  std::lock_guard graph_lock(graph_mutex_);
  if (active_.load()) return "a profiling window is open";
  if (subscriber_ != nullptr) return "graph nodes are being tracked";
  if (const auto r = cuptiFinalize(); r != CUPTI_SUCCESS) return cupti_error("cuptiFinalize", r);
  callbacks_registered_ = false;  // finalize dropped them: the next window registers again
  return "";
}

void CuptiTracer::stop() {
  if (!active_.exchange(false)) return;
  for (const auto kind : kKinds) cuptiActivityDisable(kind);
  // Forced: also completes buffers that are not full, so every record of the window is delivered now.
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

uint64_t CuptiTracer::timestamp_ns() const {
  uint64_t ts = 0;
  cuptiGetTimestamp(&ts);
  return ts;
}

void CuptiTracer::push_external(uint64_t id) {
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void CuptiTracer::pop_external() {
  uint64_t last = 0;
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

void CuptiTracer::on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;  // as many as fit
  std::lock_guard lock(mutex_);
  if (buffers_in_window_ >= options_.max_buffers) {
    // The cap: CUPTI drops what it cannot store and counts it (read back in on_buffer_completed).
    ++log_.buffers_refused;
    *buffer = nullptr;
    *size = 0;
    return;
  }
  ++buffers_in_window_;
  ++log_.buffers;
  *size = options_.buffer_bytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlignment, options_.buffer_bytes));
  if (*buffer == nullptr) *size = 0;
}

// Parsed outside mutex_ (into `part`, under parse_mutex_ for the name caches) and merged under it
// briefly: CUPTI asks for a new buffer (on_buffer_requested, under mutex_) on the launching thread when
// one fills, and holding mutex_ through a 4 MiB parse stalled the training thread (+20-40 ms spikes on
// window steps of nam56r-small).
void CuptiTracer::on_buffer_completed(void* context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  ActivityLog part;
  std::unique_lock parse_lock(parse_mutex_);
  CUpti_Activity* record = nullptr;
  while (buffer != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        part.gpu.push_back({GpuActivity::Kind::kernel, kernel_name(k->name), k->start, k->end,
                            k->deviceId, k->streamId, k->correlationId, 0, k->graphNodeId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        part.gpu.push_back({GpuActivity::Kind::memcpy, memcpy_name(m->copyKind), m->start, m->end, m->deviceId,
                            m->streamId, m->correlationId, m->bytes, m->graphNodeId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        part.gpu.push_back({GpuActivity::Kind::memset, "Memset", m->start, m->end, m->deviceId, m->streamId,
                            m->correlationId, m->bytes, m->graphNodeId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        part.api.push_back({api_name(driver, a->cbid), driver, a->start, a->end, a->processId, a->threadId,
                            a->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) part.external_id[e->correlationId] = e->externalId;
        break;
      }
      default:
        break;
    }
  }
  parse_lock.unlock();
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(context), stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::lock_guard lock(mutex_);
  log_.gpu.insert(log_.gpu.end(), std::make_move_iterator(part.gpu.begin()), std::make_move_iterator(part.gpu.end()));
  log_.api.insert(log_.api.end(), std::make_move_iterator(part.api.begin()), std::make_move_iterator(part.api.end()));
  log_.external_id.merge(part.external_id);
  log_.dropped_records += dropped;
  std::free(buffer);
}

#endif  // ABLATE_HAVE_CUPTI

}  // namespace ablate::profiling
