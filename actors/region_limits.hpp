#pragma once
// Limits across regions (config/region_shares.hpp), between a region's admission and its
// store writer. Where the store is shared, the store writer asks admission every few seconds
// what its teams asked for, records it for the other regions to see, and hands admission
// back this region's share of each limit.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

#include "config/region_shares.hpp"

namespace kiln::actors {

struct region_use_ask {};

/// Tokens per minute each team asked of this region lately, by model (every limited pair).
struct region_use_report {
  std::string region;
  std::vector<config::region_use_row> rows;
};

struct region_shares_update {
  std::map<std::pair<std::string, std::string>, double> shares;  ///< (team, model) -> share; absent: whole
};

// A router node apart from its control node sends its report there (cluster/control_link).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, region_use_report& x) {
  return f(caf::meta::type_name("region_use_report"), x.region, x.rows);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, region_shares_update& x) {
  return f(caf::meta::type_name("region_shares_update"), x.shares);
}

}  // namespace kiln::actors

namespace kiln::config {
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, region_use_row& x) {
  return f(caf::meta::type_name("region_use_row"), x.region, x.team, x.model, x.tokens_per_minute, x.at);
}
}  // namespace kiln::config

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::region_use_ask)
