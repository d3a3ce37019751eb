#pragma once
// Replicas on worker nodes. A router node without the worker role runs each replica of its
// pools as a stand-in (remote_replica.hpp) that asks a worker node of its region to host the
// real one: the worker host loads what the pool serves with (once per pool, off the actor
// threads), starts the replica with the router's handle, and answers the replica's handle.
// From then on the replica beats to the router and its engine takes the router's requests
// and streams to their sinks directly, across nodes.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/gauges.hpp"
#include "actors/loader.hpp"
#include "actors/pool_runtime.hpp"
#include "actors/registry_calls.hpp"  // model_version on the wire
#include "config/config.hpp"
#include "config/registry.hpp"

namespace kiln::actors {

/// Where a stand-in asks for a worker: the node's directory, by this registry name. It answers
/// a worker node's handle (one that takes host_replica) for a replica id, or an error when its
/// region has no worker node.
inline constexpr caf::atom_value worker_finder_name = caf::atom("wfinder");
using find_worker_atom = caf::atom_constant<caf::atom("findwrk")>;
/// The worker host's own registry name on a worker node (its directory hands it host_replica).
inline constexpr caf::atom_value worker_host_name = caf::atom("whost");

/// Start (or find, when asked again) a replica of model@version that reports to `router`.
/// A version registered at run time comes with its registration (the worker derives its pool
/// from its own pool of the model, as the router node did, and pulls and checks its weights);
/// a configured one is the worker's own [[pools]] entry.
struct host_replica {
  std::string replica_id;
  std::string model;
  std::string version;
  std::string region;
  caf::actor router;
  std::int64_t cold_start_ms = 0;
  std::vector<config::model_version> registered;  ///< 0 or 1
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_replica& x) {
  return f(caf::meta::type_name("host_replica"), x.replica_id, x.model, x.version, x.region, x.router, x.cold_start_ms,
           x.registered);
}

/// Stop a hosted replica (its stand-in ended).
struct unhost_replica {
  std::string replica_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, unhost_replica& x) {
  return f(caf::meta::type_name("unhost_replica"), x.replica_id);
}

struct worker_host_deps {
  std::shared_ptr<const config::kiln_config> cfg;
  std::shared_ptr<fleet_gauges> gauges;
  std::shared_ptr<actors::loader> loader;
};

struct worker_host_state {
  worker_host_deps d;
  /// Pools of registered versions, derived when first asked for (by model@version).
  std::map<std::string, std::shared_ptr<const config::pool_config>> registered;
  /// By model@version: what its replicas serve with (null while it loads).
  std::map<std::string, std::shared_ptr<const pool_runtime>> runtimes;
  /// Asks waiting for a pool still loading.
  std::map<std::string, std::vector<std::pair<host_replica, caf::typed_response_promise<caf::actor>>>> waiting;
  std::map<std::string, caf::actor> hosted;  ///< by replica id
  /// Pools that could not be prepared, by model@version: when; asked again after a while,
  /// they are prepared afresh (an endpoint put right, a disk with room again).
  std::map<std::string, caf::actor_clock::time_point> failed_at;
  static inline const char* name = "kiln.worker_host";
};

/// Starts loading every pool in its config at once, so the first replicas start quickly.
/// A pool that could not be prepared is tried again when asked for at least this long after.
inline constexpr auto kPrepareRetry = std::chrono::seconds(5);
caf::behavior worker_host(caf::stateful_actor<worker_host_state>* self, worker_host_deps deps);

}  // namespace kiln::actors
