#pragma once
// A router node without the control role reaches the store through this actor, registered
// under the store writer's name: the meter's folds, the autoscalers' and rollout controllers'
// reads and writes and the admin API's store calls go to the store writer of the control node
// its directory follows, found again after that one is lost. While none is reachable a call
// is answered (after one try to find one) with an `unavailable` error: limit changes, registrations and rollouts
// wait, usage stays in the node's log, and requests are served from the last snapshot.
// Every few seconds it also carries the region's use of team limits to the control node and
// hands the shares that come back to admission (limits across regions).
#include <caf/actor.hpp>
#include <caf/fwd.hpp>

namespace kiln::cluster {

/// `directory`: the node's own directory (cluster/directory), which answers control_atom.
caf::actor spawn_control_link(caf::actor_system& sys, caf::actor directory);

}  // namespace kiln::cluster
