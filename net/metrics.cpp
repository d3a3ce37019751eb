#include "net/metrics.hpp"

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

std::string engine_labels(const actors::engine_gauge& e) {
  return "{replica=\"" + label(e.replica_id) + "\",model=\"" + label(e.model) + "\",version=\"" +
         label(e.version) + "\"}";
}

}  // namespace

std::string render_metrics(const front_metrics& m, const actors::engine_gauges& g) {
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
  const auto engines = g.snapshot();
  auto per_engine = [&](const char* name, const char* type, const char* help, auto field) {
    family(out, name, type, help);
    for (const auto& e : engines) out += name + engine_labels(e) + " " + std::to_string(field(e)) + "\n";
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
  per_engine("kiln_engine_kv_blocks_total", "gauge", "KV blocks of an engine.", [](const gauge& e) { return e.kv_blocks_total; });
  per_engine("kiln_engine_steps_total", "counter", "Engine steps run.", [](const gauge& e) { return e.steps; });
  per_engine("kiln_engine_load_seconds", "gauge", "Reading the model and putting its weights in place (disk, convert, copy).",
             [](const gauge& e) { return e.load_seconds; });
  per_engine("kiln_engine_weight_bytes", "gauge", "Weight bytes an engine's executor holds.",
             [](const gauge& e) { return e.weight_bytes; });
  return out;
}

}  // namespace kiln::net
