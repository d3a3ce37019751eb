#include "sim/gate.hpp"

#include "sim/fleet.hpp"

namespace kiln::sim {

namespace {

// The capacity drill's traffic (sim/scenarios/capacity.toml): 1,200-token prompts with an
// 800-token shared prefix, 300-token answers, three turns; rates from 1 request/s up by 1.
constexpr const char* kGateScenario = R"(
[sim]
name = "gate"
seed = 1
duration_s = 120
drain_s = 60
report_interval_s = 5
[capacity]
start_rate = 1
step_rate = 1
max_steps = 64
ttft_p95_limit_s = 1.0
min_stream_tokens_per_s = 30
[arrivals]
process = "poisson"
prompt_tokens = 1200
output_tokens = 300
conversation_turns = 3
[[arrivals.teams]]
name = "gate"
system_prompt_tokens = 800
[[teams]]
name = "gate"
api_key = "gate"
[[pools]]
model = "m"
version = "v"
)";

}  // namespace

bool passes(const run_summary& m, const capacity_search& c) {
  return m.completed > 0 && m.ttft_p95_ms <= c.ttft_p95_limit_s * 1e3 &&
         m.slowest_stream_tokens_per_s_p5 >= c.min_stream_tokens_per_s && m.unfinished == 0;
}

std::variant<gate_result, std::string> gate_capacity(const config::pool_config& pool) {
  if (pool.executor != config::executor_kind::sim)
    return "the gate runs the simulator, which needs the sim executor; " + pool.model + "@" + pool.version +
           " runs another (cpu and cuda pools are gated by a load test on a real engine)";
  auto parsed = parse_scenario(kGateScenario, "<gate>", ".");
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  scenario s = std::move(std::get<scenario>(parsed));
  config::pool_config p = pool;
  p.replicas = 1;
  p.fault_fraction = 0;
  s.fleet.pools = {p};
  s.fleet.models = {{p.model, p.version}};
  const run_plan base = s.runs().front();
  gate_result best;
  bool passed = false;
  for (int k = 0; k < s.capacity.max_steps; ++k) {
    run_plan plan = base;
    plan.arrivals.rate = s.capacity.start_rate + k * s.capacity.step_rate;
    plan.label = "rate-" + format_fixed(plan.arrivals.rate, 0);
    auto r = run_once(s, plan);
    if (auto* e = std::get_if<std::string>(&r)) return *e;
    const run_result& res = std::get<run_result>(r);
    const run_summary m = summarize(res, s);
    ++best.steps;
    if (!passes(m, s.capacity)) break;
    passed = true;
    best.rate = plan.arrivals.rate;
    best.tokens_per_s = m.output_tokens_per_s_per_replica;
    best.ttft_p95_ms = m.ttft_p95_ms;
    double sum = 0;
    int n = 0;
    for (const auto& smp : res.samples.front())
      if (smp.t <= s.duration_s) {
        sum += static_cast<double>(smp.tokens_in_flight);
        ++n;
      }
    best.tokens_in_flight = n > 0 ? sum / n : 0;
  }
  if (!passed) return "no step met the targets (p95 TTFT <= 1 s, streams >= 30 tokens/s), not even 1 request/s";
  return best;
}

}  // namespace kiln::sim
