// Admin routes for teams (admin key only): limits (read, replace), a new team with its first
// key (shown once), revoking a key, and a team's usage rows. Each asks the store writer.
#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/store_writer.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAskTimeout = std::chrono::seconds(10);


json limits_json(const std::string& team, const std::vector<config::team_limit>& limits) {
  json rows = json::array();
  for (const auto& l : limits)
    rows.push_back({{"model", l.model},
                    {"tokens_per_minute", l.tokens_per_minute},
                    {"burst", l.burst},
                    {"max_concurrency", l.max_concurrency},
                    {"guaranteed_share", l.guaranteed_share}});
  return {{"team", team}, {"limits", rows}};
}

// Reads a number field in [lo, hi] into `out`; false (answered 400) when it is not one.
bool number(const std::shared_ptr<exchange>& ex, const json& body, const char* name, double lo, double hi, double& out) {
  if (!body.contains(name)) return true;
  const json& v = body[name];
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi)) {
    answer_bad_request(ex, std::string("'") + name + "' must be a number from " + json(lo).dump() + " to " + json(hi).dump() + ".", name);
    return false;
  }
  out = v.get<double>();
  return true;
}

void put_limits(front& f, const std::shared_ptr<exchange>& ex, const std::string& team) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  for (const auto& [k, v] : body.items())
    if (k != "model" && k != "tokens_per_minute" && k != "burst" && k != "max_concurrency" && k != "guaranteed_share")
      return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty())
    return answer_bad_request(ex, "'model' is required.", "model");
  config::team_limit l;
  l.model = body["model"];
  double concurrency = 0;
  if (!number(ex, body, "tokens_per_minute", 0, 1e12, l.tokens_per_minute) || !number(ex, body, "burst", 0, 1e12, l.burst) ||
      !number(ex, body, "max_concurrency", 0, 1e7, concurrency) ||
      !number(ex, body, "guaranteed_share", 0, 1, l.guaranteed_share))
    return;
  if (concurrency != static_cast<double>(static_cast<int>(concurrency)))
    return answer_bad_request(ex, "'max_concurrency' must be a whole number.", "max_concurrency");
  l.max_concurrency = static_cast<int>(concurrency);
  actors::ask<std::vector<config::team_limit>>(*f.deps.sys, store_of(f), actors::put_limit{team, l}, kAskTimeout,
                                               [&f, ex, team](caf::expected<std::vector<config::team_limit>> r) {
                                                 if (!r) return answer_failure(f, ex, r.error(), "store");
                                                 answer_json(ex, 200, limits_json(team, *r));
                                               });
}

void get_limits(front& f, const std::shared_ptr<exchange>& ex, const std::string& team) {
  actors::ask<std::vector<config::team_limit>>(*f.deps.sys, store_of(f), actors::get_limits{team}, kAskTimeout,
                                               [&f, ex, team](caf::expected<std::vector<config::team_limit>> r) {
                                                 if (!r) return answer_failure(f, ex, r.error(), "store");
                                                 answer_json(ex, 200, limits_json(team, *r));
                                               });
}

void create_team(front& f, const std::shared_ptr<exchange>& ex) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  for (const auto& [k, v] : body.items())
    if (k != "team" && k != "name" && k != "max_priority") return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  const std::string team = body.value("team", json("")).is_string() ? body.value("team", "") : "";
  if (!good_name(team)) return answer_bad_request(ex, "'team' must be 1-64 letters, digits, '-', '_' or '.'.", "team");
  actors::create_team c{team, body.value("name", json(team)).is_string() ? body.value("name", team) : team,
                        engine::priority::interactive};
  if (body.contains("max_priority")) {
    const auto p = body["max_priority"].is_string() ? engine::parse_priority(body["max_priority"].get<std::string>())
                                                     : std::nullopt;
    if (!p) return answer_bad_request(ex, "'max_priority' must be interactive, standard or batch.", "max_priority");
    c.max_priority = *p;
  }
  actors::ask<actors::team_created>(*f.deps.sys, store_of(f), c, kAskTimeout,
                                    [&f, ex](caf::expected<actors::team_created> r) {
                                      if (!r) return answer_failure(f, ex, r.error(), "store");
                                      answer_json(ex, 201, {{"team", r->team}, {"key", r->key}, {"key_id", r->key_id}});
                                    });
}

void revoke(front& f, const std::shared_ptr<exchange>& ex, const std::string& team, const std::string& key_id) {
  actors::ask<std::string>(*f.deps.sys, store_of(f), actors::revoke_key{team, key_id}, kAskTimeout,
                           [&f, ex, team](caf::expected<std::string> r) {
                             if (!r) return answer_failure(f, ex, r.error(), "store");
                             answer_json(ex, 200, {{"team", team}, {"key_id", *r}, {"revoked", true}});
                           });
}

// from / to: unix seconds (default: the last 24 hours).
void usage(front& f, const std::shared_ptr<exchange>& ex, const std::string& team) {
  const auto now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  actors::usage_query q{team, "", (now_s - 86400) / 60, now_s / 60};
  for (const auto& [k, v] : query_pairs(ex->request().query)) {
    if (k == "model") {
      q.model = v;
    } else if (k == "from" || k == "to") {
      char* end = nullptr;
      const long long s = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || s < 0) return answer_bad_request(ex, "'" + k + "' must be unix seconds.", k);
      (k == "from" ? q.from_minute : q.to_minute) = s / 60;
    } else {
      return answer_bad_request(ex, "Unknown parameter '" + k + "'.", k);
    }
  }
  actors::ask<std::vector<config::usage_row>>(
      *f.deps.sys, store_of(f), q, kAskTimeout, [&f, ex, team](caf::expected<std::vector<config::usage_row>> r) {
        if (!r) return answer_failure(f, ex, r.error(), "store");
        json rows = json::array();
        for (const auto& u : *r)
          rows.push_back({{"model", u.model},
                          {"version", u.version},
                          {"minute", u.minute * 60},
                          {"prompt_tokens", u.prompt_tokens},
                          {"cached_tokens", u.cached_tokens},
                          {"output_tokens", u.output_tokens},
                          {"requests", u.requests},
                          {"shed", u.shed}});
        answer_json(ex, 200, {{"team", team}, {"usage", rows}});
      });
}

}  // namespace

void add_team_routes(front& f) {
  f.routes.add("GET", "/admin/teams/{team}/limits", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { get_limits(f, ex, p.get("team")); });
  f.routes.add("PUT", "/admin/teams/{team}/limits", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { put_limits(f, ex, p.get("team")); });
  f.routes.add("POST", "/admin/teams", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { create_team(f, ex); });
  f.routes.add("DELETE", "/admin/teams/{team}/keys/{key_id}", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) {
                 revoke(f, ex, p.get("team"), p.get("key_id"));
               });
  f.routes.add("GET", "/admin/teams/{team}/usage", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params& p) { usage(f, ex, p.get("team")); });
}

}  // namespace kiln::net
