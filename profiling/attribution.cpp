// profiling/attribution.cpp: see attribution.h. Classification rules are ordered lists so the first
// matching rule wins and a reader can see the precedence; the summaries are plain maps over the log.
// Tests: tests/profiling/attribution_test.cpp (profiling_tests).
#include "profiling/attribution.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>
#include <utility>

namespace ablate::profiling {

bool LaunchScope::operator<(const LaunchScope& o) const {
  return std::tie(phase, layer, block, seam, backend) < std::tie(o.phase, o.layer, o.block, o.seam, o.backend);
}

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool contains_any(const std::string& haystack, std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    if (haystack.find(n) != std::string::npos) return true;
  return false;
}

// The launch call of a correlation id, found by binary search in the API calls sorted by correlation.
const ApiCall* launch_of(const std::vector<const ApiCall*>& by_correlation, uint32_t correlation) {
  const auto it = std::lower_bound(by_correlation.begin(), by_correlation.end(), correlation,
                                   [](const ApiCall* a, uint32_t c) { return a->correlation < c; });
  return it != by_correlation.end() && (*it)->correlation == correlation ? *it : nullptr;
}

int64_t step_of(const std::vector<StepSpan>& spans, const ApiCall* launch, const GpuActivity& a) {
  if (launch != nullptr) {
    for (const auto& s : spans)
      if (launch->start_ns >= s.begin_ns && launch->start_ns <= s.end_ns) return s.step;
  }
  // No launch record (dropped, or launched from a thread between spans): the GPU runs after the host
  // launched, so the step is the last one that began before the work started.
  int64_t step = -1;
  for (const auto& s : spans)
    if (s.begin_ns <= a.start_ns) step = s.step;
  return step;
}

std::string join(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

const std::vector<std::string>& families() {
  static const std::vector<std::string> kFamilies = {
      "gemm",     "attention", "ssm_scan",    "recurrent_scan", "moe_dispatch",  "norm",   "rope",
      "loss",     "optimizer", "elementwise", "communication",  "memcpy",        "memset"};
  return kFamilies;
}

std::string family_of_seam(const std::string& seam) {
  static const std::map<std::string, std::string> kBySeam = {
      {"dense_gemm", "gemm"},           {"attention", "attention"},       {"rope", "rope"},         {"residual_norm", "norm"},
      {"swiglu", "elementwise"},        {"moe_router", "moe_dispatch"},  {"moe_dispatch", "moe_dispatch"}, {"ssm_rotary", "rope"}, {"ssm_scan", "ssm_scan"},
      {"causal_conv", "elementwise"},   {"recurrent_scan", "recurrent_scan"}, {"loss", "loss"}, {"optimizer", "optimizer"}};
  const auto it = kBySeam.find(seam);
  return it == kBySeam.end() ? "" : it->second;
}

std::string family_of_kernel_name(const std::string& name) {
  const std::string n = lower(name);
  // Most specific first: attention kernels are often CUTLASS (fmha_cutlass*), so they precede gemm.
  if (contains_any(n, {"nccl"})) return "communication";
  if (contains_any(n, {"flash_fwd", "flash_bwd", "flash::", "fmha", "native_sdpa", "attention", "sdpa"}))
    return "attention";
  if (contains_any(n, {"gemm", "cutlass", "cublas", "xmma", "nvjet", "matmul", "grouped_mm", "gemv", "sm90_", "sm80_",
                       "ampere_", "hopper_"}))
    return "gemm";
  // ablate_lce_*: kernels/loss/fused_cuda.cu, whose file name (in the mangled anonymous
  // namespace) demangling drops.
  if (contains_any(n, {"cross_entropy", "nll_loss", "log_softmax", "ablate_lce"})) return "loss";
  if (contains_any(n, {"adam", "multi_tensor_apply", "sgd"})) return "optimizer";
  if (contains_any(n, {"rms_norm", "rmsnorm", "layer_norm", "layernorm", "residual_norm", "batch_norm"})) return "norm";
  if (contains_any(n, {"rope", "rotary"})) return "rope";
  if (contains_any(n, {"ssm_scan", "selective_scan", "mamba"})) return "ssm_scan";
  if (contains_any(n, {"recurrent_scan", "rglru", "linear_recurrence"})) return "recurrent_scan";
  if (contains_any(n, {"moe_", "grouped_topk", "expert"})) return "moe_dispatch";
  return "elementwise";
}

// Whether a GEMM kernel's name spells FP8 inputs: cuBLASLt's nvjet kernels by the type letters after the
// architecture, the two inputs' first, q (e4m3) or r (e5m2) for FP8 (nvjet_sm90_qqtst_... e4m3 x e4m3,
// nvjet_sm90_qrtst_... e4m3 x e5m2: the tensorwise recipe's gradients, H200 profiles of 2026-11-28; bf16
// ones are nvjet_sm90_tst_...); CUTLASS and cuBLASLt's templates by their element types (float_e4m3_t,
// __nv_fp8_e4m3, E4M3E4M3).
namespace {
bool nvjet_fp8_inputs(const std::string& n) {
  const auto at = n.find("nvjet_sm");
  if (at == std::string::npos) return false;
  const auto types = n.find('_', at + 8);  // past the architecture: nvjet_sm90_
  if (types == std::string::npos || types + 2 >= n.size()) return false;
  const auto fp8 = [](char c) { return c == 'q' || c == 'r'; };
  return fp8(n[types + 1]) || fp8(n[types + 2]);
}
bool names_fp8_inputs(const std::string& name) {
  const std::string n = lower(name);
  return nvjet_fp8_inputs(n) || contains_any(n, {"e4m3", "e5m2", "fp8", "f8f8"});
}
}  // namespace

bool is_fp8_gemm_kernel(const std::string& name) {
  return family_of_kernel_name(name) == "gemm" && names_fp8_inputs(name);
}

std::string classify(const GpuActivity& a, const LaunchScope* scope) {
  if (a.kind == GpuActivity::Kind::memcpy) return "memcpy";
  if (a.kind == GpuActivity::Kind::memset) return "memset";
  const std::string by_name = family_of_kernel_name(a.name);
  if (by_name == "communication") return by_name;
  if (scope != nullptr) {
    if (auto f = family_of_seam(scope->seam); !f.empty()) return f;
    if (scope->phase == "optimizer") return "optimizer";
  }
  return by_name;
}

std::vector<AttributedActivity> attribute(const ActivityLog& log) {
  std::vector<const ApiCall*> by_correlation;
  by_correlation.reserve(log.api.size());
  for (const auto& c : log.api) by_correlation.push_back(&c);
  // A launch has one runtime and (below it) one driver record with the same correlation only when
  // both are enabled and the runtime calls the driver; either gives the host time of the launch.
  std::stable_sort(by_correlation.begin(), by_correlation.end(),
                   [](const ApiCall* a, const ApiCall* b) { return a->correlation < b->correlation; });
  std::vector<AttributedActivity> out;
  out.reserve(log.gpu.size());
  for (const auto& a : log.gpu) {
    AttributedActivity r;
    r.activity = &a;
    if (const auto sc = log.scopes.find(external_id_of(log, a)); sc != log.scopes.end()) r.scope = &sc->second;
    r.step = step_of(log.steps, launch_of(by_correlation, a.correlation), a);
    r.family = classify(a, r.scope);
    out.push_back(std::move(r));
  }
  return out;
}

Collective collective_of_kernel_name(const std::string& name) {
  if (name.find("AllReduce") != std::string::npos) return Collective::all_reduce;
  if (name.find("ReduceScatter") != std::string::npos) return Collective::reduce_scatter;
  if (name.find("AllGather") != std::string::npos) return Collective::all_gather;
  if (name.find("SendRecv") != std::string::npos) return Collective::all_to_all;
  return Collective::other;
}

TemporalBreakdown temporal_breakdown(const std::vector<GpuActivity>& gpu) {
  TemporalBreakdown b;
  if (gpu.empty()) return b;
  // One sweep over the activities' starts and ends: between two consecutive instants the set of
  // running activities is constant, so each segment's length goes to every measure it satisfies.
  // Lanes: one per collective kind (the communication kernels), then other kernels, then transfers.
  constexpr int other_kernel = kCollectiveKindCount, transfer = kCollectiveKindCount + 1;  // transfer: memcpy / memset
  struct Edge {
    uint64_t at;
    int lane;
    int delta;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * gpu.size());
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& a : gpu) {
    first = std::min(first, a.start_ns);
    last = std::max(last, a.end_ns);
    b.busy_sum_ns += a.duration_ns();
    if (a.end_ns <= a.start_ns) continue;
    const int lane = a.kind != GpuActivity::Kind::kernel                   ? transfer
                     : family_of_kernel_name(a.name) == "communication" ? static_cast<int>(collective_of_kernel_name(a.name))
                                                                         : other_kernel;
    edges.push_back({a.start_ns, lane, +1});
    edges.push_back({a.end_ns, lane, -1});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.at < y.at; });
  int running[kCollectiveKindCount + 2] = {};
  uint64_t busy = 0;
  for (std::size_t i = 0; i < edges.size();) {
    const uint64_t at = edges[i].at;
    for (; i < edges.size() && edges[i].at == at; ++i) running[edges[i].lane] += edges[i].delta;
    if (i == edges.size()) break;
    const uint64_t length = edges[i].at - at;
    bool comm = false;
    for (int k = 0; k < kCollectiveKindCount; ++k) comm = comm || running[k] > 0;
    const bool kernel = comm || running[other_kernel] > 0, alone = running[other_kernel] == 0 && running[transfer] == 0;
    if (kernel) b.compute_ns += length;
    if (kernel || running[transfer] > 0) busy += length;
    if (comm) b.communication_ns += length;
    if (comm && alone) b.exposed_communication_ns += length;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
      if (running[k] == 0) continue;
      b.collective_ns[k] += length;
      if (alone) b.exposed_collective_ns[k] += length;
    }
  }
  b.window_ns = last > first ? last - first : 0;
  b.non_compute_ns = busy - b.compute_ns;
  b.idle_ns = b.window_ns - busy;
  return b;
}

