#pragma once
// A remote pool's upstreams in the store (`pool_upstreams`): the pool reads them at its start
// (where operators changed them, they replace the config's list) and writes the list after
// each change through the admin API, so a restart serves from the same upstreams.
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace kiln::actors {

struct pool_upstreams_write {
  std::string model;
  std::string version;
  std::string region;
  std::vector<std::string> urls;
};

struct pool_upstreams_call {
  std::string model;
  std::string version;
  std::string region;
};

struct pool_upstreams {
  bool stored = false;  ///< false: never changed, the config's list holds
  std::vector<std::string> urls;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_upstreams_write& x) {
  return f(caf::meta::type_name("pool_upstreams_write"), x.model, x.version, x.region, x.urls);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_upstreams_call& x) {
  return f(caf::meta::type_name("pool_upstreams_call"), x.model, x.version, x.region);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_upstreams& x) {
  return f(caf::meta::type_name("pool_upstreams"), x.stored, x.urls);
}

}  // namespace kiln::actors
