#include "cluster/cluster_start.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include "actors/node_supervisor.hpp"
#include "cluster/balancer.hpp"
#include "cluster/control_link.hpp"
#include "cluster/directory.hpp"
#include "actors/worker_host.hpp"
#include "cluster/wire.hpp"
#include "config/snapshot.hpp"

namespace kiln::cluster {

void configure_cluster(caf::actor_system_config& caf_cfg, const config::kiln_config& cfg) {
  set_heartbeats(caf_cfg, cfg.cluster.heartbeat_ms, cfg.cluster.connection_timeout_ms);
  add_wire_types(caf_cfg);
}

std::variant<cluster_handles, std::string> start_cluster(caf::actor_system& sys, const config::kiln_config& cfg,
                                                         const std::string& http_endpoint,
                                                         std::shared_ptr<actors::fleet_gauges> gauges,
                                                         std::shared_ptr<config::tenancy_board> board,
                                                         const std::string& snapshot_path,
                                                         std::shared_ptr<config::registry_board> registry) {
  const auto& cc = cfg.cluster;
  directory_deps dd;
  dd.self.node = cc.node;
  dd.self.region = cfg.region;
  dd.self.roles = cc.roles;
  dd.self.endpoint = cc.listen.str();
  dd.self.http = http_endpoint;
  dd.seeds = cc.seeds;
  dd.board = std::move(board);
  dd.registry = std::move(registry);
  dd.gauges = gauges;
  dd.snapshot_path = snapshot_path;
  dd.regions = cc.regions;
  dd.unix_at_start =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  dd.clock_at_start = sys.clock().now();
  cluster_handles h;
  h.directory = spawn_directory(sys, dd);
  auto port = sys.middleman().publish(h.directory, cc.listen.port, cc.listen.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(h.directory, caf::exit_reason::user_shutdown);
    return "cannot listen for nodes on " + cc.listen.str() + ": " + sys.render(port.error());
  }
  h.port = *port;
  // Replica stand-ins find their region's workers through it.
  sys.registry().put(actors::worker_finder_name, h.directory);
  if (cc.has(config::node_role::router) && !cc.has(config::node_role::control)) {
    h.control_link = spawn_control_link(sys, h.directory);
    sys.registry().put(actors::store_name, h.control_link);
  }
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
  if (h.directory) h.directory.home_system().registry().erase(actors::worker_finder_name);
  if (h.control_link) {
    h.control_link.home_system().registry().erase(actors::store_name);
    caf::anon_send_exit(h.control_link, caf::exit_reason::user_shutdown);
  }
  if (h.balancer) caf::anon_send_exit(h.balancer, caf::exit_reason::user_shutdown);
  if (h.directory) caf::anon_send_exit(h.directory, caf::exit_reason::user_shutdown);
}

namespace {

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

}  // namespace

config::tenancy starting_tenancy(const config::kiln_config& cfg, const std::string& snapshot_path,
                                 actors::config_state& state, config::registry_view* registry) {
  auto loaded = config::load_snapshot(snapshot_path);
  if (auto* snap = std::get_if<config::config_snapshot>(&loaded)) {
    state.source = "last-known-good";
    state.version = config::version_text(snap->version);
    state.origin = snap->origin;
    state.made_unix = snap->made_unix;
    if (registry) {
      registry->routes = std::move(snap->routes);
      registry->versions = std::move(snap->versions);
    }
    return std::move(snap->tenants);
  }
  const std::string why = std::get<std::string>(loaded);
  if (std::filesystem::exists(snapshot_path)) {
    std::fprintf(stderr, "kiln: last-known-good configuration not used: %s; serving the config file's teams until the control node answers\n",
                 why.c_str());
    state.last_error = why;
  }
  state.source = "config";
  return tenancy_from_config(cfg);
}

}  // namespace kiln::cluster
