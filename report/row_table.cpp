// report/row_table.cpp: CSV and JSON rendering of RowTable (see row_table.h).
// Tests: tests/report/export_test.cpp (report_tests).
#include "report/row_table.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ablate::report {
namespace {

// A text cell a spreadsheet would run as a formula (=, +, -, @, or a leading tab or CR) gets a leading
// apostrophe, the spreadsheet convention for "text" (OWASP's CSV injection advice); numbers are never text.
std::string spreadsheet_safe(const std::string& text) {
  if (!text.empty() && std::string_view("=+-@\t\r").find(text.front()) != std::string_view::npos) return "'" + text;
  return text;
}

std::string scalar_text(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "";
    case nlohmann::json::value_t::string:
      return spreadsheet_safe(value.get_ref<const std::string&>());
    case nlohmann::json::value_t::array:
      return value.dump();  // a list (tags) as one JSON cell: ["x,y"] is not ["x", "y"]
    case nlohmann::json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::number_float:
      return fmt::format("{}", value.get<double>());  // shortest round-trip form
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return value.dump();
    default:
      throw std::invalid_argument(fmt::format("a CSV field must be a scalar or a list, got {}", value.dump()));
  }
}

}  // namespace

std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string to_csv(const RowTable& records) {
  std::string out;
  auto line = [&out](const auto& fields, auto text_of) {
    for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(text_of(fields[i]));
    out += "\n";
  };
  line(records.columns, [](const std::string& name) { return name; });
  for (const auto& row : records.rows) line(row, scalar_text);
  return out;
}

std::string to_json_text(const RowTable& records) {
  // Written by hand rather than through an ordered_json tree: keys stay in column order and an export
  // of millions of step rows needs no second copy of the data.
  std::vector<std::string> keys;
  for (const auto& column : records.columns) keys.push_back(nlohmann::json(column).dump() + ": ");
  std::string out = "[";
  for (std::size_t r = 0; r < records.rows.size(); ++r) {
    out += r ? ",\n {" : "\n {";
    for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + keys[i] + records.rows[r].at(i).dump();
    out += "}";
  }
  return out + (records.rows.empty() ? "]\n" : "\n]\n");
}

}  // namespace ablate::report
