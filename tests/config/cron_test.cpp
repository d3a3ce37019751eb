// Cron-like schedule times: fields, ranges, lists and steps parse; bad ones are clear errors;
// matching in UTC at and one minute past each edge; both day fields restricted match either.
#include <doctest/doctest.h>

#include "config/cron.hpp"

using namespace kiln::config;

namespace {

cron_spec cron(const char* text) {
  auto r = parse_cron(text);
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<cron_spec>(r);
}

// 2026-12-01 is a Tuesday; unix seconds of 00:00 UTC that day.
constexpr std::int64_t kDec1 = 1796083200;
constexpr std::int64_t at(int day, int hour, int minute) { return kDec1 + (day - 1) * 86400 + hour * 3600 + minute * 60; }

}  // namespace

TEST_CASE("cron: matching in UTC at and past each edge") {
  const auto weekdays9 = cron("0 9 * * 1-5");
  CHECK(weekdays9.matches(at(1, 9, 0)));        // Tuesday 09:00
  CHECK(weekdays9.matches(at(1, 9, 0) + 59));   // within the minute
  CHECK_FALSE(weekdays9.matches(at(1, 9, 1)));  // a minute past
  CHECK_FALSE(weekdays9.matches(at(1, 8, 59)));
  CHECK(weekdays9.matches(at(4, 9, 0)));        // Friday
  CHECK_FALSE(weekdays9.matches(at(5, 9, 0)));  // Saturday
  CHECK_FALSE(weekdays9.matches(at(6, 9, 0)));  // Sunday

  const auto quarter = cron("*/15 8-18/2 * * *");
  CHECK(quarter.matches(at(1, 8, 0)));
  CHECK(quarter.matches(at(1, 8, 45)));
  CHECK_FALSE(quarter.matches(at(1, 8, 44)));
  CHECK(quarter.matches(at(1, 18, 30)));
  CHECK_FALSE(quarter.matches(at(1, 9, 0)));   // odd hours are stepped over
  CHECK_FALSE(quarter.matches(at(1, 20, 0)));  // past the range

  const auto sundays = cron("30 23 * * 7");  // 7 is Sunday too
  CHECK(sundays.matches(at(6, 23, 30)));
  CHECK_FALSE(sundays.matches(at(5, 23, 30)));

  // Both day fields restricted: the 1st of the month or a Saturday.
  const auto either = cron("0 0 1 * 6");
  CHECK(either.matches(at(1, 0, 0)));   // the 1st, a Tuesday
  CHECK(either.matches(at(5, 0, 0)));   // Saturday the 5th
  CHECK_FALSE(either.matches(at(2, 0, 0)));

  const auto list = cron("5,10 12 24,25 12 *");
  CHECK(list.matches(at(24, 12, 10)));
  CHECK(list.matches(at(25, 12, 5)));
  CHECK_FALSE(list.matches(at(25, 12, 6)));
  CHECK_FALSE(list.matches(at(23, 12, 5)));
}

TEST_CASE("cron: the latest time named in a window") {
  const auto c = cron("0 9 * * *");
  CHECK(c.last_in(at(1, 8, 0), at(1, 10, 0)) == at(1, 9, 0));
  CHECK(c.last_in(at(1, 9, 0), at(1, 9, 0)) == at(1, 9, 0));  // the window's both ends count
  CHECK(c.last_in(at(1, 9, 1), at(1, 10, 0)) == -1);
  CHECK(c.last_in(at(1, 7, 0), at(1, 8, 59)) == -1);
  CHECK(c.last_in(at(1, 0, 0), at(3, 0, 0)) == at(2, 9, 0));
}

TEST_CASE("cron: bad texts are errors that say what is wrong") {
  const struct {
    const char* text;
    const char* says;
  } bad[] = {
      {"* * * *", "five fields"},
      {"* * * * * *", "five fields"},
      {"60 * * * *", "minute"},
      {"* 24 * * *", "hour"},
      {"* * 0 * *", "day of month"},
      {"* * 32 * *", "day of month"},
      {"* * * 13 *", "month"},
      {"* * * * 8", "day of week"},
      {"5-3 * * * *", "minute"},
      {"*/0 * * * *", "step"},
      {"a * * * *", "not a number"},
      {"1, * * * *", "minute"},
      {"-1 * * * *", "range"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.text);
    auto r = parse_cron(b.text);
    REQUIRE(std::holds_alternative<std::string>(r));
    CHECK(std::get<std::string>(r).find(b.says) != std::string::npos);
  }
}
