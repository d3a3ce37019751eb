#pragma once
// A replica's stand-in on a router node without the worker role: its pool supervises it as it
// would a replica, and it keeps one real replica hosted on a worker node of its region
// (worker_host.hpp). It asks the node's directory for a worker, has the replica started there
// with the router's handle, and then passes on what the pool sends (the router after its
// restart, drain, chaos, state). The hosted replica's end, or its worker node's loss, ends
// the stand-in with the same reason, so the pool starts another (placed afresh); the
// stand-in's end stops the hosted replica. Until placed it beats `starting` itself.
#include <memory>
#include <string>
#include <utility>

#include <caf/stateful_actor.hpp>

#include "actors/replica.hpp"
#include "actors/worker_host.hpp"

namespace kiln::actors {

struct remote_replica_state {
  replica_deps d;
  caf::actor router;
  std::vector<config::model_version> registered;  ///< its version's registration (run-time versions)
  caf::actor remote;  ///< the hosted replica, once placed
  bool placing = false;
  bool drained = false;  ///< drained before it was placed: it stays stopped
  std::string last_why;  ///< why the last placement failed (said once)
  /// The worker that hosts it and the replica id, for the functor that unhosts it at the end.
  std::shared_ptr<std::pair<caf::actor, std::string>> placed;
  static inline const char* name = "kiln.remote_replica";
};

caf::behavior remote_replica(caf::stateful_actor<remote_replica_state>* self, replica_deps deps, caf::actor router,
                             std::vector<config::model_version> registered);

}  // namespace kiln::actors
