// admission_cost: what admission spends on a request, by part, on the embedded default's sim
// pool with a 200-word prompt: resolving the model and rendering and tokenizing the prompt;
// the team's bucket and concurrency slot (charge, then refund at the end); the pool gate
// (arrive, then end). Prints nanoseconds per request.
#include <chrono>
#include <cstdio>
#include <string>

#include <caf/all.hpp>

#include "actors/admission.hpp"

using namespace kiln;
using clock_type = std::chrono::steady_clock;

int main() {
  caf::actor_system_config caf_cfg;
  caf_cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{caf_cfg};
  auto parsed = config::parse_config(config::embedded_default_config(), "<embedded>");
  auto cfg = std::make_shared<config::kiln_config>(std::get<config::kiln_config>(parsed));
  cfg->pools.resize(1);
  cfg->models.resize(1);
  cfg->pools[0].capacity_tokens = 1'000'000'000;  // the gate decides, never queues
  config::tenancy t;
  config::team_config team;
  team.name = "search";
  team.limits.push_back({"chat-7b", 1e12, 0, 0, 0.5});  // a bucket that never runs dry
  t.teams.push_back(team);
  t.index();

  actors::admission_state st;
  st.cfg = cfg;
  actors::pool_update pool;
  pool.model = "chat-7b";
  pool.version = "v1";
  pool.status = actors::pool_status::serving;
  pool.router = sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  pool.runtime = actors::prepare_pool(cfg->pools[0]);
  st.pools["chat-7b@v1"] = pool;
  st.ledger = actors::team_ledger(std::make_shared<const config::tenancy>(t));

  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += (i ? " " : "") + std::string(i % 2 ? "glaze" : "kiln");
  actors::request proto;
  proto.team = "search";
  proto.model = "chat-7b";
  proto.messages = {{"user", prompt}};
  proto.sampling.max_tokens = 300;

  const int n = 20000;
  double resolve_ns = 0, bucket_ns = 0, gate_ns = 0;
  const auto now = clock_type::now();
  auto& gate = st.gate("chat-7b@v1");
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up
    resolve_ns = bucket_ns = gate_ns = 0;
    for (int i = 0; i < n; ++i) {
      actors::request r = proto;
      r.id = {1, static_cast<std::uint64_t>(pass * n + i + 1)};
      const auto t0 = clock_type::now();
      auto admitted = st.admit(r, now);
      const auto t1 = clock_type::now();
      if (admitted.index() != 0) return std::fprintf(stderr, "admission_cost: refused\n"), 1;
      r.priority = st.ledger.clamp(r.team, r.priority);
      if (st.ledger.admit(r, now)) return std::fprintf(stderr, "admission_cost: over the limit\n"), 1;
      const auto t2 = clock_type::now();
      actors::pool_gate::moves m;
      const auto id = r.id;
      gate.arrive(std::move(r), 310, 0.5, now, m);
      gate.end(id, now, m);
      const auto t3 = clock_type::now();
      st.ledger.release({id, {210, 100, 0}, true, true, "v1", "search", "chat-7b"}, now);
      const auto t4 = clock_type::now();
      resolve_ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
      bucket_ns += std::chrono::duration<double, std::nano>((t2 - t1) + (t4 - t3)).count();
      gate_ns += std::chrono::duration<double, std::nano>(t3 - t2).count();
    }
  }
  std::printf("admission_cost requests=%d prompt_words=200\n", n);
  std::printf("resolve_render_tokenize ns_per_request %.0f\n", resolve_ns / n);
  std::printf("bucket_and_slot (charge + refund) ns_per_request %.0f\n", bucket_ns / n);
  std::printf("pool_gate (arrive + end) ns_per_request %.0f\n", gate_ns / n);
  std::printf("total ns_per_request %.0f\n", (resolve_ns + bucket_ns + gate_ns) / n);
  caf::anon_send_exit(pool.router, caf::exit_reason::user_shutdown);
  return 0;
}
