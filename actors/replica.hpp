#pragma once
// A replica: one engine under supervision, with a lifecycle
// `starting -> loading -> serving -> draining -> stopped` (or `failed` when its engine
// cannot be built). Every heartbeat period it asks its engine for its figures and reports
// them to its router with its phase: that report is its heartbeat, so a replica or engine
// that stops answering stops beating. An engine that dies is started again with fresh KV;
// past the restart intensity the replica itself ends, and its pool's supervisor decides.
#include <memory>
#include <string>

#include <caf/stateful_actor.hpp>

#include "actors/engine_actor.hpp"
#include "actors/gauges.hpp"
#include "actors/loader.hpp"
#include "actors/messages.hpp"
#include "actors/supervisor.hpp"

namespace kiln::actors {

struct replica_deps {
  engine_identity who;
  std::shared_ptr<const pool_runtime> pool;
  std::shared_ptr<fleet_gauges> gauges;
  std::shared_ptr<actors::loader> loader;
  supervisor_flags engine_restarts;
  caf::timespan heartbeat = std::chrono::seconds(1);
  /// A replica added by scaling waits this long (node start, weight copy, load, warm-up in the
  /// simulator) before its engine starts; it stays `starting` meanwhile.
  caf::timespan cold_start{0};
  /// A remote pool's replica: the upstream base URL its engine calls ("" for any other).
  std::string upstream;
};

/// Where a replica reports (again after its router was restarted).
struct router_is {
  caf::actor router;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, router_is& x) {
  return f(caf::meta::type_name("router_is"), x.router);
}

/// Chaos aimed at a replica's engine rather than at the replica.
struct engine_chaos {
  chaos_order order;
  bool kill = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_chaos& x) {
  return f(caf::meta::type_name("engine_chaos"), x.order, x.kill);
}

struct replica_state {
  replica_deps d;
  replica_phase phase = replica_phase::starting;
  caf::actor router;
  supervisor sup;
  bool engine_ready = false;  ///< the running engine has loaded
  engine_load last;
  std::string failure;
  caf::actor_clock::time_point started_at;  ///< this actor's start
  double ready_seconds = -1;                ///< from started_at to its first serving

  caf::actor engine() const { return sup.child("engine"); }
  replica_status status() const;
  void publish() const;
  static inline const char* name = "kiln.replica";
};

caf::behavior replica(caf::stateful_actor<replica_state>* self, replica_deps deps, caf::actor router);

/// What a replica of pool `p` runs with: its identity, the pool's prepared runtime, the
/// engine's restart bounds and the heartbeat from the pool's config, and its cold start.
replica_deps replica_deps_for(const config::pool_config& p, engine_identity who, std::shared_ptr<const pool_runtime> rt,
                              std::shared_ptr<fleet_gauges> gauges, std::shared_ptr<actors::loader> loader,
                              caf::timespan cold_start);

}  // namespace kiln::actors
