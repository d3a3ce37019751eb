// Admin routes for the model registry and rollouts (admin key only): register and list
// versions, start or move a shadow or canary stage, point the alias, read where a rollout
// stands and its stored decisions. Registration asks the store writer, the rest the node,
// which hands them to the model's rollout controller.
#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/registry_calls.hpp"
#include "actors/rollout.hpp"
#include "config/artifact_pull.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr auto kAskTimeout = std::chrono::seconds(60);


json version_json(const config::model_version& v) {
  json files = json::array();
  for (const auto& f : v.files) files.push_back({{"file", f.file}, {"sha256", f.sha256}});
  const json engine_config = json::parse(v.engine_config, nullptr, false);
  return {{"model", v.model},
          {"version", v.version},
          {"weights_uri", v.weights_uri},
          {"weights_hash", v.weights_hash},
          {"tokenizer_hash", v.tokenizer_hash},
          {"chat_template_hash", v.chat_template_hash},
          {"precision", v.precision},
          {"gpus_per_replica", v.gpus_per_replica},
          {"engine_config", engine_config.is_discarded() ? json::object() : engine_config},
          {"load_test_tokens_per_s", v.load_test_tokens_per_s},
          {"load_test_tokens_in_flight", v.load_test_tokens_in_flight},
          {"status", v.status},
          {"registered_at", v.registered_at},
          {"files", files}};
}

json stats_json(const actors::window_stats& w) {
  return {{"requests", w.requests}, {"error_rate", w.error_rate}, {"ttft_p95_s", w.ttft_p95_s}, {"mean_output", w.mean_output}};
}

json row_json(const config::rollout_row& r) {
  json metrics = json::parse(r.guard_metrics, nullptr, false);
  return {{"seq", r.seq},       {"model", r.model},         {"version", r.version}, {"stage", r.stage},
          {"percent", r.percent}, {"at", r.at},              {"decision", r.decision}, {"reason", r.reason},
          {"guard_metrics", metrics.is_discarded() ? json::object() : metrics}};
}

json view_json(const actors::rollout_view& v) {
  json rows = json::array();
  for (const auto& r : v.decisions) rows.push_back(row_json(r));
  const auto& r = v.route;
  return {{"model", r.model},
          {"live", r.live},
          {"canary", {{"version", r.canary}, {"percent", r.canary_percent}}},
          {"shadow", {{"version", r.shadow}, {"percent", r.shadow_percent}}},
          {"previous", r.previous},
          {"window", {{"live", stats_json(v.live)}, {"canary", stats_json(v.canary)}, {"shadow", stats_json(v.shadow)}}},
          {"decisions", rows}};
}

