// The cluster's admin routes (admin key only): the regions as this front's balancer sees
// them and the region drills, and the configuration this node serves from.
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/region_drill.hpp"
#include "net/admin_reply.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAskTimeout = std::chrono::seconds(5);

// The regions as this node's balancer sees them; a node without one (not clustered, or no
// front role) shows its own region.
void regions(front& f, const std::shared_ptr<exchange>& ex) {
  const auto& cfg = *f.deps.cfg;
  json rows = json::array();
  for (const auto& r : f.deps.gauges->regions())
    rows.push_back({{"region", r.region},
                    {"rank", r.rank},
                    {"status", !r.up ? "down" : r.draining ? "draining" : r.degraded ? "degraded" : "up"},
                    {"unhealthy_models", r.unhealthy_models},
                    {"router_nodes", r.nodes},
                    {"requests_in_flight", r.in_flight},
                    {"requests_sent", r.sent},
                    {"retried", r.retried},
                    {"failed_mid_stream", r.failed_mid_stream},
                    {"lost", r.lost}});
  if (rows.empty())
    rows.push_back({{"region", cfg.region}, {"rank", 0}, {"status", f.ready ? "up" : "loading"},
                    {"router_nodes", json::array({cfg.cluster.node})}});
  ex->respond(200, json{{"node", cfg.cluster.node}, {"region", cfg.region}, {"clustered", cfg.cluster.clustered()},
                        {"regions", rows}}
                       .dump());
}

// The configuration this node serves from, and its snapshot's version; on a clustered front
// also each router node's, as its balancer last heard (converged: all the same as this one).
void config_view(front& f, const std::shared_ptr<exchange>& ex, const std::vector<actors::node_config_row>& nodes) {
  const auto& cfg = *f.deps.cfg;
  const auto c = f.deps.gauges->config();
  const auto t = f.deps.tenants->get();
  json teams = json::array();
  for (const auto& team : t->teams) teams.push_back(team.name);
  json rows = json::array();
  bool converged = true;
  for (const auto& n : nodes) {
    rows.push_back({{"node", n.node}, {"region", n.region}, {"source", n.source},
                    {"version", n.version.empty() ? json(nullptr) : json(n.version)}});
    converged = converged && n.version == c.version;
  }
  ex->respond(200, json{{"node", cfg.cluster.node},
                        {"nodes", rows},
                        {"converged", converged},
                        {"region", cfg.region},
                        {"source", c.source},
                        {"version", c.version.empty() ? json(nullptr) : json(c.version)},
                        {"origin", c.origin.empty() ? json(nullptr) : json(c.origin)},
                        {"made_unix", c.made_unix ? json(c.made_unix) : json(nullptr)},
                        {"snapshots_received", c.received},
                        {"snapshots_refused", c.refused},
                        {"last_error", c.last_error.empty() ? json(nullptr) : json(c.last_error)},
                        {"teams", teams},
                        {"keys", t->keys.size()}}
                       .dump());
}

// POST /admin/regions/{region}/drain {seconds}, DELETE .../drain, POST .../kill.
void drill(front& f, const std::shared_ptr<exchange>& ex, const std::string& region, const std::string& action) {
  actors::region_drill d{region, action, 0};
  if (action == "drain" && !ex->request().body.empty()) {
    const json body = json::parse(ex->request().body, nullptr, false);
    if (!body.is_object()) return answer_bad_request(ex, "The body must be a JSON object.", "");
    for (const auto& [k, v] : body.items())
      if (k != "seconds") return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
    const json seconds = body.value("seconds", json(0.0));
    if (!seconds.is_number() || !(seconds.get<double>() >= 0 && seconds.get<double>() <= 86400))
      return answer_bad_request(ex, "'seconds' must be a number in [0, 86400] (0: until undrained).", "seconds");
    d.seconds = seconds.get<double>();
  }
  auto balancer = caf::actor_cast<caf::actor>(f.deps.sys->registry().get(actors::balancer_name));
  if (!balancer)
    return answer_error(ex, {404, "invalid_request_error", "This node has no balancer (it is not a clustered front).", "",
                             "not_found"});
  actors::ask<actors::region_drill_report>(*f.deps.sys, balancer, d, kAskTimeout,
                                           [&f, ex](caf::expected<actors::region_drill_report> r) {
                                             if (!r) return answer_failure(f, ex, r.error(), "balancer");
                                             answer_json(ex, 200, {{"region", r->region},
                                                                   {"action", r->action},
                                                                   {"router_nodes", r->nodes}});
                                           });
}

}  // namespace

void add_cluster_admin_routes(front& f) {
  using X = const std::shared_ptr<exchange>&;
  using P = const route_params&;
  f.routes.add("GET", "/admin/regions", access::admin, [&f](X ex, P) { regions(f, ex); });
  f.routes.add("POST", "/admin/regions/{region}/drain", access::admin, [&f](X ex, P p) { drill(f, ex, p.get("region"), "drain"); });
  f.routes.add("DELETE", "/admin/regions/{region}/drain", access::admin,
               [&f](X ex, P p) { drill(f, ex, p.get("region"), "undrain"); });
  f.routes.add("POST", "/admin/regions/{region}/kill", access::admin, [&f](X ex, P p) { drill(f, ex, p.get("region"), "kill"); });
  f.routes.add("GET", "/admin/config", access::admin, [&f](X ex, P) {
    auto balancer = caf::actor_cast<caf::actor>(f.deps.sys->registry().get(actors::balancer_name));
    if (!balancer) return config_view(f, ex, {});
    actors::ask<std::vector<actors::node_config_row>>(
        *f.deps.sys, balancer, actors::cluster_config_ask{}, kAskTimeout,
        [&f, ex](caf::expected<std::vector<actors::node_config_row>> r) {
          auto rows = r ? std::move(*r) : std::vector<actors::node_config_row>{};
          ex->post([&f, ex, rows = std::move(rows)] { config_view(f, ex, rows); });
        });
  });
}

}  // namespace kiln::net
