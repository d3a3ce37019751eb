// The admin routes (admin key only): pool state, drain, chaos. Each asks the node supervisor
// and answers JSON; no call blocks the connection's thread.
#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAskTimeout = std::chrono::seconds(5);

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json pool_json(const std::string& model, const std::vector<actors::pool_view>& views) {
  const std::int64_t now = unix_ms();
  json replicas = json::array(), versions = json::array();
  std::int64_t queue = 0, in_flight = 0;
  double hit_weighted = 0, hit_weight = 0;
  for (const auto& v : views) {
    json reps = json::array();
    for (const auto& r : v.replicas) {
      json row = {{"replica_id", r.replica_id},
                  {"version", r.version},
                  {"state", r.phase},
                  {"queue_depth", r.queue_depth},
                  {"tokens_in_flight", r.tokens_in_flight},
                  {"last_heartbeat", r.last_heartbeat_age_ms < 0 ? json(nullptr) : json(now - static_cast<std::int64_t>(r.last_heartbeat_age_ms))},
                  {"last_heartbeat_age_ms", r.last_heartbeat_age_ms < 0 ? json(nullptr) : json(r.last_heartbeat_age_ms)},
                  {"missed_heartbeats", r.missed_heartbeats},
                  {"in_ranking", r.in_ranking},
                  {"warm", r.warm},
                  {"restarts", r.restarts}};
      replicas.push_back(row);
      reps.push_back(std::move(row));
    }
    versions.push_back({{"version", v.version},
                        {"status", v.status},
                        {"queue_depth", v.queue_depth},
                        {"tokens_in_flight", v.tokens_in_flight},
                        {"prefix_hit_rate", v.prefix_hit_rate},
                        {"active_requests", v.active_requests},
                        {"retried", v.retried},
                        {"restarts", v.restarts},
                        {"retry_after_s", v.retry_after_s},
                        {"replicas", reps}});
    queue += v.queue_depth;
    in_flight += v.tokens_in_flight;
    hit_weighted += v.prefix_hit_rate * static_cast<double>(v.replicas.size());
    hit_weight += static_cast<double>(v.replicas.size());
  }
  return {{"model", model},
          {"replicas", replicas},
          {"queue_depth", queue},
          {"tokens_in_flight", in_flight},
          {"prefix_hit_rate", hit_weight > 0 ? hit_weighted / hit_weight : 0.0},
          {"versions", versions}};
}

void pool_state(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  actors::ask<std::vector<actors::pool_view>>(
      *f.deps.sys, node_of(f), actors::pool_state_request{model}, kAskTimeout,
      [&f, ex, model](caf::expected<std::vector<actors::pool_view>> r) {
        if (!r) return answer_failure(f, ex, r.error(), "node");
        answer_json(ex, 200, pool_json(model, *r));
      });
}

// PUT drains a replica; DELETE returns it to service (draining: at once; stopped: its engine
// starts again). Either answers the phase it is in.
void drain(front& f, const std::shared_ptr<exchange>& ex, const std::string& id, bool resume) {
  actors::ask<std::string>(*f.deps.sys, node_of(f), actors::drain_replica{id, resume}, kAskTimeout,
                           [&f, ex, id](caf::expected<std::string> r) {
                             if (!r) return answer_failure(f, ex, r.error(), "node");
                             answer_json(ex, 200, {{"replica_id", id}, {"state", *r}});
                           });
}

