// report/row_table.h: rows of named columns with raw values (JSON scalars; null = unknown), rendered as
// CSV or JSON for pandas users (`ablate export`). CSV follows RFC 4180: fields holding a comma, quote,
// CR or LF are quoted with inner quotes doubled; null is an empty field; numbers are written in the
// shortest form that reads back to the same double.
// Tests: tests/report/export_test.cpp (report_tests).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ablate::report {

struct RowTable {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;  // each as long as columns; scalars only
};

std::string csv_field(std::string_view text);  // quoted when it must be
std::string to_csv(const RowTable& records);     // header line, then one line per row, "\n" line ends
// An array of objects, keys in column order.
std::string to_json_text(const RowTable& records);

}  // namespace ablate::report
