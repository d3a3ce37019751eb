#pragma once
// Limits across regions (config/region_shares.hpp), between a region's admission and the
// store writer. Every few seconds what admission's teams asked for is recorded in the store
// for the other regions to see, and admission gets back this region's share of each limit
// (asked by the store writer itself where the store is shared, by the control link on a
// router node apart from its control node).
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/error.hpp>
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

/// How often a region's use goes to the store and its shares come back.
inline constexpr auto kRegionSharesEvery = std::chrono::seconds(5);

/// One exchange: what admission's teams asked for goes to `store` (the store writer, this
/// node's or, through the control link, the control node's), whose answer, this region's
/// shares, goes back to admission. Either missing or not answering: nothing changes.
template <class Self>
void exchange_region_shares(Self* self, const caf::actor& admission, const caf::actor& store) {
  if (!admission || !store) return;
  self->request(admission, std::chrono::seconds(3), region_use_ask{})
      .then(
          [self, admission, store](region_use_report& rep) {
            self->request(store, std::chrono::seconds(3), std::move(rep))
                .then([self, admission](region_shares_update& u) { self->send(admission, std::move(u)); },
                      [](caf::error&) {});
          },
          [](caf::error&) {});
}

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