// POST /admin/chaos {target, id, action, seconds, factor}
void chaos(front& f, const std::shared_ptr<exchange>& ex) {
  auto bad = [&](const std::string& msg, const std::string& param) {
    ex->respond(400, error_json({400, "invalid_request_error", msg, param, ""}));
  };
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return bad(*why, "");
  actors::chaos_request c;
  const std::string target = body.value("target", json("replica")).is_string() ? body.value("target", "replica") : "";
  const auto t = actors::chaos_target_from(target);
  if (!t) return bad("'target' must be engine, replica, router, autoscaler or store.", "target");
  c.target = *t;
  const json id = body.value("id", json("random"));
  if (!id.is_string() || id.get<std::string>().empty()) return bad("'id' must be a name or \"random\".", "id");
  c.id = id.get<std::string>();
  const json action = body.value("action", json("kill"));
  const std::string a = action.is_string() ? action.get<std::string>() : "";
  const auto act = actors::chaos_action_from(a);
  if (!act) return bad("'action' must be kill, freeze, slow or fail.", "action");
  c.action = *act;
  const json seconds = body.value("seconds", json(5.0));
  if (!seconds.is_number() || !(seconds.get<double>() > 0 && seconds.get<double>() <= 3600))
    return bad("'seconds' must be a number in (0, 3600].", "seconds");
  const json factor = body.value("factor", json(10.0));
  if (!factor.is_number() || !(factor.get<double>() >= 1 && factor.get<double>() <= 1000))
    return bad("'factor' must be a number in [1, 1000].", "factor");
  c.order.seconds = seconds.get<double>();
  c.order.factor = factor.get<double>();
  for (const auto& [k, v] : body.items())
    if (k != "target" && k != "id" && k != "action" && k != "seconds" && k != "factor")
      return bad("Unknown field '" + k + "'.", k);
  actors::ask<actors::chaos_report>(*f.deps.sys, node_of(f), c, kAskTimeout,
                                    [&f, ex, c](caf::expected<actors::chaos_report> r) {
                                      if (!r) return answer_failure(f, ex, r.error(), "node");
                                      json out = {{"target", r->target}, {"id", r->id},           {"model", r->model},
                                                  {"version", r->version}, {"action", r->action}};
                                      if (c.action == actors::chaos_action::freeze || c.action == actors::chaos_action::slow)
                                        out["seconds"] = c.order.seconds;
                                      if (c.action == actors::chaos_action::slow) out["factor"] = c.order.factor;
                                      answer_json(ex, 200, out);
                                    });
}

}  // namespace

caf::actor store_of(front& f) { return caf::actor_cast<caf::actor>(f.deps.sys->registry().get(actors::store_name)); }
caf::actor node_of(front& f) { return caf::actor_cast<caf::actor>(f.deps.sys->registry().get(actors::node_name)); }

void answer_failure(front& f, const std::shared_ptr<exchange>& ex, const caf::error& err, const std::string& who) {
  // A front-only node holds no store and no pools, a control node no pools: what needs them is
  // done elsewhere.
  const auto& cluster = f.deps.cfg->cluster;
  const bool control = cluster.has(config::node_role::control);
  if (!cluster.has(config::node_role::router) && ((who == "store" && !control) || who == "node")) {
    const std::string node =
        "Node " + cluster.node + (control ? " is a control node (no pools): " : " is a front (no store, no pools): ");
    return answer_error(ex, {503, "server_error",
                             who == "store" ? node + "teams, keys, limits, registrations and rollouts are changed on a "
                                                     "control node, and wait while none is reachable; this node serves from "
                                                     "the configuration it last received (GET /admin/config)."
                                            : node + "ask a region's node for its pools and replicas.",
                             "", "unavailable"});
  }
  const std::string text = actors::error_text(*f.deps.sys, err);
  if (auto code = actors::kiln_error(err)) {
    api_error e = to_api_error(*code, text);
    if (*code == actors::errc::unknown_model) e.code = "not_found";
    return answer_error(ex, e);
  }
  if (err == caf::sec::invalid_argument) return answer_error(ex, {404, "invalid_request_error", text, "", "not_found"});
  answer_error(ex, to_api_error(actors::errc::unavailable, "The " + who + " did not answer: " + text));
}

void add_admin_routes(front& f) {
  f.routes.add("GET", "/admin/pools/{model}/state", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { pool_state(f, ex, p.get("model")); });
  f.routes.add("PUT", "/admin/replicas/{id}/drain", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { drain(f, ex, p.get("id"), false); });
  f.routes.add("DELETE", "/admin/replicas/{id}/drain", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { drain(f, ex, p.get("id"), true); });
  f.routes.add("POST", "/admin/chaos", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { chaos(f, ex); });
  add_upstream_routes(f);
}

}  // namespace kiln::net
