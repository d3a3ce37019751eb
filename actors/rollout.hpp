#pragma once
// Staged rollouts, one controller actor per model: it owns the model's route (alias, canary,
// shadow, the previous version kept loaded), asks the node for the pools a route needs,
// compares a canary's (or shadow's) outcomes with the live version's over a sliding window
// and rolls back by itself when a guard trips. Every decision is a row in `rollouts`; the
// route is stored, so a restarted kiln routes as before.
#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/gauges.hpp"
#include "actors/rollout_guard.hpp"
#include "config/config.hpp"
#include "actors/registry_calls.hpp"  // inspect for the registry rows
#include "config/registry.hpp"

namespace kiln::actors {

/// Admin: start or move a stage (shadow or canary) at a percentage; percent 0 ends it.
struct rollout_order {
  std::string model;
  std::string version;
  std::string stage;  ///< shadow | canary
  double percent = 0;
};
/// Admin: point the alias at a version (promote, or roll back by hand).
struct alias_order {
  std::string model;
  std::string version;
};
/// Admin: where a rollout stands.
struct rollout_query {
  std::string model;
};
/// One request's end on a version of a model under rollout (admission -> controller).
struct outcome_report {
  std::string version;
  bool shadow = false;  ///< a shadow copy (its output was discarded)
  outcome_sample sample;
};
/// The node's answer to ensure_pool and pool_phase: a pool's status by name.
struct ensure_pool {
  config::model_version version;
};
struct pool_phase {
  std::string model;
  std::string version;
};
/// Drains a version's pool and stops it once no request runs on it.
struct retire_pool {
  std::string model;
  std::string version;
};

/// A route as admission applies it, with the controller that hears the outcomes.
struct route_update {
  config::model_route route;
  caf::actor controller;
};

/// Where a rollout stands: the route, each side's window, and the decisions so far.
struct rollout_view {
  config::model_route route;
  window_stats live, canary, shadow, shadow_live;
  std::vector<config::rollout_row> decisions;  ///< since this controller started
};

struct rollout_deps {
  std::string model;
  config::model_route route;   ///< as stored (or the configured alias)
  config::rollout_config limits;
  caf::actor node;             ///< pools and routes
  bool stored = false;         ///< the node has a store writer (not in the simulator, actor tests)
  std::shared_ptr<fleet_gauges> gauges;  ///< hears every decision (null: none)
  std::vector<config::model_version> known;  ///< versions a route may name without a store
  /// Registrations as last received from the control node (a router node without a store):
  /// a route naming one starts its pool without asking the store.
  std::vector<config::model_version> registered;
  double previous_left_s = -1;  ///< the stored previous version's time left (-1: none)
};

struct rollout_state {
  rollout_deps d;
  outcome_window live, canary, shadow, shadow_live;
  std::vector<config::rollout_row> decisions;
  bool check_armed = false;
  std::uint64_t retire_epoch = 0;  ///< a retire timer from an older alias change does nothing
  static inline const char* name = "kiln.rollout";
};

caf::behavior rollout_controller(caf::stateful_actor<rollout_state>* self, rollout_deps deps);

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::rollout_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::alias_order)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::rollout_query)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::outcome_report)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::ensure_pool)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::pool_phase)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::retire_pool)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::route_update)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::rollout_view)
