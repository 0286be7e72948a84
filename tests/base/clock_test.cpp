// tests/base/clock_test.cpp: parsing of points in time (--since), UTC formatting and durations from
// environment variables (base/clock.cpp). Run: build/tests/base_tests --gtest_filter='TimeParsing*:EnvSeconds*'
#include "base/clock.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "base/errors.h"
#include "tests/base/scoped_env.h"

namespace ablate::base {
namespace {

constexpr double kMay2024 = 1714560000;  // 2024-05-01T10:40:00Z

TEST(TimeParsing, AcceptedForms) {
  const double now = 1800000000;
  EXPECT_EQ(parse_time("1714521600", now), 1714521600);
  EXPECT_EQ(parse_time("1714521600.5", now), 1714521600.5);
  EXPECT_EQ(parse_time("2024-05-01", now), 1714521600);
  EXPECT_EQ(parse_time("2024-05-01T12:30:00Z", now), 1714521600 + 12 * 3600 + 30 * 60);
  EXPECT_EQ(parse_time("2024-05-01 12:30", now), 1714521600 + 12 * 3600 + 30 * 60);
  EXPECT_EQ(parse_time("2024-05-01T00:00:59", now), 1714521600 + 59);
  EXPECT_EQ(parse_time("90s", now), now - 90);
  EXPECT_EQ(parse_time("30m", now), now - 1800);
  EXPECT_EQ(parse_time("12h", now), now - 12 * 3600);
  EXPECT_EQ(parse_time("7d", now), now - 7 * 86400);
  EXPECT_EQ(parse_time("1w", now), now - 7 * 86400);
}

TEST(TimeParsing, FormatsUtc) {
  EXPECT_EQ(format_utc(kMay2024), "2024-05-01 10:40:00");
  EXPECT_EQ(parse_time(format_utc(kMay2024), 0), kMay2024);
}

TEST(TimeParsing, RejectedFormsSayWhatIsAccepted) {
  for (const char* bad : {"", "yesterday", "2024-02-30", "2024-13-01", "2024-5-1", "2024-05-01T25:00", "12x", "-3d",
                          "2024-05-01T12", "nan", "inf"}) {
    try {
      parse_time(bad, 0);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("ISO date"), std::string::npos) << e.what();
    }
  }
}

TEST(EnvSeconds, UnsetOrEmptyGivesTheFallbackAndABadValueNamesTheVariable) {
  const char* name = "ABLATE_CLOCK_TEST_SECONDS";
  {
    testing::ScopedEnv unset(name, std::nullopt);
    EXPECT_EQ(env_seconds(name, 7.5), 7.5);
  }
  {
    testing::ScopedEnv empty(name, "");
    EXPECT_EQ(env_seconds(name, 7.5), 7.5);
  }
  {
    testing::ScopedEnv quarter(name, "0.25");
    EXPECT_EQ(env_seconds(name, 7.5), 0.25);
  }
  for (const char* bad : {"0", "-1", "soon", "nan"}) {
    testing::ScopedEnv set(name, bad);
    try {
      env_seconds(name, 7.5);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ablate::base