ProfileSummary summarize(const ActivityLog& log) {
  ProfileSummary s;
  const auto attributed = attribute(log);
  s.records = static_cast<int64_t>(attributed.size());
  s.breakdown = temporal_breakdown(log.gpu);

  struct Sum {
    int64_t calls = 0, total_ns = 0;
    void add(uint64_t ns) {
      ++calls;
      total_ns += static_cast<int64_t>(ns);
    }
  };
  static const LaunchScope kUnscoped{"unscoped", -1, "", "", ""};
  std::map<std::pair<std::string, LaunchScope>, std::pair<std::string, Sum>> by_site;  // (name, scope) -> family, sum
  std::map<std::tuple<int64_t, std::string, std::string>, Sum> by_step;              // (step, dimension, key)
  for (const auto& r : attributed) {
    const auto ns = r.activity->duration_ns();
    const LaunchScope& scope = r.scope ? *r.scope : kUnscoped;
    auto& site = by_site[{r.activity->name, scope}];
    site.first = r.family;
    site.second.add(ns);
    by_step[{r.step, "family", r.family}].add(ns);
    by_step[{r.step, "seam", scope.seam}].add(ns);
  }

  std::map<std::string, std::pair<Sum, std::pair<int64_t, const std::pair<std::string, LaunchScope>*>>> by_name;
  for (const auto& [key, value] : by_site) {
    s.attribution.push_back({key.first, key.second, value.first, value.second.calls, value.second.total_ns});
    auto& n = by_name[key.first];
    n.first.calls += value.second.calls;
    n.first.total_ns += value.second.total_ns;
    if (n.second.second == nullptr || value.second.total_ns > n.second.first) n.second = {value.second.total_ns, &key};
  }
  for (const auto& [name, value] : by_name) {
    const auto& dominant = *value.second.second;
    s.kernels.push_back({name, by_site.at(dominant).first, dominant.second.seam, value.first.calls, value.first.total_ns});
  }
  for (const auto& [key, sum] : by_step)
    s.time.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), sum.calls, sum.total_ns});
  return s;
}

