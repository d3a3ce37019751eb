#include "cluster/load_test.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "actors/engine_actor.hpp"
#include "actors/pool_runtime.hpp"

namespace kiln::cluster {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct level {
  int streams = 0;
  double ttft_p95_s = 0;
  double slowest_tokens_per_s = 0;  ///< the slowest stream's decode rate
  double tokens_per_s = 0;          ///< output tokens/s of the engine
  double tokens_in_flight = 0;      ///< mean over the level's time
  double seconds = 0;
};

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

// `n` streams at once, each its own prompt, until all end; "" or why the engine failed.
std::string run_level(engine::engine_core& core, const load_test_plan& plan, int n, int vocab, std::uint64_t& next_id,
                      level& out) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(n) * 7919);
  std::uniform_int_distribution<int> token(1, std::max(1, vocab - 1));
  std::map<engine::seq_id, double> first, last;
  std::map<engine::seq_id, int> made;
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    engine::engine_request r;
    r.id = next_id++;
    std::vector<engine::token_id> prompt;
    for (int k = 0; k < plan.prompt_tokens; ++k) prompt.push_back(token(rng));
    r.prompt = std::move(prompt);
    r.sampling.max_tokens = plan.output_tokens;
    r.sampling.seed = r.id;
    r.cache_salt = r.id;  // no stream finds another's prefix: each is a fresh prompt
    if (!core.add(std::move(r))) return "a " + std::to_string(plan.prompt_tokens) + "-token prompt does not fit the KV cache";
  }
  double weighted = 0;
  while (!core.idle()) {
    const double before = seconds_since(t0);
    const auto in_flight = static_cast<double>(core.tokens_in_flight());
    engine::step_result s = core.step();
    if (!s.error.empty()) return "the engine failed: " + s.error;
    const double now = seconds_since(t0);
    weighted += in_flight * (now - before);
    for (const auto& o : s.outputs) {
      if (o.new_tokens > 0 && !first.count(o.id)) first[o.id] = now;
      made[o.id] += o.new_tokens;
      if (o.finish != engine::finish_reason::none) last[o.id] = now;
    }
  }
  out.streams = n;
  out.seconds = seconds_since(t0);
  std::vector<double> ttft, rate;
  double tokens = 0;
  for (const auto& [id, t] : first) {
    ttft.push_back(t);
    tokens += made[id];
    const double decode = last[id] - t;
    if (made[id] > 1 && decode > 0) rate.push_back((made[id] - 1) / decode);
  }
  out.ttft_p95_s = pct(ttft, 0.95);
  out.slowest_tokens_per_s = rate.empty() ? 1e9 : pct(rate, 0.05);  // one token each: nothing to be slow at
  out.tokens_per_s = out.seconds > 0 ? tokens / out.seconds : 0;
  out.tokens_in_flight = out.seconds > 0 ? weighted / out.seconds : 0;
  return "";
}

std::string describe(const level& l) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%d stream(s): p95 TTFT %.3f s, slowest stream %.1f tokens/s, %.1f tokens/s in all",
                l.streams, l.ttft_p95_s, l.slowest_tokens_per_s, l.tokens_per_s);
  return buf;
}

}  // namespace

std::variant<config::load_test, std::string> real_load_test(const config::pool_config& pool, const load_test_plan& plan) {
  if (pool.executor == config::executor_kind::sim) return std::string("the sim executor is gated by the simulator");
  const auto t0 = clock_type::now();
  config::pool_config p = pool;
  p.replicas = 1;
  const auto rt = actors::prepare_pool(p);
  if (!rt->failure.empty()) return "the version cannot load: " + rt->failure;
  auto made = actors::make_engine_core(*rt, 1);
  if (auto* e = std::get_if<std::string>(&made)) return "the engine cannot start: " + *e;
  auto& core = *std::get<std::unique_ptr<engine::engine_core>>(made);
  const double load_s = seconds_since(t0);
  const int most = std::max(1, std::min(plan.max_streams, p.limits.max_running));
  std::uint64_t next_id = 1;
  level best, tried;
  bool passed = false;
  for (int n = 1; n <= most; n = n < most && n * 2 > most ? most : n * 2) {
    if (seconds_since(t0) > plan.budget_s) break;
    if (auto e = run_level(core, plan, n, static_cast<int>(rt->tokenizer->vocab_size()), next_id, tried); !e.empty())
      return e;
    const bool ok = tried.ttft_p95_s <= plan.ttft_p95_limit_s && tried.slowest_tokens_per_s >= plan.min_stream_tokens_per_s;
    if (!ok) break;
    best = tried;
    passed = true;
    if (n == most) break;
  }
  if (!passed) return "no level met the targets (p95 TTFT <= " + std::to_string(plan.ttft_p95_limit_s).substr(0, 4) +
                      " s, streams >= " + std::to_string(static_cast<int>(plan.min_stream_tokens_per_s)) +
                      " tokens/s): at " + describe(tried);
  char buf[160];
  std::snprintf(buf, sizeof buf, "; load %.2f s, test %.1f s", load_s, seconds_since(t0) - load_s);
  return config::load_test{best.tokens_per_s, best.tokens_in_flight,
                           "load test on one " + std::string(pool.executor == config::executor_kind::cuda ? "cuda" : "cpu") +
                               " engine, highest passing level " + describe(best) + buf};
}

}  // namespace kiln::cluster
