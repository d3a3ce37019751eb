// Admin routes for the `pools` table (admin key only): a pool's replica bounds and warm
// replicas per region, which its autoscaler follows from its next look.
//   PUT /admin/models/{model}/versions/{version}/pool {min_replicas, max_replicas, warm_replicas?, region?}
//   GET /admin/pools/limits
#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/registry_calls.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAskTimeout = std::chrono::seconds(30);


json limits_json(const config::pool_limits& l) {
  return {{"model", l.model},
          {"version", l.version},
          {"region", l.region},
          {"min_replicas", l.min_replicas},
          {"max_replicas", l.max_replicas},
          {"warm_replicas", l.warm_replicas}};
}

// A whole number field of the body, within [0, 10000]; false (answered 400) when it is not.
bool count_field(const std::shared_ptr<exchange>& ex, const json& body, const char* name, int& out, bool required) {
  if (!body.contains(name)) {
    if (required) answer_bad_request(ex, std::string("'") + name + "' is required.", name);
    return !required;
  }
  const json& v = body[name];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 10000) {
    answer_bad_request(ex, std::string("'") + name + "' must be a whole number from 0 to 10000.", name);
    return false;
  }
  out = static_cast<int>(v.get<std::int64_t>());
  return true;
}

void put_limits(front& f, const std::shared_ptr<exchange>& ex, const std::string& model, const std::string& version) {
  if (!good_name(model) || !good_name(version)) return answer_bad_request(ex, "The model and version must be plain names.", "model");
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  for (const auto& [k, v] : body.items())
    if (k != "min_replicas" && k != "max_replicas" && k != "warm_replicas" && k != "region")
      return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  config::pool_limits l;
  l.model = model;
  l.version = version;
  l.region = f.deps.cfg->region;
  if (body.contains("region")) {
    if (!body["region"].is_string() || !good_name(body["region"].get<std::string>()))
      return answer_bad_request(ex, "'region' must be a plain name.", "region");
    l.region = body["region"].get<std::string>();
  }
  if (!count_field(ex, body, "min_replicas", l.min_replicas, true) ||
      !count_field(ex, body, "max_replicas", l.max_replicas, true) ||
      !count_field(ex, body, "warm_replicas", l.warm_replicas, false))
    return;
  if (auto why = config::check_pool_limits(l); !why.empty()) return answer_bad_request(ex, why, "max_replicas");
  actors::ask<config::pool_limits>(*f.deps.sys, store_of(f), actors::pool_limits_write{l}, kAskTimeout,
                                   [&f, ex](caf::expected<config::pool_limits> r) {
                                     if (!r) return answer_failure(f, ex, r.error(), "store");
                                     answer_json(ex, 200, limits_json(*r));
                                   });
}

void list_limits(front& f, const std::shared_ptr<exchange>& ex) {
  actors::ask<std::vector<config::pool_limits>>(*f.deps.sys, store_of(f), actors::pool_limits_call{}, kAskTimeout,
                                                [&f, ex](caf::expected<std::vector<config::pool_limits>> r) {
                                                  if (!r) return answer_failure(f, ex, r.error(), "store");
                                                  json rows = json::array();
                                                  for (const auto& l : *r) rows.push_back(limits_json(l));
                                                  answer_json(ex, 200, {{"object", "list"}, {"data", rows}});
                                                });
}

}  // namespace

void add_pool_limit_routes(front& f) {
  using P = const route_params&;
  using X = const std::shared_ptr<exchange>&;
  f.routes.add("PUT", "/admin/models/{model}/versions/{version}/pool", access::admin,
               [&f](X ex, P p) { put_limits(f, ex, p.get("model"), p.get("version")); });
  f.routes.add("GET", "/admin/pools/limits", access::admin, [&f](X ex, P) { list_limits(f, ex); });
}

}  // namespace kiln::net
