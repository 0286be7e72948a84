// base/clock.h: time and durations: wall-clock unix seconds, parsing of
// `--since` values, and durations read from environment variables (ABLATE_HEARTBEAT_S, ...).
// Tested by tests/base/clock_test.cpp (base_tests) and tests/receipts/query_test.cpp.
#pragma once

#include <string>
#include <string_view>

namespace ablate::base {

// Wall-clock time as unix seconds with sub-second precision.
double unix_now();

// unix seconds as "YYYY-MM-DD HH:MM:SS" in UTC (the CLI's tables).
std::string format_utc(double unix_s);

// Parses a point in time given as unix seconds ("1714560000"), an ISO date or date-time in UTC
// ("2024-05-01", "2024-05-01T12:30:00Z", "2024-05-01 12:30"), or an age relative to `now`
// ("90s", "30m", "12h", "7d"). Throws InputError saying which forms are accepted.
double parse_time(std::string_view text, double now);

// The positive number of seconds in environment variable `name`, or `fallback` when it is unset or
// empty. A value that is not a positive number throws InputError naming the variable.
double env_seconds(const char* name, double fallback);

}  // namespace ablate::base
