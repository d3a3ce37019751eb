// router_decision: what routing costs a request. (1) The decision alone: the affinity key and
// the ranking of N serving replicas under the load bound, as a retry too (one replica
// excluded). (2) The whole owner path on a live router shard: own the request, pick, send it
// to an engine, hear its first token and its end, end it at the sink; the engine is a stub
// that answers at once. Prints nanoseconds per request for 12 and 1,000 replicas.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/router_shard.hpp"

using namespace kiln;
using clock_type = std::chrono::steady_clock;

namespace {

actors::router_shard_state serving_pool(int n, const caf::actor& engine, caf::actor_clock::time_point now) {
  actors::router_shard_state st;
  std::mt19937_64 rng(7);
  for (int i = 0; i < n; ++i) {
    auto& e = st.add_replica("chat-7b-v1-r" + std::to_string(i), caf::actor{});
    actors::replica_status s{e.replica_id, actors::replica_phase::serving, engine, {}, 0};
    s.load.tokens_in_flight = static_cast<std::int64_t>(rng() % 200000);  // uneven: the bound matters
    st.on_status(s, now);
  }
  return st;
}

std::vector<actors::request> requests(int n) {
  std::vector<actors::request> out(static_cast<std::size_t>(n));
  std::mt19937_64 rng(11);
  for (auto& r : out) {
    r.team = "search";
    std::vector<std::int32_t> prompt(1200);
    for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % 32000);
    r.prompt = std::move(prompt);
    r.sampling.max_tokens = 300;
  }
  return out;
}

void decision(int replicas, const caf::actor& engine, caf::actor_clock::time_point now) {
  const auto st = serving_pool(replicas, engine, now);
  const auto reqs = requests(4096);
  const int iters = replicas > 100 ? 200000 : 2000000;
  std::uint64_t sink = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up
    const auto t0 = clock_type::now();
    for (int i = 0; i < iters; ++i) {
      const auto& r = reqs[static_cast<std::size_t>(i) & 4095];
      sink += static_cast<std::uint64_t>(st.pick(actors::affinity_key(r), actors::request_tokens(r), now));
    }
    const double first_ns = std::chrono::duration<double, std::nano>(clock_type::now() - t0).count() / iters;
    const std::vector<std::string> tried{"chat-7b-v1-r0"};
    const auto t1 = clock_type::now();
    for (int i = 0; i < iters; ++i) {
      const auto& r = reqs[static_cast<std::size_t>(i) & 4095];
      sink += static_cast<std::uint64_t>(st.pick(actors::affinity_key(r), actors::request_tokens(r), now, tried));
    }
    const double retry_ns = std::chrono::duration<double, std::nano>(clock_type::now() - t1).count() / iters;
    if (pass == 1)
      std::printf("decision replicas=%d ns_per_request %.0f ns_per_retry_pick %.0f (checksum %llu)\n", replicas, first_ns,
                  retry_ns, static_cast<unsigned long long>(sink % 1000));
  }
}

// A stub engine: every request gets its first token and its end at once.
caf::behavior stub_engine(caf::event_based_actor* self) {
  return {[self](actors::request& r) {
    self->send(r.owner, actors::first_token{r.id, r.attempt});
    self->send(r.owner, actors::job_done{r.id, r.attempt, engine::finish_reason::stop, {}, "stub", 0});
  }};
}

struct counter_state {
  int left = 0;
  int errors = 0;
  static inline const char* name = "bench.sink";
};

// Counts terminal events; notes when the last arrives.
caf::behavior counting_sink(caf::stateful_actor<counter_state>* self, int n, std::shared_ptr<clock_type::time_point> end,
                            std::shared_ptr<int> errors) {
  self->state.left = n;
  auto one = [self, end, errors] {
    if (--self->state.left > 0) return;
    *end = clock_type::now();
    *errors = self->state.errors;
    self->quit();
  };
  return {
      [one](actors::stream_end&) { one(); },
      [self, one](actors::stream_error&) {
        ++self->state.errors;
        one();
      },
  };
}

void owner_path(caf::actor_system& sys, int replicas, bool print = true) {
  const caf::actor engine = sys.spawn(stub_engine);
  actors::router_settings rs{"chat-7b", "v1", "local"};
  rs.heartbeat = std::chrono::hours(1);  // one beat each, for the whole run
  const caf::actor router = sys.spawn(actors::router_shard, rs, nullptr);
  for (int i = 0; i < replicas; ++i) {
    actors::replica_set set;
    if (i == 0) {
      for (int k = 0; k < replicas; ++k) {
        set.ids.push_back("chat-7b-v1-r" + std::to_string(k));
        set.replicas.push_back(caf::actor{});
      }
      caf::anon_send(router, set);
    }
    caf::anon_send(router, actors::replica_status{"chat-7b-v1-r" + std::to_string(i), actors::replica_phase::serving,
                                                  engine, {}, 0});
  }
  const int n = 20000;
  auto end = std::make_shared<clock_type::time_point>();
  auto errors = std::make_shared<int>(0);
  const caf::actor sink = sys.spawn(counting_sink, n, end, errors);
  std::vector<actors::request> batch = requests(n);  // built before the clock starts
  actors::request_ids ids(1);
  for (auto& r : batch) {
    r.id = ids.next();
    r.sink = sink;
  }
  // One actor hands the router the whole batch in one go on the only scheduler thread: the
  // router then works through a full mailbox, as under load, without a wakeup per request.
  auto t0 = std::make_shared<clock_type::time_point>();
  caf::scoped_actor self{sys};
  auto driver = sys.spawn([router, t0, b = std::make_shared<std::vector<actors::request>>(std::move(batch))](
                              caf::event_based_actor* me) {
    *t0 = clock_type::now();
    for (auto& r : *b) me->send(router, std::move(r));
  });
  self->wait_for(driver, sink);
  const double ns = std::chrono::duration<double, std::nano>(*end - *t0).count() / n;
  if (print)
    std::printf("owner_path replicas=%d ns_per_request %.0f errors %d (own, pick, send, first token, end, stream_end)\n",
                replicas, ns, *errors);
  caf::anon_send_exit(router, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
}

}  // namespace

int main() {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", std::size_t{1});
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  const caf::actor engine = sys.spawn(stub_engine);
  const auto now = caf::actor_clock::clock_type::now();
  for (int n : {12, 1000}) decision(n, engine, now);
  owner_path(sys, 12, false);  // warms the allocator: the first pass pays for growing the heap
  for (int n : {12, 1000}) owner_path(sys, n);
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return 0;
}
