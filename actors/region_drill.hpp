#pragma once
// An operator's region drill, from a clustered front's admin API to its balancer: `drain`
// (no new requests go to the region for `seconds`, 0: until `undrain`; those running finish)
// or `kill` (every router node of the region ends its process at once: a region lost).
#include <string>
#include <vector>

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

}  // namespace kiln::actors
