#pragma once
// A node's membership actor, published on its cluster port. It dials its seeds (again every
// second while one is unreached), introduces itself to each node it reaches (join), learns
// the nodes they know and dials those too, so every pair of nodes holds a direct connection.
// A member whose connection ends (killed: at once; frozen: after the middleman's connection
// timeout) leaves the membership; its endpoint is dialled again until it returns.
//
// The control node's configuration reaches the other nodes through it too (see
// directory_deps).
//
// Local actors watch it (the front's balancer) and get the whole membership on each change.
// A request sent to it goes to the node's admission, whichever instance is current, so other
// nodes hold one handle per node that survives admission's restarts.
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include <caf/actor_clock.hpp>

#include "actors/gauges.hpp"
#include "cluster/wire.hpp"
#include "config/config.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"

namespace kiln::cluster {

struct directory_deps {
  member_info self;  ///< this node (its directory handle is filled in)
  std::vector<config::cluster_endpoint> seeds;
  caf::timespan redial_every = std::chrono::seconds(1);
  // Configuration. A control node pushes a snapshot of its board to every other node when it
  // changes (looking every `publish_every`) and to each node that joins; another node follows
  // the control node of its nearest region, sets its board from each snapshot and keeps the
  // latest on disk (`snapshot_path`) as its last-known-good.
  std::shared_ptr<config::tenancy_board> board;
  std::shared_ptr<config::registry_board> registry;  ///< a control node's routes and versions (null: none)
  std::shared_ptr<actors::fleet_gauges> gauges;
  std::string snapshot_path;
  std::vector<std::string> regions;  ///< preference: whose control node to follow
  caf::timespan publish_every = std::chrono::milliseconds(250);
  std::int64_t unix_at_start = 0;    ///< the calendar at clock_at_start (snapshots' made_unix)
  caf::actor_clock::time_point clock_at_start;
};

caf::actor spawn_directory(caf::actor_system& sys, directory_deps deps);

}  // namespace kiln::cluster
