// report/json_fields.h: small JSON helpers shared by the report renderers (compare.cpp, gate.cpp,
// report.cpp, export.cpp): optional values as JSON. A run's facts are read through
// receipts/run_facts.h, never by key.
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

}  // namespace ablate::report
