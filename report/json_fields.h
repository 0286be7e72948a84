// report/json_fields.h: small JSON helpers shared by the report renderers (compare.cpp, gate.cpp).
// Tested through tests/report/compare_test.cpp and gate_test.cpp (report_tests).
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
