#pragma once
// Joining a cluster: the middleman's settings and types before the actor system starts, then
// the node's directory published on its cluster port and, on a front, the global balancer.
#include <memory>
#include <string>
#include <variant>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/gauges.hpp"
#include "config/config.hpp"
#include "config/snapshot.hpp"
#include "config/store.hpp"

namespace kiln::cluster {

struct cluster_handles {
  caf::actor directory;
  caf::actor balancer;  ///< null unless the node has the front role
  caf::actor control_link;  ///< a router node without the control role: its store calls go through it
  std::uint16_t port = 0;
};

/// Before the actor system exists: the middleman, its heartbeats and the wire types.
void configure_cluster(caf::actor_system_config& caf_cfg, const config::kiln_config& cfg);

/// Publishes the directory on cluster.listen and starts the balancer on a front; an error
/// line when the port cannot be bound.
/// `board`: the node's teams and keys (a control node publishes it, others follow their
/// control node into it); `snapshot_path`: the last-known-good file of a node without control.
/// `registry`: a control node's routes and versions for its snapshots (null elsewhere).
std::variant<cluster_handles, std::string> start_cluster(caf::actor_system& sys, const config::kiln_config& cfg,
                                                         const std::string& http_endpoint,
                                                         std::shared_ptr<actors::fleet_gauges> gauges,
                                                         std::shared_ptr<config::tenancy_board> board,
                                                         const std::string& snapshot_path,
                                                         std::shared_ptr<config::registry_board> registry = nullptr);
void stop_cluster(const cluster_handles& h);

/// A node without a store starts from its last-known-good snapshot, else from its config's
/// teams and keys (saying why the snapshot was not usable); the state for /admin/config.
/// `registry`: where the snapshot's routes and versions go (none without a snapshot).
config::tenancy starting_tenancy(const config::kiln_config& cfg, const std::string& snapshot_path,
                                 actors::config_state& state, config::registry_view* registry = nullptr);

}  // namespace kiln::cluster
