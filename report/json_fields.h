// report/json_fields.h: small JSON helpers shared by the report renderers (compare.cpp, gate.cpp,
// report.cpp, export.cpp) and `ablate show`: optional values as JSON, and reading a run summary's
// free-form part (summary.extra, whose sections such as "distributed", "moe", "cuda_graphs" may be
// absent or null in older receipts).
// Tested through tests/report/*_test.cpp (report_tests) and tests/harness/cli_test.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace ablate::report {

// An optional value as JSON: the value, or null when absent (the receipts' convention for unknowns).
template <typename T>
nlohmann::json value_or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// object[key], or null when `object` is not an object or has no such key.
inline nlohmann::json member_or_null(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nlohmann::json(nullptr) : *it;
}

// object[key] as a number, absent when missing, null or not a number.
inline std::optional<double> number_at(const nlohmann::json& object, const char* key) {
  const nlohmann::json v = member_or_null(object, key);
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

}  // namespace ablate::report
