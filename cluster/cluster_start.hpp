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
#include "config/store.hpp"

namespace kiln::cluster {

struct cluster_handles {
  caf::actor directory;
  caf::actor balancer;  ///< null unless the node has the front role
  std::uint16_t port = 0;
};

/// Before the actor system exists: the middleman, its heartbeats and the wire types.
void configure_cluster(caf::actor_system_config& caf_cfg, const config::kiln_config& cfg);

/// Publishes the directory on cluster.listen and starts the balancer on a front; an error
/// line when the port cannot be bound.
std::variant<cluster_handles, std::string> start_cluster(caf::actor_system& sys, const config::kiln_config& cfg,
                                                         const std::string& http_endpoint,
                                                         std::shared_ptr<actors::fleet_gauges> gauges);
void stop_cluster(const cluster_handles& h);

/// A front-only node's teams and keys: the config's (it holds no store).
config::tenancy tenancy_from_config(const config::kiln_config& cfg);

}  // namespace kiln::cluster
