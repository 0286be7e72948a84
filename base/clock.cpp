// base/clock.cpp: see clock.h. Tests: tests/base/clock_test.cpp.
#include "base/clock.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include "base/errors.h"

namespace ablate::base {
namespace {

// A finite number spanning the whole of `text`, or nothing.
std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<double> parse_age(std::string_view text, double now) {
  if (text.size() < 2) return std::nullopt;
  double unit = 0;
  switch (text.back()) {
    case 's':
      unit = 1;
      break;
    case 'm':
      unit = 60;
      break;
    case 'h':
      unit = 3600;
      break;
    case 'd':
      unit = 86400;
      break;
    case 'w':
      unit = 7 * 86400;
      break;
    default:
      return std::nullopt;
  }
  const auto count = parse_number(text.substr(0, text.size() - 1));
  if (!count || *count < 0) return std::nullopt;
  return now - *count * unit;
}

// Digits text[pos, pos+n) as a number, or -1 if any of them is not a digit.
int digits(std::string_view text, std::size_t pos, std::size_t n) {
  int value = 0;
  for (std::size_t i = pos; i < pos + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    value = value * 10 + (text[i] - '0');
  }
  return value;
}

// YYYY-MM-DD, optionally followed by T or space and HH:MM[:SS], optionally Z. Always UTC.
std::optional<double> parse_iso(std::string_view text) {
  if (!text.empty() && text.back() == 'Z') text.remove_suffix(1);
  const std::size_t n = text.size();
  if (n != 10 && n != 16 && n != 19) return std::nullopt;
  if (text[4] != '-' || text[7] != '-') return std::nullopt;
  if (n >= 16 && ((text[10] != 'T' && text[10] != ' ') || text[13] != ':')) return std::nullopt;
  if (n == 19 && text[16] != ':') return std::nullopt;
  const int year = digits(text, 0, 4), month = digits(text, 5, 2), day = digits(text, 8, 2);
  const int hour = n >= 16 ? digits(text, 11, 2) : 0, minute = n >= 16 ? digits(text, 14, 2) : 0;
  const int second = n == 19 ? digits(text, 17, 2) : 0;
  if (year < 0 || month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0) return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const std::time_t t = timegm(&tm);
  // timegm normalises out-of-range fields (month 13 -> next year); reject those instead.
  if (tm.tm_year != year - 1900 || tm.tm_mon != month - 1 || tm.tm_mday != day || tm.tm_hour != hour ||
      tm.tm_min != minute || tm.tm_sec != second) {
    return std::nullopt;
  }
  return static_cast<double>(t);
}

}  // namespace

double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string format_utc(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

double parse_time(std::string_view text, double now) {
  if (auto unix_seconds = parse_number(text)) return *unix_seconds;
  if (auto age = parse_age(text, now)) return *age;
  if (auto iso = parse_iso(text)) return *iso;
  throw InputError(
      fmt::format("cannot read '{}' as a time: use unix seconds (1714560000), an ISO date or "
                  "date-time in UTC (2024-05-01, 2024-05-01T12:30:00Z) or an age (90m, 12h, 7d)",
                  text));
}

double env_seconds(const char* name, double fallback) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  const auto value = parse_number(raw);
  if (!value || *value <= 0) {
    throw InputError(
        fmt::format("environment variable {}='{}' is not a positive number of seconds "
                    "(for example {}=2.5); fix or unset it",
                    name, raw, name));
  }
  return *value;
}

}  // namespace ablate::base
