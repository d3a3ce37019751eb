// The ops console: one page (GET /console, its script and style, embedded in the binary), the
// state it shows (GET /admin/console/state: pools, replicas, rollouts, teams with limits and
// usage, batches) and its live figures as server-sent events (GET /admin/console/events:
// tokens/s, TTFT p95 and prefix hit rate each second). Its actions are admin API calls.
#include <algorithm>
#include <chrono>
#include <memory>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/batch_calls.hpp"
#include "net/admin_reply.hpp"
#include "net/batch_http.hpp"
#include "net/sse.hpp"

namespace kiln::net {

std::string_view console_asset(std::string_view name);

namespace {

using json = nlohmann::json;
constexpr auto kAsk = std::chrono::seconds(5);
constexpr int kEveryMs = 1000;
constexpr int kBatchesShown = 50;

const header_list kPageHeaders = {{"Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:"},
                                  {"X-Frame-Options", "DENY"},
                                  {"Cache-Control", "no-store"}};

void asset(const std::shared_ptr<exchange>& ex, std::string_view name, std::string_view type) {
  ex->respond(200, std::string(console_asset(name)), type, kPageHeaders);
}

// What the live charts need, measured between two looks.
struct counters {
  std::uint64_t tokens = 0;
  std::array<std::uint64_t, 12> ttft{};
  std::uint64_t ttft_count = 0;
  std::int64_t prompt = 0, cached = 0;
  std::chrono::steady_clock::time_point at;
};

counters look(front& f) {
  counters c;
  c.at = std::chrono::steady_clock::now();
  c.tokens = f.deps.metrics->tokens_streamed.load();
  for (const auto& [model, h] : f.deps.metrics->ttft()) {
    for (std::size_t i = 0; i < h.counts.size(); ++i) c.ttft[i] += h.counts[i];
    c.ttft_count += h.count;
  }
  for (const auto& e : f.deps.gauges->engines()) {
    c.prompt += e.prompt_tokens_total;
    c.cached += e.cached_tokens_total;
  }
  return c;
}

// The 95th percentile of the TTFTs observed between two looks, from the histogram's buckets
// (linear within a bucket); -1 when none were.
double p95_ms(const counters& a, const counters& b) {
  const std::uint64_t n = b.ttft_count - a.ttft_count;
  if (n == 0) return -1;
  const double want = 0.95 * static_cast<double>(n);
  double seen = 0, lower = 0;
  for (std::size_t i = 0; i < b.ttft.size(); ++i) {
    const double in = static_cast<double>(b.ttft[i] - a.ttft[i]);
    const double upper = latency_histogram::bounds[i];
    if (seen + in >= want && in > 0) return 1000 * (lower + (upper - lower) * (want - seen) / in);
    seen += in;
    lower = upper;
  }
  return 1000 * latency_histogram::bounds.back();
}

json pools_now(front& f) {
  json pools = json::array();
  const auto engines = f.deps.gauges->engines();
  for (const auto& p : f.deps.gauges->pools()) {
    json reps = json::array();
    for (const auto& r : f.deps.gauges->replicas()) {
      if (r.model != p.model || r.version != p.version) continue;
      json row = {{"replica_id", r.replica_id}, {"state", r.shown_phase()}, {"restarts", r.restarts}};
      for (const auto& e : engines)
        if (e.replica_id == r.replica_id)
          row.update({{"running", e.running}, {"waiting", e.waiting}, {"tokens_in_flight", e.tokens_in_flight},
                      {"kv_free", e.kv_blocks_free}, {"kv_total", e.kv_blocks_total}});
      reps.push_back(std::move(row));
    }
    json queues = json::object();
    for (const auto& [key, n] : f.deps.gauges->queues())
      if (key.first == p.model + "@" + p.version) queues[key.second] = n;
    pools.push_back({{"model", p.model}, {"version", p.version}, {"status", p.status}, {"queues", queues}, {"replicas", reps}});
  }
  return pools;
}

json rollouts_now(front& f) {
  json out = json::array();
  auto rows = f.deps.gauges->rollouts();
  const std::size_t from = rows.size() > 20 ? rows.size() - 20 : 0;
  for (std::size_t i = rows.size(); i-- > from;)
    out.push_back({{"model", rows[i].model}, {"version", rows[i].version}, {"stage", rows[i].stage},
                   {"percent", rows[i].percent}, {"decision", rows[i].decision}, {"reason", rows[i].reason}});
  return out;
}

json teams_now(front& f) {
  json teams = json::array();
  const auto usage = f.deps.gauges->team_usages();
  const auto tenants = f.deps.tenants->get();
  for (const auto& t : tenants->teams) {
    json limits = json::array(), used = json::array();
    for (const auto& l : t.limits)
      limits.push_back({{"model", l.model}, {"tokens_per_minute", l.tokens_per_minute}, {"burst", l.burst},
                        {"max_concurrency", l.max_concurrency}, {"guaranteed_share", l.guaranteed_share}});
    for (const auto& [key, u] : usage)
      if (key.first == t.name)
        used.push_back({{"model", key.second}, {"requests", u.requests}, {"prompt_tokens", u.prompt_tokens},
                        {"output_tokens", u.output_tokens}, {"shed", u.shed}});
    teams.push_back({{"team", t.name}, {"max_priority", std::string(engine::to_string(t.max_priority))}, {"limits", limits},
                     {"usage", used}});
  }
  return teams;
}

void state(front& f, const std::shared_ptr<exchange>& ex) {
  json models = json::array();
  for (const auto& m : f.deps.cfg->models) models.push_back(m.name);
  json body = {{"region", f.deps.cfg->region}, {"node", f.deps.cfg->cluster.node}, {"models", models},
               {"pools", pools_now(f)}, {"rollouts", rollouts_now(f)}, {"teams", teams_now(f)}, {"batches", json::array()}};
  // Batches come from the store; without one (or while it is away) the rest still shows.
  actors::ask<std::vector<config::batch_row>>(*f.deps.sys, store_of(f), actors::batches_call{"", "", kBatchesShown, false}, kAsk,
                                              [ex, body = std::move(body)](caf::expected<std::vector<config::batch_row>> r) mutable {
                                                if (r)
                                                  for (const auto& b : *r) {
                                                    json j = batch_json(b);
                                                    j["team"] = b.team;
                                                    body["batches"].push_back(std::move(j));
                                                  }
                                                answer_json(ex, 200, body);
                                              });
}

// One event a second until the client goes: the figures since the last one, and the pools.
struct event_feed : std::enable_shared_from_this<event_feed> {
  front& f;
  std::shared_ptr<exchange> ex;
  counters last;
  event_feed(front& fr, std::shared_ptr<exchange> e) : f(fr), ex(std::move(e)), last(look(fr)) {}

