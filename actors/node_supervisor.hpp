#pragma once
// The root of a node's supervision tree: admission and one pool supervisor per configured
// model@version, one_for_one. It keeps every pool's latest status and hands it to admission
// (again to a restarted one, which it also registers as "admission" for the front). Admin
// calls arrive here: pool state per model, drain, chaos.
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/loader.hpp"
#include "actors/meter.hpp"
#include "actors/pool_supervisor.hpp"
#include "actors/rollout.hpp"
#include "actors/supervisor.hpp"
#include "config/capture.hpp"
#include "config/config.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"

namespace kiln::actors {

/// The registry names the front finds actors by.
inline constexpr caf::atom_value admission_name = caf::atom("admission");
inline constexpr caf::atom_value node_name = caf::atom("node");
inline constexpr caf::atom_value store_name = caf::atom("store");
/// A clustered front's global balancer: submit() hands requests to it before any admission.
inline constexpr caf::atom_value balancer_name = caf::atom("balancer");

/// Admin: the state of every pool (version) of a model.
struct pool_state_request {
  std::string model;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pool_state_request& x) {
  return f(caf::meta::type_name("pool_state_request"), x.model);
}

/// What a chaos call hit.
struct chaos_report {
  std::string target;
  std::string id;
  std::string model;
  std::string version;
  std::string action;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chaos_report& x) {
  return f(caf::meta::type_name("chaos_report"), x.target, x.id, x.model, x.version, x.action);
}

struct node_deps {
  std::shared_ptr<const config::kiln_config> cfg;
  std::shared_ptr<fleet_gauges> gauges;
  std::shared_ptr<actors::loader> loader;
  std::uint64_t chaos_seed = 1;  ///< picks "random" chaos targets
  std::shared_ptr<const config::tenancy> tenants = std::make_shared<const config::tenancy>();
  std::shared_ptr<config::store> store;           ///< null: no store writer (actor tests)
  std::shared_ptr<config::tenancy_board> board;   ///< where the store writer publishes
  meter_deps meter;                               ///< wal_prefix empty: no meter
  std::shared_ptr<config::capture_log> capture;   ///< null: no capture of served requests
  /// Stored routes, each with its previous version's seconds left (-1: none); a model
  /// without one routes to its configured live version.
  std::vector<std::pair<config::model_route, double>> routes;
  calendar_anchor calendar;  ///< the actor clock on the calendar (autoscaler schedules)
  /// false: a control node without the router role, whose tree is its store writer alone.
  bool serves = true;
  /// A control node in a cluster: where its store writer keeps the registry's part of the
  /// configuration snapshots (null: none kept).
  std::shared_ptr<config::registry_board> registry;
  /// A router node without a store: the control node's, through the control link (rollout
  /// controllers write their routes there).
  bool store_elsewhere = false;
  /// A router node without a store: the registrations its last-known-good routes name, so
  /// their pools start while the control node is away.
  std::vector<config::model_version> registered;
};

struct node_state {
  node_deps d;
  supervisor sup;
  std::map<std::string, pool_update> pools;  ///< by model@version
  std::map<std::string, route_update> routes;  ///< by model, as the controllers set them
  /// Pools of registered versions started at run time (beside the configured ones).
  std::vector<std::shared_ptr<const config::pool_config>> added;
  std::mt19937_64 rng;

  /// Every pool: configured, then added.
  std::vector<const config::pool_config*> all_pools() const;

  caf::actor admission() const { return sup.child("admission"); }
  /// The pool child's id for a pool config.
  static std::string pool_child(const config::pool_config& p) { return pool_child(p.model, p.version); }
  static std::string pool_child(const std::string& model, const std::string& version) {
    return "pool:" + model + "@" + version;
  }
  static inline const char* name = "kiln.node";
};

caf::behavior node_supervisor(caf::stateful_actor<node_state>* self, node_deps deps);

// Versions at run time (actors/node_versions.cpp).
/// The child that supervises one pool.
/// `registered`: a run-time version's registration (0 or 1), for worker nodes.
child_spec pool_child_spec(caf::stateful_actor<node_state>* self, std::shared_ptr<const config::pool_config> p,
                           std::vector<config::model_version> registered = {});
/// One rollout controller per model the node serves.
std::vector<child_spec> rollout_child_specs(caf::stateful_actor<node_state>* self);
/// ensure_pool, pool_phase, retire_pool, route_update and the admin rollout calls.
caf::message_handler node_version_calls(caf::stateful_actor<node_state>* self);
/// A registered version's pool: the model's live pool with the version's directory, files,
/// template and replicas (engine_config's "replicas", else the live pool's).
std::optional<config::pool_config> pool_for_version(const node_state& st, const config::model_version& v);

/// Spawns the node's tree; the caller keeps the handle and stops it with stop_node.
caf::actor spawn_node(caf::actor_system& sys, node_deps deps);
void stop_node(const caf::actor& node);

}  // namespace kiln::actors
