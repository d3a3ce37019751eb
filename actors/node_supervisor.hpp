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
#include "actors/supervisor.hpp"
#include "config/capture.hpp"
#include "config/config.hpp"
#include "config/store.hpp"

namespace kiln::actors {

/// The registry names the front finds actors by.
inline constexpr caf::atom_value admission_name = caf::atom("admission");
inline constexpr caf::atom_value node_name = caf::atom("node");
inline constexpr caf::atom_value store_name = caf::atom("store");

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
};

struct node_state {
  node_deps d;
  supervisor sup;
  std::map<std::string, pool_update> pools;  ///< by model@version
  std::mt19937_64 rng;

  caf::actor admission() const { return sup.child("admission"); }
  /// The pool child's id for a pool config.
  static std::string pool_child(const config::pool_config& p) { return "pool:" + p.model + "@" + p.version; }
  static inline const char* name = "kiln.node";
};

caf::behavior node_supervisor(caf::stateful_actor<node_state>* self, node_deps deps);

/// Spawns the node's tree; the caller keeps the handle and stops it with stop_node.
caf::actor spawn_node(caf::actor_system& sys, node_deps deps);
void stop_node(const caf::actor& node);

}  // namespace kiln::actors
