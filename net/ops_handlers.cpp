// Operations routes anyone may call: /healthz (503 while loading or draining) and /metrics.
#include "net/front.hpp"
#include "net/openai.hpp"

namespace kiln::net {

void add_ops_routes(front& f) {
  f.routes.add("GET", "/healthz", access::open, [&f](const std::shared_ptr<exchange>& ex, const route_params&) {
    if (f.draining) return ex->respond(503, R"({"status":"draining"})", "application/json", {{"Retry-After", "1"}});
    if (!f.ready) return ex->respond(503, R"({"status":"loading"})", "application/json", {{"Retry-After", "1"}});
    ex->respond(200, R"({"status":"ok","region":)" + json_quote(f.deps.cfg->region) + "}");
  });
  f.routes.add("GET", "/metrics", access::open, [&f](const std::shared_ptr<exchange>& ex, const route_params&) {
    ex->respond(200, render_metrics(*f.deps.metrics, *f.deps.gauges, *f.deps.cfg), "text/plain; version=0.0.4");
  });
}

}  // namespace kiln::net