// POST /admin/models/{model}/versions
void register_version(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  static const char* known[] = {"version", "weights_uri", "weights_hash", "tokenizer_hash", "chat_template",
                                "precision", "gpus_per_replica", "engine_config"};
  for (const auto& [k, v] : body.items())
    if (std::find(std::begin(known), std::end(known), k) == std::end(known)) return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  config::model_version v;
  v.model = model;
  auto text = [&](const char* name, std::string& out, bool required) {
    if (!body.contains(name)) {
      if (required) answer_bad_request(ex, std::string("'") + name + "' is required.", name);
      return !required;
    }
    if (!body[name].is_string()) {
      answer_bad_request(ex, std::string("'") + name + "' must be a string.", name);
      return false;
    }
    out = body[name].get<std::string>();
    return true;
  };
  if (!text("version", v.version, true) || !text("weights_uri", v.weights_uri, true) ||
      !text("weights_hash", v.weights_hash, true) || !text("tokenizer_hash", v.tokenizer_hash, true) ||
      !text("chat_template", v.chat_template, false) || !text("precision", v.precision, false))
    return;
  if (!good_name(v.version)) return answer_bad_request(ex, "'version' must be 1-64 letters, digits, '-', '_' or '.'.", "version");
  if (!config::valid_precision(v.precision)) return answer_bad_request(ex, "'precision' must be fp16, int8 or 4bit.", "precision");
  if (body.contains("gpus_per_replica")) {
    const json& g = body["gpus_per_replica"];
    if (!g.is_number_integer() || g.get<int>() < 1 || g.get<int>() > 64)
      return answer_bad_request(ex, "'gpus_per_replica' must be a whole number from 1 to 64.", "gpus_per_replica");
    v.gpus_per_replica = g.get<int>();
  }
  if (body.contains("engine_config")) {
    const json& e = body["engine_config"];
    if (!e.is_object()) return answer_bad_request(ex, "'engine_config' must be a JSON object.", "engine_config");
    if (e.contains("replicas") && (!e["replicas"].is_number_integer() || e["replicas"].get<int>() < 1 ||
                                   e["replicas"].get<int>() > 1024))
      return answer_bad_request(ex, "'engine_config.replicas' must be a whole number from 1 to 1024.", "engine_config");
    v.engine_config = e.dump();
  }
  // The files are hashed here, off the I/O and actor threads (the store may be another node's,
  // and its writer is not to wait seconds on one registration), then stored.
  auto background = f.deps.background ? f.deps.background : [](std::function<void()> work) { work(); };
  auto store = [&f, ex](config::model_version v, std::string dir) {
    auto hashed = config::hash_model_dir(dir);
    if (auto* why = std::get_if<std::string>(&hashed)) return answer_bad_request(ex, *why, "weights_uri");
    actors::ask<actors::version_registered>(
        *f.deps.sys, store_of(f), actors::register_version_call{std::move(v), std::get<config::model_hashes>(hashed), dir},
        kAskTimeout, [&f, ex](caf::expected<actors::version_registered> r) {
          if (!r) return answer_failure(f, ex, r.error(), "store");
          answer_json(ex, r->created ? 201 : 200, version_json(r->version));
        });
  };
  if (!config::is_http_uri(v.weights_uri)) {
    auto dir = config::local_dir_of(v.weights_uri);
    if (auto* why = std::get_if<1>(&dir)) return answer_bad_request(ex, *why, "weights_uri");
    return background([store, v = std::move(v), dir = std::get<0>(dir)]() mutable { store(std::move(v), dir); });
  }
  // The pulled copy lives under the cache at {model}/{version}: names that stay there.
  if (!config::valid_artifact_name(v.model))
    return answer_bad_request(ex, "A model pulled over HTTP needs a name of letters, digits, '.', '_' or '-', not starting with '.'.",
                              "weights_uri");
  if (!config::valid_artifact_name(v.version))
    return answer_bad_request(ex, "'version' must not start with '.' for a version pulled over HTTP.", "version");
  // Weights on an artifact endpoint: pulled here first (off the I/O and actor threads) and
  // verified as they arrive; the pulled copy is then hashed as a local one would be.
  if (!f.deps.background)
    return answer_error(ex, {503, "server_error", "This node cannot pull weights.", "weights_uri", "unavailable"});
  const auto& pulls = f.deps.cfg->artifacts;
  const std::string dir = config::pulled_dir({pulls.cache_dir, pulls.key}, v.model, v.version);
  f.deps.background([&f, ex, store, v = std::move(v), dir]() mutable {
    const std::string why = config::pull_weights(v.weights_uri, dir, f.deps.cfg->artifacts.key, {});
    if (!why.empty())
      return answer_error(ex, {400, "invalid_request_error", "weights_uri: " + why, "weights_uri", ""});
    store(std::move(v), dir);
  });
}

void list_versions(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  actors::ask<std::vector<config::model_version>>(
      *f.deps.sys, store_of(f), actors::versions_call{model}, kAskTimeout,
      [&f, ex, model](caf::expected<std::vector<config::model_version>> r) {
        if (!r) return answer_failure(f, ex, r.error(), "store");
        json out = json::array();
        for (const auto& v : *r) out.push_back(version_json(v));
        answer_json(ex, 200, {{"model", model}, {"versions", out}});
      });
}

template <class Order>
void to_node(front& f, const std::shared_ptr<exchange>& ex, Order o) {
  actors::ask<actors::rollout_view>(*f.deps.sys, node_of(f), std::move(o), kAskTimeout,
                                    [&f, ex](caf::expected<actors::rollout_view> r) {
                                      if (!r) return answer_failure(f, ex, r.error(), "node");
                                      answer_json(ex, 200, view_json(*r));
                                    });
}

// PUT /admin/models/{model}/rollout {version, stage, percent}
void rollout(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  for (const auto& [k, v] : body.items())
    if (k != "version" && k != "stage" && k != "percent") return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  actors::rollout_order o;
  o.model = model;
  if (!body.contains("version") || !body["version"].is_string() || !good_name(body["version"].get<std::string>()))
    return answer_bad_request(ex, "'version' is required: a registered version.", "version");
  o.version = body["version"];
  o.stage = body.value("stage", json("canary")).is_string() ? body.value("stage", "canary") : "";
  if (o.stage != "canary" && o.stage != "shadow") return answer_bad_request(ex, "'stage' must be shadow or canary.", "stage");
  const json pct = body.value("percent", json(1.0));
  if (!pct.is_number() || !(pct.get<double>() >= 0 && pct.get<double>() <= 100))
    return answer_bad_request(ex, "'percent' must be a number from 0 to 100.", "percent");
  o.percent = pct.get<double>();
  to_node(f, ex, o);
}

