#pragma once
// What crosses nodes: the cluster's own messages (membership) and the registration of every
// message type that travels between nodes over CAF's middleman. A type that crosses nodes
// must be registered on both sides (an unregistered one fails remotely as unexpected_message);
// tests/cluster round-trips each of them through a second process.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

namespace kiln::cluster {

using join_atom = caf::atom_constant<caf::atom("join")>;        ///< a node introduces itself
using watch_atom = caf::atom_constant<caf::atom("watch")>;      ///< a local actor follows membership
using members_atom = caf::atom_constant<caf::atom("members")>;  ///< the membership as it is now
using redial_atom = caf::atom_constant<caf::atom("redial")>;    ///< connect to seeds not yet reached
using regions_atom = caf::atom_constant<caf::atom("regions")>;  ///< the balancer's view of regions
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;  ///< a control node's config snapshot (bytes)
using die_atom = caf::atom_constant<caf::atom("die")>;            ///< region drill: the node's process ends
using publish_atom = caf::atom_constant<caf::atom("publish")>;    ///< a control node looks for changes
using health_atom = caf::atom_constant<caf::atom("health")>;      ///< a router node's pools, as the balancer asks
using control_atom = caf::atom_constant<caf::atom("control")>;    ///< the store writer of the control node followed

/// One node as the others see it. `directory` is its membership actor: requests for its
/// region go there (it hands them to its admission, whichever instance is current), and its
/// down message is the node's loss (a killed process at once, a frozen one after the
/// middleman's connection timeout).
struct member_info {
  std::string node;
  std::string region;
  std::uint32_t roles = 0;   ///< config::role_bit()s
  std::string endpoint;      ///< its cluster listen address, host:port
  std::string http;          ///< its HTTP front, host:port (empty: none)
  caf::actor directory;
  friend bool operator==(const member_info& a, const member_info& b) {
    return a.node == b.node && a.region == b.region && a.roles == b.roles && a.endpoint == b.endpoint &&
           a.http == b.http && a.directory == b.directory;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, member_info& x) {
  return f(caf::meta::type_name("member_info"), x.node, x.region, x.roles, x.endpoint, x.http, x.directory);
}

/// A router node's pools by model, as its directory reports them to the balancer: a model is
/// serving where some pool of it serves, unhealthy where it has pools and none serves
/// (degraded, failed or still loading).
/// It also names the configuration it serves from (GET /admin/config on a front lists them).
struct node_health {
  std::vector<std::string> serving;
  std::vector<std::string> unhealthy;
  std::string config_source;   ///< store | control | last-known-good | config
  std::string config_version;  ///< its snapshot's version; empty: none
  friend bool operator==(const node_health& a, const node_health& b) {
    return a.serving == b.serving && a.unhealthy == b.unhealthy && a.config_source == b.config_source &&
           a.config_version == b.config_version;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_health& x) {
  return f(caf::meta::type_name("node_health"), x.serving, x.unhealthy, x.config_source, x.config_version);
}

/// Registers every type that crosses nodes, and the middleman's settings: heartbeats every
/// `heartbeat_ms`, a peer silent for `connection_timeout_ms` is down.
void add_wire_types(caf::actor_system_config& cfg);
void set_heartbeats(caf::actor_system_config& cfg, int heartbeat_ms, int connection_timeout_ms);

}  // namespace kiln::cluster
