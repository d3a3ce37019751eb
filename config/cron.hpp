#pragma once
// Cron-like times for scheduled scale-ups: five fields "minute hour day-of-month month
// day-of-week" in UTC, each `*`, a number, a range `a-b`, a list `a,b` and a step `/n`
// (`*/15`, `8-18/2`). Day-of-week 0 or 7 is Sunday. As in cron, when both day fields are
// restricted a time matches either.
#include <bitset>
#include <cstdint>
#include <string>
#include <variant>

namespace kiln::config {

struct cron_spec {
  std::bitset<60> minute;
  std::bitset<24> hour;
  std::bitset<32> dom;    ///< 1-31
  std::bitset<13> month;  ///< 1-12
  std::bitset<7> dow;     ///< 0-6, Sunday 0
  bool dom_any = true;
  bool dow_any = true;
  std::string text;

  /// Whether the minute holding `unix_s` matches.
  bool matches(std::int64_t unix_s) const;
  /// The latest matching minute start in [from_s, to_s], or -1.
  std::int64_t last_in(std::int64_t from_s, std::int64_t to_s) const;
};

/// The spec, or why `text` is not one.
std::variant<cron_spec, std::string> parse_cron(const std::string& text);

}  // namespace kiln::config