// PUT /admin/models/{model}/alias {version}
void alias(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  for (const auto& [k, v] : body.items())
    if (k != "version") return answer_bad_request(ex, "Unknown field '" + k + "'.", k);
  if (!body.contains("version") || !body["version"].is_string() || !good_name(body["version"].get<std::string>()))
    return answer_bad_request(ex, "'version' is required.", "version");
  to_node(f, ex, actors::alias_order{model, body["version"].get<std::string>()});
}

void decisions(front& f, const std::shared_ptr<exchange>& ex, const std::string& model) {
  actors::ask<std::vector<config::rollout_row>>(*f.deps.sys, store_of(f), actors::rollouts_call{model}, kAskTimeout,
                                                [&f, ex, model](caf::expected<std::vector<config::rollout_row>> r) {
                                                  if (!r) return answer_failure(f, ex, r.error(), "store");
                                                  json rows = json::array();
                                                  for (const auto& row : *r) rows.push_back(row_json(row));
                                                  answer_json(ex, 200, {{"model", model}, {"rollouts", rows}});
                                                });
}

// POST /admin/models/{model}/versions/{version}/gate: the capacity scenario on one replica of
// the version's pool; the figures are stored with the version (which becomes `gated`).
void gate(front& f, const std::shared_ptr<exchange>& ex, const std::string& model, const std::string& version) {
  if (!f.deps.gate)
    return ex->respond(503, error_json({503, "server_error", "This node cannot run a gate.", "", "unavailable"}));
  actors::ask<config::model_version>(
      *f.deps.sys, store_of(f), actors::version_call{model, version}, kAskTimeout,
      [&f, ex, model](caf::expected<config::model_version> v) {
        if (!v) return answer_failure(f, ex, v.error(), "store");
        const config::kiln_config& cfg = *f.deps.cfg;
        const config::pool_config* base = cfg.pool_for(model, cfg.live_version(model));
        for (const auto& p : cfg.pools)
          if (!base && p.model == model) base = &p;
        if (!base)
          return answer_error(ex, to_api_error(actors::errc::unknown_model, "The model '" + model + "' has no pool here.", "", 0));
        f.deps.gate(config::version_pool(*base, *v, f.deps.cfg->artifacts), [&f, ex, v = *v](std::variant<config::load_test, std::string> r) {
          if (auto* e = std::get_if<std::string>(&r))
            return answer_error(ex, to_api_error(actors::errc::invalid_request, "The gate could not run: " + *e, "", 0));
          const auto lt = std::get<config::load_test>(r);
          actors::ask<config::model_version>(
              *f.deps.sys, store_of(f), actors::load_test_write{v.model, v.version, lt.tokens_per_s, lt.tokens_in_flight},
              kAskTimeout, [&f, ex, lt](caf::expected<config::model_version> stored) {
                if (!stored) return answer_failure(f, ex, stored.error(), "store");
                json out = version_json(*stored);
                out["gate"] = {{"tokens_per_s", lt.tokens_per_s}, {"tokens_in_flight", lt.tokens_in_flight}, {"detail", lt.detail}};
                answer_json(ex, 200, out);
              });
        });
      });
}

}  // namespace

void add_model_routes(front& f) {
  using P = const route_params&;
  using X = const std::shared_ptr<exchange>&;
  f.routes.add("POST", "/admin/models/{model}/versions", access::admin, [&f](X ex, P p) { register_version(f, ex, p.get("model")); });
  f.routes.add("GET", "/admin/models/{model}/versions", access::admin, [&f](X ex, P p) { list_versions(f, ex, p.get("model")); });
  f.routes.add("POST", "/admin/models/{model}/versions/{version}/gate", access::admin,
               [&f](X ex, P p) { gate(f, ex, p.get("model"), p.get("version")); });
  f.routes.add("PUT", "/admin/models/{model}/rollout", access::admin, [&f](X ex, P p) { rollout(f, ex, p.get("model")); });
  f.routes.add("GET", "/admin/models/{model}/rollout", access::admin,
               [&f](X ex, P p) { to_node(f, ex, actors::rollout_query{p.get("model")}); });
  f.routes.add("GET", "/admin/models/{model}/rollouts", access::admin, [&f](X ex, P p) { decisions(f, ex, p.get("model")); });
  f.routes.add("PUT", "/admin/models/{model}/alias", access::admin, [&f](X ex, P p) { alias(f, ex, p.get("model")); });
}

}  // namespace kiln::net
