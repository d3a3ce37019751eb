#pragma once
// An operator's region drill, from a clustered front's admin API to its balancer: `drain`
// (no new requests go to the region for `seconds`, 0: until `undrain`; those running finish)
// or `kill` (every router node of the region ends its process at once: a region lost).
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>

namespace kiln::actors {

struct region_drill {
  std::string region;
  std::string action;  ///< drain | undrain | kill
  double seconds = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, region_drill& x) {
  return f(caf::meta::type_name("region_drill"), x.region, x.action, x.seconds);
}

/// What a drill did: the region's router nodes it reached.
struct region_drill_report {
  std::string region;
  std::string action;
  std::vector<std::string> nodes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, region_drill_report& x) {
  return f(caf::meta::type_name("region_drill_report"), x.region, x.action, x.nodes);
}

/// A front's view of the configuration each router node serves from (its balancer hears it
/// with each node's pool report).
struct cluster_config_ask {};
struct node_config_row {
  std::string node;
  std::string region;
  std::string source;
  std::string version;
};

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::cluster_config_ask)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<kiln::actors::node_config_row>)
