#include "net/metrics.hpp"

#include <initializer_list>
#include <string_view>

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

}  // namespace

std::string render_metrics(const front_metrics& m, const actors::fleet_gauges& g) {
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
         return labels({{"replica", r.replica_id}, {"model", r.model}, {"version", r.version}, {"state", r.phase}});
       },
       [](const rgauge&) { return 1; });
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

  family(out, "kiln_request_outcomes_total", "counter",
         "How requests ended in their owner, by model@version: completed, retried, failed_mid_stream, or an error code.");
  for (const auto& [key, n] : g.outcomes()) {
    const auto& [model, version, outcome] = key;
    out += "kiln_request_outcomes_total" + labels({{"model", model}, {"version", version}, {"outcome", outcome}}) + " " +
           std::to_string(n) + "\n";
  }
  return out;
}

}  // namespace kiln::net
