#pragma once
// A node's membership actor, published on its cluster port. It dials its seeds (again every
// second while one is unreached), introduces itself to each node it reaches (join), learns
// the nodes they know and dials those too, so every pair of nodes holds a direct connection.
// A member whose connection ends (killed: at once; frozen: after the middleman's connection
// timeout) leaves the membership; its endpoint is dialled again until it returns.
//
// Local actors watch it (the front's balancer) and get the whole membership on each change.
// A request sent to it goes to the node's admission, whichever instance is current, so other
// nodes hold one handle per node that survives admission's restarts.
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "cluster/wire.hpp"
#include "config/config.hpp"

namespace kiln::cluster {

struct directory_deps {
  member_info self;  ///< this node (its directory handle is filled in)
  std::vector<config::cluster_endpoint> seeds;
  caf::timespan redial_every = std::chrono::seconds(1);
};

caf::actor spawn_directory(caf::actor_system& sys, directory_deps deps);

}  // namespace kiln::cluster
