#pragma once
// Admission for a region: resolves the model (an alias to its live version, or a pinned
// model@version) to its pool, refuses what the pool cannot take now (loading, degraded,
// failed), renders and tokenizes the prompt with the pool's template and tokenizer, checks
// it against the pool's limits, and hands it to the pool's router. Failures end at the sink.
#include <array>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/id_map.hpp"
#include "actors/messages.hpp"
#include "actors/pool_gate.hpp"
#include "actors/pool_supervisor.hpp"
#include "actors/rollout.hpp"
#include "actors/team_ledger.hpp"
#include "config/capture.hpp"
#include "config/config.hpp"

namespace kiln::actors {

/// New teams, keys or limits (from the store writer, through the node).
struct tenancy_update {
  std::shared_ptr<const config::tenancy> tenants;
};

/// A batch runner asks how busy a model's pools are (every version's, summed).
struct batch_room_ask {
  std::string model;
};
struct batch_room {
  std::int64_t online_waiting = 0;    ///< interactive and standard requests queued
  std::int64_t batch_waiting = 0;     ///< batch requests queued
  std::int64_t online_in_flight = 0;  ///< charged tokens of running interactive and standard requests
  std::int64_t batch_in_flight = 0;   ///< charged tokens of running batch requests
  std::int64_t capacity = 0;          ///< the pools' tokens in flight at full load (0: unknown)
  int serving = 0;                    ///< pools of the model that serve now
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_room_ask& x) {
  return f(caf::meta::type_name("batch_room_ask"), x.model);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_room& x) {
  return f(caf::meta::type_name("batch_room"), x.online_waiting, x.batch_waiting, x.online_in_flight, x.batch_in_flight,
           x.capacity, x.serving);
}

struct admission_state {
  std::shared_ptr<const config::kiln_config> cfg;
  std::map<std::string, pool_update, std::less<>> pools;  ///< by model@version
  std::shared_ptr<fleet_gauges> gauges;                    ///< sheds, bucket fill, queue depths
  team_ledger ledger;                                      ///< buckets and slots per team and model
  std::map<std::string, pool_gate, std::less<>> gates;     ///< load and queues per model@version
  /// The queue depths last given to the gauges, per model@version and tier: an unchanged
  /// depth is not written again.
  std::map<std::string, std::array<std::size_t, 3>, std::less<>> queues_shown;
  id_map<std::string> gate_of;  ///< admitted: its pool
  bool sweep_armed = false;
  std::shared_ptr<config::capture_log> capture;  ///< null: no capture
  caf::actor_clock::time_point started;          ///< capture times count from here
  std::unordered_map<request_id, config::capture_record, request_id_hash> captured;  ///< until they end
  std::map<std::string, route_update, std::less<>> routes;  ///< by model: live, canary, shadow
  std::unordered_map<request_id, std::string, request_id_hash> shadows;  ///< shadow copies running: model
  caf::actor discard;  ///< the sink of shadow copies (made on first use)
  /// Limits across regions: tokens per minute asked lately by (team, model), smoothed, and
  /// when they were last taken.
  std::map<std::pair<std::string, std::string>, double> asked_per_minute;
  caf::actor_clock::time_point asked_since;

  /// The version an alias request goes to: its route's canary or live version (a canary
  /// whose pool does not serve yet leaves the request on the live version).
  std::string version_of(const std::string& model, const request& r) const;

  /// The gate of a pool, made on first use from its config.
  pool_gate& gate(const std::string& key);
  /// Bucket fill and queue depths for /metrics after a change.
  void publish(const std::string& team, const std::string& model, const std::string& pool,
               caf::actor_clock::time_point now);

  /// Fills in version, prompt tokens and defaults and names the router, or says why the
  /// request cannot run.
  std::variant<caf::actor, stream_error> admit(request& r, caf::actor_clock::time_point now) const;
  static inline const char* name = "kiln.admission";
};

caf::behavior admission(caf::stateful_actor<admission_state>* self, std::shared_ptr<const config::kiln_config> cfg,
                        std::shared_ptr<const config::tenancy> tenants, std::shared_ptr<fleet_gauges> gauges,
                        std::shared_ptr<config::capture_log> capture);

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::tenancy_update)

namespace kiln::actors {

}  // namespace kiln::actors
