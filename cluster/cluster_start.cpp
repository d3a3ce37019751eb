#include "cluster/cluster_start.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include "cluster/balancer.hpp"
#include "cluster/directory.hpp"
#include "cluster/wire.hpp"

namespace kiln::cluster {

void configure_cluster(caf::actor_system_config& caf_cfg, const config::kiln_config& cfg) {
  set_heartbeats(caf_cfg, cfg.cluster.heartbeat_ms, cfg.cluster.connection_timeout_ms);
  add_wire_types(caf_cfg);
}

std::variant<cluster_handles, std::string> start_cluster(caf::actor_system& sys, const config::kiln_config& cfg,
                                                         const std::string& http_endpoint,
                                                         std::shared_ptr<actors::fleet_gauges> gauges) {
  const auto& cc = cfg.cluster;
  directory_deps dd;
  dd.self.node = cc.node;
  dd.self.region = cfg.region;
  dd.self.roles = cc.roles;
  dd.self.endpoint = cc.listen.str();
  dd.self.http = http_endpoint;
  dd.seeds = cc.seeds;
  cluster_handles h;
  h.directory = spawn_directory(sys, dd);
  auto port = sys.middleman().publish(h.directory, cc.listen.port, cc.listen.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(h.directory, caf::exit_reason::user_shutdown);
    return "cannot listen for nodes on " + cc.listen.str() + ": " + sys.render(port.error());
  }
  h.port = *port;
  if (cc.has(config::node_role::front)) {
    balancer_deps bd;
    bd.regions = cc.regions;
    bd.directory = h.directory;
    bd.gauges = std::move(gauges);
    h.balancer = spawn_balancer(sys, bd);
  }
  return h;
}

void stop_cluster(const cluster_handles& h) {
  if (h.balancer) caf::anon_send_exit(h.balancer, caf::exit_reason::user_shutdown);
  if (h.directory) caf::anon_send_exit(h.directory, caf::exit_reason::user_shutdown);
}

config::tenancy tenancy_from_config(const config::kiln_config& cfg) {
  config::tenancy t;
  for (auto team : cfg.teams) {
    t.keys.push_back({"config:" + team.name, team.name, config::key_hash(team.api_key)});
    team.api_key.clear();
    t.teams.push_back(std::move(team));
  }
  t.index();
  return t;
}

}  // namespace kiln::cluster
