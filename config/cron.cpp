#include "config/cron.hpp"

#include <ctime>
#include <sstream>
#include <vector>

namespace kiln::config {

namespace {

bool whole(const std::string& s, int& out) {
  if (s.empty() || s.size() > 4) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

// One field into `bits` (offset by lo); "" when it parses, else why not.
template <std::size_t N>
std::string field(const std::string& text, const char* name, int lo, int hi, std::bitset<N>& bits, bool& any) {
  any = text == "*";
  if (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos)
    return std::string(name) + ": an empty item in '" + text + "'";
  std::stringstream items(text);
  std::string item;
  bool some = false;
  while (std::getline(items, item, ',')) {
    some = true;
    int step = 1;
    std::string range = item;
    if (auto slash = item.find('/'); slash != std::string::npos) {
      range = item.substr(0, slash);
      if (!whole(item.substr(slash + 1), step) || step < 1) return std::string(name) + ": bad step in '" + item + "'";
    }
    int a = lo, b = hi;
    if (range != "*") {
      if (auto dash = range.find('-'); dash != std::string::npos) {
        if (!whole(range.substr(0, dash), a) || !whole(range.substr(dash + 1), b))
          return std::string(name) + ": bad range '" + range + "'";
      } else {
        if (!whole(range, a)) return std::string(name) + ": '" + range + "' is not a number";
        b = item.find('/') != std::string::npos ? hi : a;
      }
    }
    if (a < lo || b > hi || a > b)
      return std::string(name) + ": '" + item + "' is outside " + std::to_string(lo) + "-" + std::to_string(hi);
    for (int v = a; v <= b; v += step) bits.set(static_cast<std::size_t>(v));
  }
  if (!some) return std::string(name) + " is empty";
  return "";
}

}  // namespace

std::variant<cron_spec, std::string> parse_cron(const std::string& text) {
  std::stringstream in(text);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  if (f.size() != 5)
    return "cron '" + text + "' must have five fields (minute hour day-of-month month day-of-week), got " +
           std::to_string(f.size());
  cron_spec c;
  c.text = text;
  bool ignore = false;
  std::bitset<8> dow;
  for (const std::string& e : {field(f[0], "minute", 0, 59, c.minute, ignore), field(f[1], "hour", 0, 23, c.hour, ignore),
                               field(f[2], "day of month", 1, 31, c.dom, c.dom_any),
                               field(f[3], "month", 1, 12, c.month, ignore),
                               field(f[4], "day of week", 0, 7, dow, c.dow_any)})
    if (!e.empty()) return "cron '" + text + "': " + e;
  for (std::size_t d = 0; d < 7; ++d) c.dow[d] = dow[d];
  if (dow[7]) c.dow[0] = true;  // 7 is Sunday too
  return c;
}

bool cron_spec::matches(std::int64_t unix_s) const {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return false;
  if (!minute[static_cast<std::size_t>(tm.tm_min)] || !hour[static_cast<std::size_t>(tm.tm_hour)] ||
      !month[static_cast<std::size_t>(tm.tm_mon + 1)])
    return false;
  const bool d = dom[static_cast<std::size_t>(tm.tm_mday)];
  const bool w = dow[static_cast<std::size_t>(tm.tm_wday)];
  if (dom_any && dow_any) return true;
  if (dom_any) return w;
  if (dow_any) return d;
  return d || w;
}

std::int64_t cron_spec::last_in(std::int64_t from_s, std::int64_t to_s) const {
  auto floor_min = [](std::int64_t s) { return s >= 0 ? s / 60 * 60 : -((-s + 59) / 60) * 60; };
  for (std::int64_t m = floor_min(to_s); m >= from_s; m -= 60)
    if (matches(m)) return m;
  return -1;
}

}  // namespace kiln::config
