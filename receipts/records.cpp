// receipts/records.cpp: names of statuses, verdicts, goodput categories and roles; the evidence rule.
// Tests: tests/receipts/store_test.cpp, query_test.cpp.
#include "receipts/records.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <utility>

#include "receipts/errors.h"

namespace ablate::receipts {
namespace {

constexpr std::array<std::pair<RunStatus, std::string_view>, 5> kStatuses = {{
    {RunStatus::running, "running"},
    {RunStatus::ok, "ok"},
    {RunStatus::failed, "failed"},
    {RunStatus::killed, "killed"},
    {RunStatus::abandoned, "abandoned"},
}};

constexpr std::array<std::pair<Verdict, std::string_view>, 3> kVerdicts = {{
    {Verdict::keep, "KEEP"},
    {Verdict::drop, "DROP"},
    {Verdict::inconclusive, "INCONCLUSIVE"},
}};

constexpr std::array<std::pair<CaptureOutcome, std::string_view>, 5> kCaptureOutcomes = {{
    {CaptureOutcome::not_requested, "not_requested"},
    {CaptureOutcome::refused, "refused"},
    {CaptureOutcome::not_reached, "not_reached"},
    {CaptureOutcome::failed, "failed"},
    {CaptureOutcome::captured, "captured"},
}};

// Shared lookup for the small enum <-> name tables above.
template <typename Enum, std::size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& table, Enum value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "?";
}

template <typename Enum, std::size_t N>
Enum value_of(const std::array<std::pair<Enum, std::string_view>, N>& table, std::string_view text,
              std::string_view what) {
  std::vector<std::string_view> names;
  for (const auto& [e, name] : table) {
    if (name == text) return e;
    names.push_back(name);
  }
  throw StoreError(fmt::format("unknown {} '{}': expected one of {}", what, text, fmt::join(names, ", ")));
}

}  // namespace

std::string_view to_string(RunStatus status) { return name_of(kStatuses, status); }
RunStatus parse_run_status(std::string_view text) { return value_of(kStatuses, text, "run status"); }
std::string_view to_string(Verdict verdict) { return name_of(kVerdicts, verdict); }
Verdict parse_verdict(std::string_view text) { return value_of(kVerdicts, text, "verdict"); }
std::string_view to_string(CaptureOutcome outcome) { return name_of(kCaptureOutcomes, outcome); }
CaptureOutcome parse_capture_outcome(std::string_view text) {
  return value_of(kCaptureOutcomes, text, "CUDA graph capture outcome");
}

const std::vector<std::string>& goodput_categories() {
  static const std::vector<std::string> names = {"startup",    "data_prep", "warmup",    "productive", "data_wait",
                                                 "checkpoint", "eval",      "profiling", "other"};
  return names;
}

const std::vector<std::string>& backend_roles() {
  static const std::vector<std::string> names = {"keep", "borderline", "experimental", "vendor", "reference"};
  return names;
}

bool is_evidence(const RunRow& run) {
  const RunSummary& s = run.summary;
  return run.status == RunStatus::ok && !run.spec_hash.empty() && s.steps.value_or(0) > 0 &&
         s.median_step_ms.has_value() && s.tokens_per_s.has_value() && s.goodput_pct.has_value() &&
         s.peak_memory_bytes.has_value();
}

}  // namespace ablate::receipts
