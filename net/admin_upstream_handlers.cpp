// The upstreams of a remote pool (admin key only): GET lists them with their replicas, POST
// {"url"} adds one (a new replica, routed to once its upstream answers), DELETE {"url"}
// drains its replica and removes it.
#include <chrono>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;

void upstreams(front& f, const std::shared_ptr<exchange>& ex, const route_params& p, actors::upstream_op op) {
  actors::upstream_change c;
  c.model = p.get("model");
  c.version = p.get("version");
  c.op = op;
  if (op != actors::upstream_op::list) {
    json body;
    if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
    for (const auto& [k, v] : body.items())
      if (k != "url") return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
    if (!body.contains("url") || !body["url"].is_string())
      return answer_bad_request(ex, "'url' must be the upstream's base URL, http://host:port/v1.", "url");
    c.url = body["url"].get<std::string>();
  }
  const int status = op == actors::upstream_op::add ? 201 : 200;
  actors::ask<std::vector<std::string>>(
      *f.deps.sys, node_of(f), c, std::chrono::seconds(5), [&f, ex, c, status](caf::expected<std::vector<std::string>> r) {
        if (!r) return answer_failure(f, ex, r.error(), "node");
        json list = json::array();
        for (const auto& line : *r) {
          const auto sp = line.find(' ');
          list.push_back({{"replica_id", line.substr(0, sp)}, {"url", sp == std::string::npos ? "" : line.substr(sp + 1)}});
        }
        answer_json(ex, status, {{"model", c.model}, {"version", c.version}, {"upstreams", std::move(list)}});
      });
}

}  // namespace

void add_upstream_routes(front& f) {
  const std::string path = "/admin/pools/{model}/{version}/upstreams";
  f.routes.add("GET", path, access::admin, [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
    upstreams(f, ex, p, actors::upstream_op::list);
  });
  f.routes.add("POST", path, access::admin, [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
    upstreams(f, ex, p, actors::upstream_op::add);
  });
  f.routes.add("DELETE", path, access::admin, [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
    upstreams(f, ex, p, actors::upstream_op::remove);
  });
}

}  // namespace kiln::net
