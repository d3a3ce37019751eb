#pragma once
// Router shard for one model. Each request has an affinity key (its conversation id, or else
// its team and the opening of its prompt); replicas are ranked for that key by rendezvous
// hashing, so a conversation keeps finding the replica that holds its cached prefix, and
// adding a replica moves few keys. A replica above 1.25x the pool's average tokens in flight
// (counting what was sent since its last report) is skipped for the next in rank.
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
    std::int64_t sent = 0;            ///< job tokens sent to this replica, all told
    std::int64_t acked = 0;           ///< of those, what the last report already included
    std::int32_t queue_depth = 0;
    std::int64_t load() const { return reported + (sent - acked); }
  };
  std::string model;
  std::vector<entry> replicas;

  /// Index of the replica for `key` carrying `tokens` more; -1 when there is none.
  int pick(std::uint64_t key, std::int64_t tokens) const;
  void on_report(const load_report& r);
  static inline const char* name = "kiln.router";
};

/// The affinity key of a job: conversation id if given, else team + first prompt tokens.
std::uint64_t affinity_key(const chat_job& job);

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
