#include "net/metrics.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <string_view>
#include <tuple>

namespace kiln::net {

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

// Label values escape backslash, quote and newline (names come from config).
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string labels(std::initializer_list<std::pair<const char*, std::string_view>> kv) {
  std::string out = "{";
  for (const auto& [k, v] : kv) {
    if (out.size() > 1) out += ',';
    out += k;
    out += "=\"";
    out += label(v);
    out += '"';
  }
  return out + "}";
}

template <class Row>
std::string replica_labels(const Row& e) {
  return labels({{"replica", e.replica_id}, {"model", e.model}, {"version", e.version}});
}

template <class Rows, class Labels, class Value>
void rows(std::string& out, const char* name, const char* type, const char* help, const Rows& rs, Labels lab, Value val) {
  family(out, name, type, help);
  for (const auto& r : rs) out += name + lab(r) + " " + std::to_string(val(r)) + "\n";
}

// The clustered front's view of each region (nothing on a node without a balancer).
void render_regions(std::string& out, const actors::fleet_gauges& g) {
  const auto regions = g.regions();
  if (regions.empty()) return;
  using rg = actors::region_gauge;
  auto lab = [](const rg& r) { return labels({{"region", r.region}}); };
  rows(out, "kiln_region_up", "gauge", "1 while a router node of the region is reachable from this front.", regions, lab,
       [](const rg& r) { return r.up ? 1 : 0; });
  rows(out, "kiln_region_draining", "gauge", "1 while an operator's drain keeps new requests from the region.", regions, lab,
       [](const rg& r) { return r.draining ? 1 : 0; });
  rows(out, "kiln_region_degraded", "gauge",
       "1 while the region's router nodes report pools and none serves (drained while another region serves).", regions,
       lab, [](const rg& r) { return r.degraded ? 1 : 0; });
  rows(out, "kiln_region_unhealthy_models", "gauge",
       "Models the region has pools of, none serving: their requests go to another region first.", regions, lab,
       [](const rg& r) { return r.unhealthy_models.size(); });
  rows(out, "kiln_region_rank", "gauge", "The region's place in this front's preference (0 nearest).", regions, lab,
       [](const rg& r) { return r.rank; });
  rows(out, "kiln_region_router_nodes", "gauge", "Router nodes of the region reachable now.", regions, lab,
       [](const rg& r) { return r.nodes.size(); });
  rows(out, "kiln_region_requests_in_flight", "gauge", "Requests this front has sent to the region, not ended.", regions,
       lab, [](const rg& r) { return r.in_flight; });
  rows(out, "kiln_region_requests_total", "counter", "Requests this front sent to the region (retries included).",
       regions, lab, [](const rg& r) { return r.sent; });
  rows(out, "kiln_region_retried_total", "counter",
       "Requests moved to another region after this one was lost or refused them, before any token.", regions, lab,
       [](const rg& r) { return r.retried; });
  rows(out, "kiln_region_failed_mid_stream_total", "counter",
       "Requests that ended with one error event because the region was lost after their first token.", regions, lab,
       [](const rg& r) { return r.failed_mid_stream; });
  rows(out, "kiln_region_lost_tokens_total", "counter",
       "Output tokens clients received from requests lost with the region (metered by this front's node where it has a meter).",
       regions, lab, [](const rg& r) { return r.lost_tokens; });
  rows(out, "kiln_region_lost_total", "counter", "Times the region went from reachable to unreachable.", regions, lab,
       [](const rg& r) { return r.lost; });
}

}  // namespace

void latency_histogram::observe(double v) {
  for (std::size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) {
      ++counts[i];
      break;
    }
  ++count;
  sum += v;
}

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void histograms(std::string& out, const char* name, const char* help, const std::map<std::string, latency_histogram>& hs) {
  family(out, name, "histogram", help);
  for (const auto& [model, h] : hs) {
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      out += std::string(name) + "_bucket" + labels({{"model", model}, {"le", number(h.bounds[i])}}) + " " +
             std::to_string(cumulative) + "\n";
    }
    out += std::string(name) + "_bucket" + labels({{"model", model}, {"le", "+Inf"}}) + " " + std::to_string(h.count) + "\n";
    out += std::string(name) + "_sum" + labels({{"model", model}}) + " " + number(h.sum) + "\n";
    out += std::string(name) + "_count" + labels({{"model", model}}) + " " + std::to_string(h.count) + "\n";
  }
}

