#pragma once
// Limits across regions: a team's tokens per minute for a model hold for all regions
// together. Each region reports what its teams asked for (tokens per minute, admitted or
// not) to the store the regions share; each region's buckets then run at its share of the
// limit, in proportion to what was asked of it, with a floor so an idle region can start.
// Every region computes its share from the same rows, so the shares add up to 1.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/store.hpp"

namespace kiln::config {

struct region_use_row {
  std::string region;
  std::string team;
  std::string model;
  double tokens_per_minute = 0;  ///< asked of the region lately
  std::int64_t at = 0;           ///< unix seconds of the report
};

/// A region's share of each limit it shares with other live regions, by (team, model): a
/// limit no other region reported stays whole (absent). `floor` is the part of the limit
/// spread evenly over the live regions before the rest follows what was asked.
std::map<std::pair<std::string, std::string>, double> region_shares(const std::string& region,
                                                                     const std::vector<region_use_row>& fresh,
                                                                     const tenancy& limits, double floor = 0.1);

}  // namespace kiln::config
