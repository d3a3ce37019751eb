#pragma once
// Router shard for one model@version, and the owner of every request it routes.
//
// Ranking: each request has an affinity key (its conversation id, or its team and the
// opening of its prompt); serving replicas are ranked for that key by rendezvous hashing, so
// a conversation keeps finding the replica that holds its cached prefix and adding a replica
// moves few keys. A replica above 1.25x the average tokens in flight (counting what was sent
// since its last report) is skipped for the next in rank.
//
// Heartbeats: each replica's status every second is its heartbeat. A replica that misses 3
// leaves the ranking and returns with its next beat; only `serving` replicas rank at all.
//
// Ownership: the shard sends each request to an engine and hears its first token, end and
// failure. Before the first token a lost replica, a failed engine or a refusal sends it to
// the next replica in rank (at most twice, within a retry budget); after it the client gets
// one error event. Deadlines (first token, whole request) end requests that take too long.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/messages.hpp"
#include "actors/ownership.hpp"

namespace kiln::actors {

/// How a router ranks replicas: the rendezvous ranking with the 1.25x load bound (the
/// default), or one of the two baselines it is measured against.
enum class routing_policy : std::uint8_t { prefix_affinity_bounded, round_robin, least_tokens };
/// From its config name; prefix_affinity_bounded for any other.
routing_policy routing_policy_from(std::string_view name);

struct router_settings {
  std::string model;
  std::string version;
  std::string region;
  caf::timespan heartbeat = std::chrono::seconds(1);
  caf::timespan first_token_timeout = std::chrono::seconds(60);
  caf::timespan request_timeout = std::chrono::seconds(600);
  routing_policy policy = routing_policy::prefix_affinity_bounded;
};

/// One replica as its router sees it (the seed's pool state row).
struct replica_view {
  std::string replica_id;
  std::string version;
  std::string phase;
  std::int32_t queue_depth = 0;
  std::int64_t tokens_in_flight = 0;
  double last_heartbeat_age_ms = -1;  ///< -1: never beat
  std::int32_t missed_heartbeats = 0;
  bool in_ranking = false;
  std::uint32_t restarts = 0;
  bool warm = false;  ///< held back from routing by its pool until a scale-up needs it
  bool leaving = false;  ///< drained by its autoscaler: removed from the pool once stopped
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_view& x) {
  return f(caf::meta::type_name("replica_view"), x.replica_id, x.version, x.phase, x.queue_depth, x.tokens_in_flight,
           x.last_heartbeat_age_ms, x.missed_heartbeats, x.in_ranking, x.restarts, x.warm,
           x.leaving);
}

/// A pool (model@version) as its router and supervisor see it.
struct pool_view {
  std::string model;
  std::string version;
  std::string status;  ///< loading | serving | degraded | failed
  std::vector<replica_view> replicas;
  std::int32_t queue_depth = 0;
  std::int64_t tokens_in_flight = 0;
  double prefix_hit_rate = 0;
  std::int64_t active_requests = 0;
  std::uint64_t retried = 0;
  std::uint64_t restarts = 0;  ///< by the pool's supervisor
  std::int32_t retry_after_s = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_view& x) {
  return f(caf::meta::type_name("pool_view"), x.model, x.version, x.status, x.replicas, x.queue_depth,
           x.tokens_in_flight, x.prefix_hit_rate, x.active_requests, x.retried, x.restarts, x.retry_after_s);
}

/// The replicas a router routes to (from its pool's supervisor, at start and after restarts).
struct replica_set {
  std::vector<caf::actor> replicas;
  std::vector<std::string> ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_set& x) {
  return f(caf::meta::type_name("replica_set"), x.replicas, x.ids);
}

/// A replica was started again (it reports its engine when it has one).
struct replica_up {
  std::string replica_id;
  caf::actor replica;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_up& x) {
  return f(caf::meta::type_name("replica_up"), x.replica_id, x.replica);
}

/// A replica the pool removed (drained, then stopped): the router forgets it.
struct replica_gone {
  std::string replica_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_gone& x) {
  return f(caf::meta::type_name("replica_gone"), x.replica_id);
}

struct router_shard_state {
  struct entry {
    std::string replica_id;
    std::uint64_t id_hash = 0;        ///< of replica_id: its rendezvous weight's half
    caf::actor replica;
    caf::actor engine;                ///< where requests go while it serves
    replica_phase phase = replica_phase::starting;
    bool beat = false;                ///< has it ever reported
    caf::actor_clock::time_point last_beat;
    std::int64_t reported = 0;        ///< tokens in flight at the last report
    std::int64_t sent = 0;            ///< request tokens sent to this engine, all told
    std::int64_t acked = 0;           ///< of those, what the last report already included
    engine_load load;
    std::uint32_t restarts = 0;
    std::int64_t tokens() const { return reported + (sent - acked); }
  };

  router_settings cfg;
  std::vector<entry> replicas;
  ownership owned;
  /// Deadlines in the order they fall due (each pool's timeouts are constant, so arrival
  /// order is deadline order); one timer, armed for the earliest, sweeps them.
  std::deque<std::pair<caf::actor_clock::time_point, request_id>> first_token_due, end_due;
  bool sweep_armed = false;
  mutable std::size_t rr_next = 0;  ///< round_robin: where the next turn starts
  std::uint64_t retried = 0;
  int ranked_published = -1;  ///< the ranking's size as last published to the gauges
  std::shared_ptr<fleet_gauges> gauges;

  /// Heartbeats missed by now: one is missed when half a period has passed beyond when it
  /// was due.
  int missed_beats(const entry& e, caf::actor_clock::time_point now) const;
  bool in_ranking(const entry& e, caf::actor_clock::time_point now) const;
  /// A replica whose last beat is older than this is out (3 beats missed by `now`).
  caf::actor_clock::time_point beat_cutoff(caf::actor_clock::time_point now) const;
  /// Adds a replica the router does not know yet.
  entry& add_replica(const std::string& id, caf::actor replica);
  /// Index of the replica for `key` carrying `tokens` more, among ranked replicas not in
  /// `exclude`; -1 when there is none.
  int pick(std::uint64_t key, std::int64_t tokens, caf::actor_clock::time_point now,
           const std::vector<std::string>& exclude = {}) const;
  entry* find_replica(const std::string& id);
  /// Applies a heartbeat; returns whether it names an engine this router had not seen.
  bool on_status(const replica_status& s, caf::actor_clock::time_point now);
  pool_view view(caf::actor_clock::time_point now) const;
  void count(errc code);
  static inline const char* name = "kiln.router";
};

/// The affinity key of a request: conversation id if given, else team + first prompt tokens.
std::uint64_t affinity_key(const request& r);

caf::behavior router_shard(caf::stateful_actor<router_shard_state>* self, router_settings cfg,
                           std::shared_ptr<fleet_gauges> gauges);

}  // namespace kiln::actors