  void tick() {
    const counters now = look(f);
    const double dt = std::chrono::duration<double>(now.at - last.at).count();
    const std::int64_t prompt = now.prompt - last.prompt;
    json ev = {{"tokens_per_s", dt > 0 ? static_cast<double>(now.tokens - last.tokens) / dt : 0.0},
               {"ttft_p95_ms", p95_ms(last, now)},
               {"hit_rate", prompt > 0 ? static_cast<double>(now.cached - last.cached) / static_cast<double>(prompt) : -1.0},
               {"pools", pools_now(f)}};
    last = now;
    std::string out;
    append_sse_event(out, ev.dump());
    ex->stream(out);
    ex->after(kEveryMs, [self = shared_from_this()] { self->tick(); });
  }
};

void events(front& f, const std::shared_ptr<exchange>& ex) {
  ex->begin_stream({{"Cache-Control", "no-store"}});
  ex->on_interrupt([ex](interruption why) {
    if (why == interruption::shutdown) ex->end_stream(200);
  });
  auto feed = std::make_shared<event_feed>(f, ex);
  std::string hello;
  append_sse_event(hello, json{{"hello", true}}.dump());
  ex->stream(hello);
  ex->after(kEveryMs, [feed] { feed->tick(); });
}

}  // namespace

void add_console_routes(front& f) {
  f.routes.add("GET", "/console", access::open,
               [](const std::shared_ptr<exchange>& ex, const route_params&) { asset(ex, "index.html", "text/html; charset=utf-8"); });
  f.routes.add("GET", "/console/app.js", access::open, [](const std::shared_ptr<exchange>& ex, const route_params&) {
    asset(ex, "app.js", "text/javascript; charset=utf-8");
  });
  f.routes.add("GET", "/console/style.css", access::open,
               [](const std::shared_ptr<exchange>& ex, const route_params&) { asset(ex, "style.css", "text/css; charset=utf-8"); });
  f.routes.add("GET", "/admin/console/state", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { state(f, ex); });
  f.routes.add("GET", "/admin/console/events", access::admin,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { events(f, ex); });
}

}  // namespace kiln::net
