#pragma once
// The autoscaler's decision as a plain function: grow when tokens in flight pass the share of
// the serving replicas' capacity (or the queue passes its trigger), shrink by one drained
// replica at most once per period when the rest would stay well below it. Only serving
// replicas count as capacity; replicas already starting count against what is added. The
// bounds come from the store's `pools` table when it has the pool, the capacity from the
// version's gate; scheduled entries raise the minimum ahead of known peaks.
#include <chrono>
#include <cstdint>
#include <string>

#include <deque>
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/registry_calls.hpp"
#include "config/config.hpp"

namespace kiln::actors {

struct scale_inputs {
  int serving = 0;   ///< replicas serving: the capacity that counts
  int starting = 0;  ///< added and not serving yet (cold start)
  int draining = 0;  ///< on their way out
  std::int64_t tokens_in_flight = 0;
  std::int64_t queue_depth = 0;        ///< requests waiting in admission for room in the pool
  double capacity_per_replica = 0;     ///< tokens in flight one replica carries (the gate's figure)
  double since_last_removal_s = 1e18;  ///< since the autoscaler last added or removed replicas
  double tokens_per_request = 0;       ///< what a waiting request will add to tokens in flight
  std::int64_t recent_peak_tokens = 0; ///< the most tokens in flight over the last minute (scale-down looks at it)
};

struct scale_decision {
  int add = 0;              ///< replicas to start
  bool remove_one = false;  ///< drain one replica, removed once it has drained
  std::string why;          ///< for the log and the report; "" when nothing changes
};

scale_decision decide_scale(const scale_inputs& in, const config::autoscale_config& c);

/// Tokens in flight one replica carries: the configured capacity_tokens, else the version's
/// gated figure (`gated`, 0: not gated), else what the pool's KV cache holds per replica.
double per_replica_capacity(const config::pool_config& p, double gated);

/// The most replicas a schedule entry asks for at `unix_s` (an entry holds from its lead
/// before each time it names until its hold after); 0 when none is active.
int scheduled_minimum(const config::autoscale_config& c, std::int64_t unix_s);

/// Where the actor clock stands on the calendar: at `at` it is `unix_s` (UTC). The node
/// anchors it to the wall clock when it starts, the simulator to its scenario's start.
struct calendar_anchor {
  caf::actor_clock::time_point at{};
  std::int64_t unix_s = 0;
  std::int64_t unix_at(caf::actor_clock::time_point now) const {
    return unix_s + std::chrono::duration_cast<std::chrono::seconds>(now - at).count();
  }
};

/// Autoscaler -> its pool's supervisor: start `add` replicas (each after the pool's cold start).
struct scale_up_order {
  int add = 0;
  int warm = 0;  ///< warm replicas to keep behind the added ones
};
/// Autoscaler -> pool: how many replicas serve now (capacity counts only those).
struct serving_count {
  int serving = 0;
};
/// Autoscaler -> pool: keep this many warm replicas (loaded, outside routing).
struct warm_order {
  int warm = 0;
};
/// Autoscaler -> pool: a drained replica leaves the pool.
struct remove_replica {
  std::string replica_id;
};

struct autoscaler_deps {
  std::shared_ptr<const config::pool_config> cfg;
  caf::actor pool;
  std::shared_ptr<fleet_gauges> gauges;
  std::string region;
  calendar_anchor calendar;
};

struct autoscaler_state {
  autoscaler_deps d;
  /// What the store last said of the pool (its `pools` row, its version's gated capacity);
  /// nothing until it answers, or where no store runs: the config's values hold.
  scale_settings stored;
  std::deque<std::pair<caf::actor_clock::time_point, std::int64_t>> recent;  ///< tokens in flight, last minute
  caf::actor_clock::time_point last_change;  ///< the last add or removal: a period before the next removal
  bool changed_once = false;
  static inline const char* name = "kiln.autoscaler";
};

/// One autoscaler per pool (and region): every interval it reads the pool's view, decides,
/// starts replicas or drains one, and removes a drained one once it has stopped.
caf::behavior autoscaler(caf::stateful_actor<autoscaler_state>* self, autoscaler_deps deps);

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::scale_up_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::remove_replica)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::serving_count)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::warm_order)
