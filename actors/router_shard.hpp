#pragma once
// Router shard for one model: picks the replica with the fewest tokens in flight, counting
// what it sent since that replica's last report so a burst spreads out.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/stateful_actor.hpp>

#include "actors/messages.hpp"

namespace kiln::actors {

struct router_shard_state {
  struct entry {
    caf::actor replica;
    std::string replica_id;
    std::int64_t reported = 0;        ///< tokens in flight at the last report
    std::int64_t sent_since = 0;      ///< tokens of jobs sent since that report
    std::int32_t queue_depth = 0;
  };
  std::string model;
  std::vector<entry> replicas;

  /// Index of the least-loaded replica; -1 when there is none.
  int pick() const;
  void on_report(const load_report& r);
  static inline const char* name = "kiln.router";
};

caf::behavior router_shard(caf::stateful_actor<router_shard_state>* self, std::string model);

/// Tells a router which replicas serve its model (sent once at wiring time).
struct replica_set {
  std::vector<caf::actor> replicas;
  std::vector<std::string> ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_set& x) {
  return f(caf::meta::type_name("replica_set"), x.replicas, x.ids);
}

}  // namespace kiln::actors