// Teams: tokens, requests by status, sheds by tier, bucket fill.
void render_teams(std::string& out, const front_metrics& m, const actors::fleet_gauges& g) {
  const auto usage = g.team_usages();
  family(out, "kiln_team_tokens_total", "counter", "Tokens a team used, by kind: prompt, cached (of prompt), output.");
  for (const auto& [key, u] : usage) {
    const auto& [team, model] = key;
    for (const auto& [kind, n] : {std::pair<const char*, std::uint64_t>{"prompt", u.prompt_tokens},
                                  {"cached", u.cached_tokens},
                                  {"output", u.output_tokens}})
      out += "kiln_team_tokens_total" + labels({{"team", team}, {"model", model}, {"kind", kind}}) + " " + std::to_string(n) + "\n";
  }
  family(out, "kiln_team_requests_total", "counter", "Requests a team made, by model as asked and HTTP status (429s included).");
  for (const auto& [key, n] : m.requests_by_team()) {
    const auto& [team, model, status] = key;
    out += "kiln_team_requests_total" + labels({{"team", team}, {"model", model}, {"status", std::to_string(status)}}) + " " +
           std::to_string(n) + "\n";
  }
  family(out, "kiln_team_shed_total", "counter",
         "Requests admission refused under overload, by the tier shed (503) or over_share (429).");
  for (const auto& [key, n] : g.sheds()) {
    const auto& [team, model, why] = key;
    out += "kiln_team_shed_total" + labels({{"team", team}, {"model", model}, {"tier", why}}) + " " + std::to_string(n) + "\n";
  }
  family(out, "kiln_team_bucket_fill", "gauge", "How full a team's token bucket for a model is (1: full).");
  for (const auto& [key, fill] : g.buckets())
    out += "kiln_team_bucket_fill" + labels({{"team", key.first}, {"model", key.second}}) + " " + number(fill) + "\n";
}

// Pools: latency histograms, prefix hit rate, tokens in flight, queues, cost.
void render_pools(std::string& out, const front_metrics& m, const actors::fleet_gauges& g, const config::kiln_config& cfg) {
  histograms(out, "kiln_ttft_seconds", "Time to first token as the client saw it, by model as asked.", m.ttft());
  histograms(out, "kiln_time_per_output_token_seconds", "Time per output token after the first, by model as asked.", m.tpot());
  std::map<std::pair<std::string, std::string>, std::array<double, 3>> pools;  // prompt, cached, in flight
  for (const auto& e : g.engines()) {
    auto& p = pools[{e.model, e.version}];
    p[0] += static_cast<double>(e.prompt_tokens_total);
    p[1] += static_cast<double>(e.cached_tokens_total);
    p[2] += static_cast<double>(e.tokens_in_flight);
  }
  family(out, "kiln_pool_prefix_hit_rate", "gauge", "Prompt tokens found in a pool's prefix caches, of all prompt tokens.");
  for (const auto& [key, p] : pools)
    out += "kiln_pool_prefix_hit_rate" + labels({{"model", key.first}, {"version", key.second}}) + " " +
           number(p[0] > 0 ? p[1] / p[0] : 0) + "\n";
  family(out, "kiln_pool_tokens_in_flight", "gauge", "Prompt plus remaining output tokens a pool's engines hold.");
  for (const auto& [key, p] : pools)
    out += "kiln_pool_tokens_in_flight" + labels({{"model", key.first}, {"version", key.second}}) + " " + number(p[2]) + "\n";
  family(out, "kiln_pool_queue_depth", "gauge", "Requests waiting in admission for room in a pool, by tier.");
  for (const auto& [key, n] : g.queues())
    out += "kiln_pool_queue_depth" + labels({{"pool", key.first}, {"tier", key.second}}) + " " + std::to_string(n) + "\n";
  // USD per million output tokens since start: the GPUs of the model's pools, priced per hour.
  const double hours = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started).count() / 3600;
  std::map<std::string, std::uint64_t> output;
  for (const auto& [key, u] : g.team_usages()) output[key.second] += u.output_tokens;
  family(out, "kiln_model_usd_per_million_tokens", "gauge",
         "GPU cost of a model's pools since start (replicas x GPUs x gpu_hour_usd) per million output tokens.");
  for (const auto& mc : cfg.models) {
    double usd = 0;
    for (const auto& p : cfg.pools)
      if (p.model == mc.name) usd += p.replicas * p.gpu.tensor_parallel * p.gpu_hour_usd * hours;
    const auto it = output.find(mc.name);
    if (it == output.end() || it->second == 0) continue;
    out += "kiln_model_usd_per_million_tokens" + labels({{"model", mc.name}}) + " " +
           number(usd / (static_cast<double>(it->second) / 1e6)) + "\n";
  }
}

}  // namespace

