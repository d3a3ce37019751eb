#include "config/region_shares.hpp"

#include <algorithm>
#include <set>

namespace kiln::config {

std::map<std::pair<std::string, std::string>, double> region_shares(const std::string& region,
                                                                     const std::vector<region_use_row>& fresh,
                                                                     const tenancy& limits, double floor) {
  // What each region asked, by (team, model).
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> asked;
  for (const auto& r : fresh) asked[{r.team, r.model}][r.region] = std::max(0.0, r.tokens_per_minute);
  std::map<std::pair<std::string, std::string>, double> out;
  for (auto& [key, by_region] : asked) {
    const team_config* t = limits.team(key.first);
    const team_limit* l = t ? t->limit_for(key.second) : nullptr;
    if (!l || l->tokens_per_minute <= 0) continue;
    by_region.try_emplace(region, 0.0);  // this region is live whether or not it reported yet
    if (by_region.size() < 2) continue;
    const double n = static_cast<double>(by_region.size());
    const double even = std::clamp(floor, 0.0, 1.0) * l->tokens_per_minute / n;
    double total = 0;
    for (const auto& [r, tokens] : by_region) total += even + tokens;
    out[key] = total > 0 ? (even + by_region[region]) / total : 1.0 / n;
  }
  return out;
}

}  // namespace kiln::config