std::vector<ObservedBackend> observe_backends(const ProfileSummary& summary,
                                              const std::map<std::string, std::string>& chosen,
                                              const std::vector<kernels::BackendInfo>& catalog) {
  std::vector<ObservedBackend> out;
  for (const auto& [seam, chosen_name] : chosen) {
    ObservedBackend ob;
    ob.seam = seam;
    ob.chosen = chosen_name;
    // The seam's kernels, summed over layers and phases.
    std::map<std::string, std::pair<int64_t, int64_t>> kernels_in_seam;
    for (const auto& a : summary.attribution) {
      if (a.scope.seam != seam || a.family == "communication") continue;  // NCCL work is no backend's
      auto& k = kernels_in_seam[a.name];
      k.first += a.calls;
      k.second += a.total_ns;
    }
    const kernels::BackendInfo* chosen_row = nullptr;
    for (const auto& row : catalog)
      if (row.seam == seam && row.name == chosen_name) chosen_row = &row;
    const std::vector<std::string>* chosen_patterns = chosen_row ? &chosen_row->kernel_patterns : nullptr;
    std::set<std::string> matched;
    for (const auto& [name, sums] : kernels_in_seam) {
      std::set<std::string> hits;
      for (const auto& row : catalog) {
        if (row.seam != seam) continue;
        for (const auto& p : row.kernel_patterns)
          if (name.find(p) != std::string::npos) hits.insert(row.name);
      }
      // A kernel the chosen backend's own patterns name is its kernel, even where another backend shares
      // the pattern (the FP8 head runs the bf16 fused head's row kernel): only a kernel the chosen backend
      // does not name is evidence of another.
      if (hits.count(chosen_name) != 0)
        matched.insert(chosen_name);
      else
        matched.insert(hits.begin(), hits.end());
      ob.evidence.push_back({name, join(hits), sums.first, sums.second});
    }
    std::sort(ob.evidence.begin(), ob.evidence.end(),
              [](const BackendEvidence& a, const BackendEvidence& b) { return a.total_ns > b.total_ns; });
    const bool chosen_has_patterns = chosen_patterns != nullptr && !chosen_patterns->empty();
    std::set<std::string> others = matched;
    others.erase(chosen_name);
    if (kernels_in_seam.empty()) {
      ob.note = "no kernel ran inside this seam in the window";
    } else if (!others.empty()) {
      ob.observed = join(matched);
      ob.mismatch = true;
      ob.note = "kernels of another backend ran: " + join(others);
    } else if (chosen_has_patterns && matched.empty()) {
      ob.observed = "reference";
      ob.mismatch = true;
      ob.note = "none of the chosen backend's kernel patterns ran; no fast backend's either";
    } else if (chosen_has_patterns || chosen_name == "reference") {
      ob.observed = chosen_name;
      ob.mismatch = false;
      ob.note = chosen_has_patterns ? "the chosen backend's kernels ran, no other backend's"
                                    : "no fast backend's kernel patterns ran";
    } else {
      ob.observed = chosen_name;
      ob.note = "the chosen backend has no kernel-name patterns: kernel names cannot tell it from the reference";
    }
    // Precision: the seam's GEMM kernels must run in FP8 exactly when the chosen backend's do.
    const bool fp8_requested = chosen_row != nullptr && chosen_row->fp8_gemms;
    std::set<std::string> wrong_precision;
    for (const auto& [name, sums] : kernels_in_seam)
      if (family_of_kernel_name(name) == "gemm" && names_fp8_inputs(name) != fp8_requested)
        wrong_precision.insert(name);
    if (!wrong_precision.empty()) {
      ob.mismatch = true;
      ob.note += std::string("; precision: ") +
                 (fp8_requested ? "GEMM kernels in bf16 or wider ran where FP8 was requested: "
                                : "FP8 GEMM kernels ran where bf16 or wider was requested: ") +
                 join(wrong_precision);
    }
    out.push_back(std::move(ob));
  }
  return out;
}

}  // namespace ablate::profiling