std::string render_metrics(const front_metrics& m, const actors::fleet_gauges& g, const config::kiln_config& cfg) {
  std::string out;
  family(out, "kiln_requests_total", "counter", "HTTP requests answered, by status.");
  for (const auto& [status, n] : m.requests_by_status())
    out += "kiln_requests_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
  family(out, "kiln_tokens_streamed_total", "counter", "Completion tokens delivered to clients.");
  out += "kiln_tokens_streamed_total " + std::to_string(m.tokens_streamed.load()) + "\n";
  family(out, "kiln_open_streams", "gauge", "SSE streams open now.");
  out += "kiln_open_streams " + std::to_string(m.open_streams.load()) + "\n";
  family(out, "kiln_open_connections", "gauge", "Client connections open now.");
  out += "kiln_open_connections " + std::to_string(m.open_connections.load()) + "\n";
  const auto engines = g.engines();
  auto per_engine = [&](const char* name, const char* type, const char* help, auto field) {
    rows(out, name, type, help, engines, [](const auto& e) { return replica_labels(e); }, field);
  };
  using gauge = actors::engine_gauge;
  per_engine("kiln_engine_running_sequences", "gauge", "Sequences in an engine's running batch.",
             [](const gauge& e) { return e.running; });
  per_engine("kiln_engine_waiting_sequences", "gauge", "Sequences waiting for a batch slot.",
             [](const gauge& e) { return e.waiting; });
  per_engine("kiln_engine_tokens_in_flight", "gauge", "Prompt plus remaining output tokens an engine holds.",
             [](const gauge& e) { return e.tokens_in_flight; });
  per_engine("kiln_engine_preemptions_total", "counter", "Sequences preempted by recompute when KV ran out.",
             [](const gauge& e) { return e.preemptions; });
  per_engine("kiln_engine_kv_blocks_free", "gauge", "KV blocks an engine can hand out now (cached or empty).",
             [](const gauge& e) { return e.kv_blocks_free; });
  per_engine("kiln_engine_kv_blocks", "gauge", "KV blocks of an engine in all.", [](const gauge& e) { return e.kv_blocks_total; });
  per_engine("kiln_engine_steps_total", "counter", "Engine steps run.", [](const gauge& e) { return e.steps; });
  per_engine("kiln_engine_load_seconds", "gauge", "Reading the model and putting its weights in place (disk, convert, copy).",
             [](const gauge& e) { return e.load_seconds; });
  per_engine("kiln_engine_weight_bytes", "gauge", "Weight bytes an engine's executor holds.",
             [](const gauge& e) { return e.weight_bytes; });

  const auto replicas = g.replicas();
  using rgauge = actors::replica_gauge;
  rows(out, "kiln_replica_state", "gauge", "1 for each replica, labelled with its lifecycle state.", replicas,
       [](const rgauge& r) {
         return labels({{"replica", r.replica_id}, {"model", r.model}, {"version", r.version}, {"state", r.shown_phase()}});
       },
       [](const rgauge&) { return 1; });
  std::vector<rgauge> ready;
  for (const auto& r : replicas)
    if (r.ready_seconds >= 0) ready.push_back(r);
  rows(out, "kiln_replica_ready_seconds", "gauge",
       "From a replica's start to serving: its engine built and weights in place (the simulator: the modelled cold start).", ready,
       [](const rgauge& r) { return replica_labels(r); }, [](const rgauge& r) { return r.ready_seconds; });
  rows(out, "kiln_replica_engine_restarts_total", "counter", "Engines restarted by their replica (fresh KV).", replicas,
       [](const rgauge& r) { return replica_labels(r); }, [](const rgauge& r) { return r.restarts; });
  rows(out, "kiln_replica_starts_total", "counter", "Times a replica was started (the first start included).", replicas,
       [](const rgauge& r) { return replica_labels(r); }, [](const rgauge& r) { return r.starts; });

  const auto pools = g.pools();
  using pgauge = actors::pool_gauge;
  auto pool_labels = [](const pgauge& p) { return labels({{"model", p.model}, {"version", p.version}}); };
  rows(out, "kiln_pool_degraded", "gauge", "1 while a pool has given up restarting (503 with Retry-After).", pools,
       pool_labels, [](const pgauge& p) { return p.status == "degraded" ? 1 : 0; });
  rows(out, "kiln_pool_serving", "gauge", "1 while a pool serves.", pools, pool_labels,
       [](const pgauge& p) { return p.status == "serving" ? 1 : 0; });
  rows(out, "kiln_pool_restarts_total", "counter", "Routers and replicas restarted by a pool's supervisor.", pools,
       pool_labels, [](const pgauge& p) { return p.restarts; });
  std::vector<pgauge> ranked;
  for (const auto& p : pools)
    if (p.ranked >= 0) ranked.push_back(p);
  rows(out, "kiln_pool_ranked_replicas", "gauge",
       "Replicas a pool's router ranks now (serving, beating); 0 while a serving pool has none (its region is unhealthy).",
       ranked, pool_labels, [](const pgauge& p) { return p.ranked; });
  std::vector<pgauge> cpu_pools;
  for (const auto& p : pools)
    if (!p.kernels.empty()) cpu_pools.push_back(p);
  rows(out, "kiln_cpu_kernels_info", "gauge",
       "1 for each cpu pool: its weights' dtype, the instruction-set path its matrix products run, its KV cache dtype.",
       cpu_pools,
       [](const pgauge& p) {
         return labels({{"model", p.model}, {"version", p.version}, {"weights", p.weights}, {"kernels", p.kernels}, {"kv", p.kv}});
       },
       [](const pgauge&) { return 1; });

  family(out, "kiln_request_outcomes_total", "counter",
         "How requests ended in their owner, by model@version: completed, retried, failed_mid_stream, or an error code.");
  for (const auto& [key, n] : g.outcomes()) {
    const auto& [model, version, outcome] = key;
    out += "kiln_request_outcomes_total" + labels({{"model", model}, {"version", version}, {"outcome", outcome}}) + " " +
           std::to_string(n) + "\n";
  }
  // Rollout decisions since start, by model, version and decision (start, rollback, promote...).
  std::map<std::tuple<std::string, std::string, std::string>, std::uint64_t> decisions;
  for (const auto& d : g.rollouts()) ++decisions[{d.model, d.version, d.decision}];
  family(out, "kiln_rollout_decisions_total", "counter",
         "Rollout controllers' decisions since start: start, advance, end, rollback, promote, alias, retire.");
  for (const auto& [key, n] : decisions) {
    const auto& [model, version, decision] = key;
    out += "kiln_rollout_decisions_total" + labels({{"model", model}, {"version", version}, {"decision", decision}}) +
           " " + std::to_string(n) + "\n";
  }
  render_teams(out, m, g);
  render_pools(out, m, g, cfg);
  render_regions(out, g);
  return out;
}

}  // namespace kiln::net
