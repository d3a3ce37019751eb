// Request ownership and the replica lifecycle on virtual time: retries before the first
// token, one error event after it, the retry budget, deadlines, heartbeats, drain, and
// restart intensity escalating to a degraded pool.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

#include <caf/all.hpp>

#include "tests/support/node_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using actors::chaos_action;
using actors::chaos_target;
using actors::errc;

namespace {

config::kiln_config node_config(int replicas, int first_token_ms = 60000, int request_ms = 600000, int intensity = 5) {
  auto c = test::sim_node_config(replicas);
  c.pools[0].first_token_timeout_ms = first_token_ms;
  c.pools[0].request_timeout_ms = request_ms;
  c.pools[0].restart_intensity = intensity;
  return c;
}

bool all_ended(const std::vector<test::node_fixture::open_request>& rs) {
  return std::all_of(rs.begin(), rs.end(), [](const auto& r) { return r.rec->terminal(); });
}

/// What an undisturbed node answers to a prompt and seed.
std::string reference_text(const std::string& prompt, std::uint64_t seed, int max_tokens) {
  test::node_fixture ref(node_config(1));
  auto r = ref.submit(max_tokens, prompt, seed);
  REQUIRE(ref.vt.run_until([&] { return r.rec->terminal(); }, 60s));
  REQUIRE(r.rec->ends.size() == 1);
  return r.rec->text();
}

int tokens_of(const test::recorded_stream& s) {
  int n = 0;
  for (const auto& t : s.tokens) n += t.tokens;
  return n;
}

}  // namespace

TEST_CASE("lifecycle: a replica killed before the first token: the request completes elsewhere, one clean stream") {
  const std::string expected = reference_text("tell me about kilns", 11, 60);
  test::node_fixture f(node_config(3));
  auto r = f.submit(60, "tell me about kilns", 11);
  f.vt.run_ready();  // it has reached an engine; no step has run yet
  const std::string victim = f.busy_replica();
  REQUIRE_FALSE(victim.empty());
  REQUIRE(f.chaos(chaos_target::replica, victim, chaos_action::kill));
  REQUIRE(f.vt.run_until([&] { return r.rec->terminal(); }, 60s));
  f.vt.run_for(2s);
  CHECK(r.rec->errors.empty());
  REQUIRE(r.rec->ends.size() == 1);
  CHECK(r.rec->order.back() == "end");
  const auto& end = r.rec->ends[0];
  CHECK(end.attempts == 2);
  CHECK(end.replica_id != victim);
  CHECK(r.rec->text() == expected);  // same answer, no token twice, none skipped
  CHECK(tokens_of(*r.rec) == end.completion_tokens);
  CHECK(f.outcome("retried") == 1);
  // The pool started the replica again and it rejoined.
  const auto pool = f.pool();
  CHECK(pool.restarts == 1);
  for (const auto& rep : pool.replicas) {
    CAPTURE(rep.replica_id);
    CHECK(rep.phase == "serving");
    CHECK(rep.in_ranking);
  }
  CHECK(f.kv_all_free());
  CHECK(pool.active_requests == 0);
}

TEST_CASE("lifecycle: an engine killed before the first token: its replica starts a fresh one and the request moves on") {
  const std::string expected = reference_text("engines die too", 5, 40);
  test::node_fixture f(node_config(2));
  auto r = f.submit(40, "engines die too", 5);
  f.vt.run_ready();
  const std::string victim = f.busy_replica();
  REQUIRE(f.chaos(chaos_target::engine, victim, chaos_action::kill));
  REQUIRE(f.vt.run_until([&] { return r.rec->terminal(); }, 60s));
  REQUIRE(r.rec->ends.size() == 1);
  CHECK(r.rec->text() == expected);
  CHECK(r.rec->ends[0].replica_id != victim);
  f.vt.run_for(2s);
  const auto pool = f.pool();
  for (const auto& rep : pool.replicas)
    if (rep.replica_id == victim) CHECK(rep.restarts == 1);
  CHECK(pool.restarts == 0);  // the replica lived; only its engine was started again
}

TEST_CASE("lifecycle: after the first token a lost replica means exactly one error event") {
  for (auto target : {chaos_target::replica, chaos_target::engine}) {
    CAPTURE(actors::to_string(target));
    test::node_fixture f(node_config(2));
    auto r = f.submit(2000);
    REQUIRE(f.vt.run_until([&] { return !r.rec->tokens.empty(); }, 10s));
    const std::string victim = f.busy_replica();
    REQUIRE(f.chaos(target, victim, chaos_action::kill));
    REQUIRE(f.vt.run_until([&] { return r.rec->terminal(); }, 10s));
    f.vt.run_for(3s);
    CHECK(r.rec->ends.empty());
    REQUIRE(r.rec->errors.size() == 1);
    CHECK(r.rec->errors[0].code == errc::replica_lost);
    CHECK(r.rec->order.back() == "error");
    CHECK(f.outcome("retried") == 0);
    CHECK(f.outcome("failed_mid_stream") == 1);
    CHECK(f.pool().active_requests == 0);
  }
}

TEST_CASE("lifecycle: an engine that fails (a device error): before the first token the request moves on; after it, one engine_failed event") {
  const std::string expected = reference_text("the device fails", 21, 40);
  test::node_fixture f(node_config(2));
  auto early = f.submit(40, "the device fails", 21);
  f.vt.run_ready();
  const std::string first = f.busy_replica();
  REQUIRE(f.chaos(chaos_target::engine, first, chaos_action::fail));
  REQUIRE(f.vt.run_until([&] { return early.rec->terminal(); }, 30s));
  REQUIRE(early.rec->ends.size() == 1);
  CHECK(early.rec->errors.empty());
  CHECK(early.rec->text() == expected);
  CHECK(early.rec->ends[0].attempts == 2);
  CHECK(early.rec->ends[0].replica_id != first);
  f.vt.run_for(2s);  // its replica started a fresh engine
  auto late = f.submit(2000, "a long one");
  REQUIRE(f.vt.run_until([&] { return !late.rec->tokens.empty(); }, 10s));
  const std::string second = f.busy_replica();
  REQUIRE(f.chaos(chaos_target::replica, second, chaos_action::fail));  // a replica passes it to its engine
  REQUIRE(f.vt.run_until([&] { return late.rec->terminal(); }, 10s));
  REQUIRE(late.rec->errors.size() == 1);
  CHECK(late.rec->errors[0].code == errc::engine_failed);
  CHECK(late.rec->ends.empty());
  f.vt.run_for(2s);
  std::uint32_t engine_restarts = 0;
  for (const auto& r : f.pool().replicas) {
    CHECK(r.phase == "serving");
    engine_restarts += r.restarts;
  }
  CHECK(engine_restarts == 2);  // each failed engine was started again by its replica
  CHECK(f.pool().restarts == 0);
  // A router cannot fail; it can only be killed or frozen.
  CHECK_FALSE(f.chaos(chaos_target::router, "chat-7b@v1", chaos_action::fail));
}

TEST_CASE("lifecycle: an engine that fails or is cancelled mid-coast streams and bills exactly what a step-by-step one does") {
  // A coasting engine (the simulator's) counts most of its streams' tokens only when it has
  // to: a failure, a cancel or its end must still send and bill every token that had ended.
  config::tenancy t;
  config::team_config search;
  search.name = "search";
  search.limits.push_back({"chat-7b", 60000, 100000, 0, 0});
  t.teams = {search};
  t.index();
  struct outcome {
    std::vector<int> streamed;
    double fill = 0;
  };
  auto run = [&](bool coast) {
    auto c = node_config(1, 60000, 2100);
    c.pools[0].coast_steps = coast;
    test::node_fixture f(c, std::make_shared<const config::tenancy>(t));
    std::vector<test::node_fixture::open_request> rs;
    for (int i = 0; i < 3; ++i) rs.push_back(f.submit(2000, "long answer " + std::to_string(i), 30 + i));
    f.vt.run_for(1000ms);
    for (int i = 3; i < 6; ++i) rs.push_back(f.submit(2000, "long answer " + std::to_string(i), 30 + i));
    f.vt.run_for(500ms);
    REQUIRE(f.in_engines() == 6);
    actors::stop_sink(rs[1].sink);  // a client gone mid-coast: its request is cancelled
    f.vt.run_for(1100ms);           // the other two of the first three time out (cancelled, with an error event)
    REQUIRE(rs[0].rec->errors.size() == 1);
    REQUIRE(f.in_engines() == 3);
    REQUIRE(f.chaos(chaos_target::engine, f.busy_replica(), chaos_action::fail));  // the last three fail
    REQUIRE(f.vt.run_until([&] { return rs[3].rec->terminal() && rs[4].rec->terminal() && rs[5].rec->terminal(); }, 10s));
    outcome o;
    for (const auto& r : rs) o.streamed.push_back(tokens_of(*r.rec));
    o.streamed[1] = 0;  // a coasting engine holds a stream's tokens after its first; this client left
    o.fill = f.gauges->buckets().at({"search", "chat-7b"});
    return o;
  };
  const outcome stepwise = run(false), coasting = run(true);
  CHECK(stepwise.streamed[0] > 20);
  CHECK(coasting.streamed == stepwise.streamed);
  CHECK(coasting.fill == stepwise.fill);  // the same tokens billed to the team
  CHECK(coasting.fill < 1);
}

TEST_CASE("lifecycle: a heartbeat reads a coasting engine as it would a step-by-step one, mid-coast") {
  // Beats every 37 ms land inside coasts: the engine answers with the figures step-by-step
  // running would have then (the steps ended and the one under way), without settling.
  auto run = [](bool coast) {
    auto c = node_config(1);
    c.pools[0].coast_steps = coast;
    c.pools[0].heartbeat_ms = 37;
    test::node_fixture f(c);
    std::vector<test::node_fixture::open_request> rs;
    for (int i = 0; i < 4; ++i) rs.push_back(f.submit(300 + 40 * i, "steady " + std::to_string(i), 50 + i));
    std::vector<std::int64_t> seen;  // the router's view of the replica, from its beats
    for (int k = 0; k < 80; ++k) {
      f.vt.run_for(29ms);
      if (k == 20) rs.push_back(f.submit(200, "a late one", 60));
      seen.push_back(f.pool().replicas.at(0).tokens_in_flight);
    }
    REQUIRE(f.vt.run_until([&] { return all_ended(rs); }, 60s));
    return std::pair{seen, f.gauges->engines().at(0).steps};
  };
  const auto [stepwise, stepwise_steps] = run(false);
  const auto [coasting, coasting_steps] = run(true);
  CHECK(std::count_if(stepwise.begin(), stepwise.end(), [](std::int64_t t) { return t > 0; }) > 60);
  CHECK(std::adjacent_find(stepwise.begin(), stepwise.end(), std::not_equal_to<>()) != stepwise.end());  // it moves
  CHECK(coasting == stepwise);
  CHECK(coasting_steps == stepwise_steps);
}

TEST_CASE("lifecycle: the retry budget caps retries in flight; the rest get 503 with Retry-After") {
  std::vector<std::string> expected;
  {
    test::node_fixture ref(node_config(1));
    std::vector<test::node_fixture::open_request> rs;
    for (int i = 0; i < 20; ++i) rs.push_back(ref.submit(30, "prompt number " + std::to_string(i), 100 + i));
    REQUIRE(ref.vt.run_until([&] { return all_ended(rs); }, 120s));
    for (const auto& r : rs) expected.push_back(r.rec->text());
  }
  test::node_fixture f(node_config(4));
  std::vector<test::node_fixture::open_request> rs;
  for (int i = 0; i < 20; ++i) rs.push_back(f.submit(30, "prompt number " + std::to_string(i), 100 + i));
  f.vt.run_ready();
  std::map<std::string, int> held;
  for (const auto& e : f.gauges->engines()) held[e.replica_id] = e.running + e.waiting;
  // Kill the three replicas holding the most: far more requests to retry than the budget.
  std::vector<std::pair<int, std::string>> by_load;
  for (const auto& [id, n] : held) by_load.push_back({n, id});
  std::sort(by_load.rbegin(), by_load.rend());
  int lost = 0;
  for (int k = 0; k < 3; ++k) {
    lost += by_load[static_cast<std::size_t>(k)].first;
    REQUIRE(f.chaos(chaos_target::replica, by_load[static_cast<std::size_t>(k)].second, chaos_action::kill));
  }
  REQUIRE(lost > 4);
  REQUIRE(f.vt.run_until([&] { return all_ended(rs); }, 120s));
  f.vt.run_for(2s);
  // A retry may land on a replica that is about to die too (the router hears of the deaths
  // one at a time): such a request is retried again, up to three attempts in all.
  int retried_done = 0, budget = 0, exhausted = 0, completed = 0;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    CAPTURE(i);
    CHECK(r.rec->ends.size() + r.rec->errors.size() == 1);
    if (!r.rec->ends.empty()) {
      ++completed;
      CHECK(r.rec->text() == expected[i]);
      if (r.rec->ends[0].attempts >= 2) ++retried_done;
      continue;
    }
    CHECK(r.rec->tokens.empty());
    CHECK(r.rec->errors[0].retry_after_s > 0);
    if (r.rec->errors[0].code == errc::retry_budget) ++budget;
    else if (r.rec->errors[0].code == errc::replica_lost) ++exhausted;  // its three replicas all died
    else FAIL("unexpected error code");
  }
  const int retried = static_cast<int>(f.outcome("retried"));
  CHECK(retried >= 3);
  CHECK(retried <= 4);  // 20% of 20 active
  CHECK(budget > 0);
  CHECK(retried_done + exhausted == retried);
  CHECK(retried + budget == lost);
  CHECK(completed == 20 - budget - exhausted);
}

TEST_CASE("lifecycle: no first token within first_token_timeout_ms: 504 and the sequence is cancelled") {
  test::node_fixture f(node_config(2, /*first_token_ms=*/2000));
  auto r = f.submit(50);
  f.vt.run_ready();
  const std::string victim = f.busy_replica();
  REQUIRE(f.chaos(chaos_target::engine, victim, chaos_action::freeze, 10));
  f.vt.run_for(1900ms);
  CHECK_FALSE(r.rec->terminal());
  f.vt.run_for(200ms);
  REQUIRE(r.rec->errors.size() == 1);
  CHECK(r.rec->errors[0].code == errc::timed_out);
  CHECK(r.rec->tokens.empty());
  // The front stops a request's sink at its terminal event; when the engine thaws it drops
  // the sequence, and nothing more reaches the client.
  actors::stop_sink(r.sink);
  f.vt.run_for(12s);
  CHECK(r.rec->errors.size() == 1);
  CHECK(r.rec->tokens.empty());
  CHECK(r.rec->ends.empty());
  CHECK(f.in_engines() == 0);
  CHECK(f.kv_all_free());
}

TEST_CASE("lifecycle: a first-token deadline falls due on time behind deadlines of requests that already streamed") {
  test::node_fixture f(node_config(2, /*first_token_ms=*/2000));
  auto a = f.submit(5);
  f.vt.run_for(500ms);
  auto b = f.submit(5);
  f.vt.run_for(500ms);
  REQUIRE(a.rec->ends.size() == 1);
  REQUIRE(b.rec->ends.size() == 1);
  auto c = f.submit(50);  // at t = 1 s; its engine stalls before the first token
  f.vt.run_ready();
  const std::string victim = f.busy_replica();
  REQUIRE_FALSE(victim.empty());
  REQUIRE(f.chaos(chaos_target::engine, victim, chaos_action::freeze, 10));
  f.vt.run_for(1900ms);  // t = 2.9 s: a's and b's deadlines have passed, quietly
  CHECK_FALSE(c.rec->terminal());
  CHECK(a.rec->errors.empty());
  CHECK(b.rec->errors.empty());
  f.vt.run_for(200ms);  // t = 3.1 s
  REQUIRE(c.rec->errors.size() == 1);
  CHECK(c.rec->errors[0].code == errc::timed_out);
  CHECK(c.rec->tokens.empty());
}

TEST_CASE("lifecycle: not finished within request_timeout_ms: tokens, then one error event, and the sequence is cancelled") {
  test::node_fixture f(node_config(2, 60000, /*request_ms=*/1000));
  auto r = f.submit(3000);
  f.vt.run_for(999ms);
  CHECK_FALSE(r.rec->terminal());
  CHECK_FALSE(r.rec->tokens.empty());
  f.vt.run_for(2ms);
  REQUIRE(r.rec->errors.size() == 1);
  CHECK(r.rec->errors[0].code == errc::timed_out);
  f.vt.run_for(1s);
  CHECK(r.rec->order.back() == "error");
  CHECK(f.in_engines() == 0);
}

TEST_CASE("lifecycle: a frozen replica leaves the ranking after 3 missed heartbeats and returns when it beats") {
  test::node_fixture f(node_config(2));
  f.vt.run_for(200ms);  // last beats at t = 0
  REQUIRE(f.chaos(chaos_target::replica, "chat-7b-v1-r0", chaos_action::freeze, 10));
  auto in_ranking = [&] {
    for (const auto& r : f.pool().replicas)
      if (r.replica_id == "chat-7b-v1-r0") return r.in_ranking;
    return false;
  };
  f.vt.run_for(3200ms);  // t = 3.4 s: two beats missed
  CHECK(in_ranking());
  f.vt.run_for(200ms);  // t = 3.6 s: the third
  CHECK_FALSE(in_ranking());
  // New requests all go to the other replica meanwhile, and complete.
  std::vector<test::node_fixture::open_request> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(f.submit(5, "frozen " + std::to_string(i), 1, "chat-7b", "search", "c" + std::to_string(i)));
  REQUIRE(f.vt.run_until([&] { return all_ended(rs); }, 10s));
  for (const auto& r : rs) {
    REQUIRE(r.rec->ends.size() == 1);
    CHECK(r.rec->ends[0].replica_id == "chat-7b-v1-r1");
  }
  f.vt.run_for(8s);  // thawed at 10.2 s: its next beat brings it back
  CHECK(in_ranking());
}

TEST_CASE("lifecycle: a replica whose engine does not answer misses its beats; its late answers do not count") {
  test::node_fixture f(node_config(2));
  f.vt.run_for(200ms);
  REQUIRE(f.chaos(chaos_target::engine, "chat-7b-v1-r0", chaos_action::freeze, 5.75));
  auto in_ranking = [&] {
    for (const auto& r : f.pool().replicas)
      if (r.replica_id == "chat-7b-v1-r0") return r.in_ranking;
    return false;
  };
  f.vt.run_for(3200ms);  // t = 3.4 s: asked at 1, 2 and 3 s, answered by none
  CHECK(in_ranking());
  f.vt.run_for(200ms);  // t = 3.6 s: the third beat missed
  CHECK_FALSE(in_ranking());
  // Thawed at 5.95 s: it answers every beat asked meanwhile, the one of 5 s too, all past
  // their deadline (0.9 s after each was asked): none counts.
  f.vt.run_for(2370ms);  // t = 5.97 s
  CHECK_FALSE(in_ranking());
  f.vt.run_for(80ms);  // t = 6.05 s: the beat of 6 s, answered at once
  CHECK(in_ranking());
  f.vt.run_for(3s);
  CHECK(in_ranking());
}

TEST_CASE("lifecycle: drain finishes in-flight work, takes no new, then stops") {
  test::node_fixture f(node_config(2));
  auto longest = f.submit(400);
  f.vt.run_ready();
  const std::string drained = f.busy_replica();
  REQUIRE(f.ask<std::string>(actors::drain_replica{drained}) == std::string("draining"));
  std::vector<test::node_fixture::open_request> rs;
  for (int i = 0; i < 10; ++i) rs.push_back(f.submit(5, "after drain " + std::to_string(i)));
  REQUIRE(f.vt.run_until([&] { return all_ended(rs) && longest.rec->terminal(); }, 60s));
  for (const auto& r : rs) {
    REQUIRE(r.rec->ends.size() == 1);
    CHECK(r.rec->ends[0].replica_id != drained);
  }
  REQUIRE(longest.rec->ends.size() == 1);  // the in-flight one finished where it was
  CHECK(longest.rec->ends[0].replica_id == drained);
  f.vt.run_for(2s);
  for (const auto& r : f.pool().replicas) {
    if (r.replica_id != drained) continue;
    CHECK(r.phase == "stopped");
    CHECK_FALSE(r.in_ranking);
  }
  for (const auto& e : f.gauges->engines()) CHECK(e.replica_id != drained);  // its engine is gone
  CHECK(f.ask<std::string>(actors::drain_replica{"no-such-replica"}).error() == caf::sec::invalid_argument);
}

TEST_CASE("lifecycle: a drained replica resumes: serving on while draining, its engine started again once stopped") {
  test::node_fixture f(node_config(2));
  const auto phase_of = [&](const std::string& id) {
    for (const auto& r : f.pool().replicas)
      if (r.replica_id == id) return r.phase;
    return std::string("absent");
  };
  auto longest = f.submit(400);
  f.vt.run_ready();
  const std::string id = f.busy_replica();
  REQUIRE(!id.empty());
  // Draining with a request in flight: resumed at once, it takes new requests again.
  REQUIRE(f.ask<std::string>(actors::drain_replica{id}) == std::string("draining"));
  CHECK(f.ask<std::string>(actors::drain_replica{id, true}) == std::string("serving"));
  f.vt.run_for(1500ms);
  const auto ranked = [&] {
    for (const auto& r : f.pool().replicas)
      if (r.replica_id == id) return r.phase == "serving" && r.in_ranking;
    return false;
  };
  CHECK(ranked());  // the router ranks it again (a drained one it does not)
  REQUIRE(f.vt.run_until([&] { return longest.rec->terminal(); }, 60s));
  REQUIRE(longest.rec->ends.size() == 1);
  CHECK(longest.rec->ends[0].replica_id == id);
  // Drained until stopped (its engine gone), then resumed: a new engine loads and serves.
  REQUIRE(f.ask<std::string>(actors::drain_replica{id}) == std::string("draining"));
  f.vt.run_for(2s);
  REQUIRE(phase_of(id) == "stopped");
  for (const auto& e : f.gauges->engines()) CHECK(e.replica_id != id);
  CHECK(f.ask<std::string>(actors::drain_replica{id, true}) == std::string("loading"));
  REQUIRE(f.vt.run_until([&] { return phase_of(id) == "serving"; }, 10s));
  f.vt.run_for(1500ms);  // its next beat puts it back in the ranking
  const auto engines = f.gauges->engines();
  CHECK(std::any_of(engines.begin(), engines.end(), [&](const auto& e) {
    return e.replica_id == id && e.kv_blocks_total > 0 && e.kv_blocks_free == e.kv_blocks_total;  // fresh KV
  }));
  CHECK(ranked());
  std::vector<test::node_fixture::open_request> rs;
  for (int i = 0; i < 10; ++i) rs.push_back(f.submit(5, "after restart " + std::to_string(i)));
  REQUIRE(f.vt.run_until([&] { return all_ended(rs); }, 60s));
  CHECK(std::any_of(rs.begin(), rs.end(), [&](const auto& r) { return r.rec->ends.at(0).replica_id == id; }));
  // Resuming one that serves changes nothing; one the autoscaler drains to remove is refused.
  CHECK(f.ask<std::string>(actors::drain_replica{id, true}) == std::string("serving"));
  REQUIRE(f.ask<std::string>(actors::drain_replica{id, false, true}) == std::string("draining"));
  const auto refused = f.ask<std::string>(actors::drain_replica{id, true});
  REQUIRE_FALSE(refused);
  CHECK(actors::kiln_error(refused.error()) == actors::errc::conflict);
  CHECK(f.ask<std::string>(actors::drain_replica{"no-such-replica", true}).error() == caf::sec::invalid_argument);
}

TEST_CASE("lifecycle: a replica its autoscaler drained leaves the pool even when that autoscaler dies first") {
  auto cfg = node_config(3);
  auto& scale = cfg.pools[0].autoscale;
  scale.enabled = true;
  scale.min_replicas = 1;
  scale.max_replicas = 3;
  scale.interval_s = 1;
  scale.down_every_s = 1;
  test::node_fixture f(cfg);
  // Idle: the autoscaler drains the newest replica; it is marked as leaving at once.
  std::string leaving;
  REQUIRE(f.vt.run_until([&] {
    for (const auto& r : f.pool().replicas)
      if (r.leaving) leaving = r.replica_id;
    return !leaving.empty();
  }, 30s));
  CHECK(leaving == "chat-7b-v1-r2");
  // Its autoscaler dies before it could remove it; the next one finishes the removal.
  REQUIRE(f.chaos(actors::chaos_target::autoscaler, "chat-7b@v1", actors::chaos_action::kill));
  CHECK(f.vt.run_until([&] {
    const auto rs = f.pool().replicas;
    return std::none_of(rs.begin(), rs.end(), [&](const auto& r) { return r.replica_id == leaving; });
  }, 30s));
  const auto refused = f.ask<std::string>(actors::drain_replica{leaving, true});
  CHECK_FALSE(refused);  // gone: nothing to resume
}

TEST_CASE("lifecycle: restarts past the intensity make the pool degraded (503, Retry-After), then it recovers") {
  auto cfg = node_config(2, 60000, 600000, /*intensity=*/1);
  cfg.pools[0].restart_period_ms = 30000;
  test::node_fixture f(cfg);
  const std::string r0 = "chat-7b-v1-r0";
  // Two engine deaths within the period: the replica gives up (its pool restarts it, once).
  REQUIRE(f.chaos(chaos_target::engine, r0, chaos_action::kill));
  f.vt.run_for(100ms);
  REQUIRE(f.chaos(chaos_target::engine, r0, chaos_action::kill));
  f.vt.run_for(100ms);
  CHECK(f.pool().restarts == 1);
  CHECK(f.pool().status == "serving");
  // A second replica death within the period: past the pool's intensity.
  REQUIRE(f.chaos(chaos_target::replica, r0, chaos_action::kill));
  f.vt.run_for(100ms);
  const auto pool = f.pool();
  CHECK(pool.status == "degraded");
  CHECK(pool.retry_after_s > 0);
  CHECK(pool.retry_after_s <= 30);
  bool gauge_degraded = false;
  for (const auto& g : f.gauges->pools()) gauge_degraded = gauge_degraded || g.status == "degraded";
  CHECK(gauge_degraded);
  auto refused = f.submit(5);
  f.vt.run_for(100ms);
  REQUIRE(refused.rec->errors.size() == 1);
  CHECK(refused.rec->errors[0].code == errc::degraded);
  CHECK(refused.rec->errors[0].retry_after_s > 0);
  CHECK(refused.rec->errors[0].retry_after_s <= 30);
  // After the period the pool starts its replicas again and serves.
  f.vt.run_for(31s);
  CHECK(f.pool().status == "serving");
  auto served = f.submit(5);
  REQUIRE(f.vt.run_until([&] { return served.rec->terminal(); }, 10s));
  CHECK(served.rec->ends.size() == 1);
}

TEST_CASE("lifecycle: a killed router is restarted; requests it owned finish at their sinks, new ones are routed") {
  test::node_fixture f(node_config(2));
  auto before = f.submit(200);
  REQUIRE(f.vt.run_until([&] { return !before.rec->tokens.empty(); }, 10s));
  REQUIRE(f.chaos(chaos_target::router, "chat-7b@v1", chaos_action::kill));
  f.vt.run_for(1500ms);  // the new router hears its replicas' heartbeats
  auto after = f.submit(5);
  REQUIRE(f.vt.run_until([&] { return before.rec->terminal() && after.rec->terminal(); }, 30s));
  REQUIRE(before.rec->ends.size() == 1);  // the engine ended it itself, its owner gone
  CHECK(tokens_of(*before.rec) == before.rec->ends[0].completion_tokens);
  REQUIRE(after.rec->ends.size() == 1);
  CHECK(f.pool().restarts == 1);
}

TEST_CASE("lifecycle: requests on their way to a router that is killed come back as 503, none is lost") {
  test::node_fixture f(node_config(2));
  // A frozen router keeps what arrives in its mailbox; then it is killed with all of it there.
  REQUIRE(f.chaos(chaos_target::router, "chat-7b@v1", chaos_action::freeze, 30));
  std::vector<test::node_fixture::open_request> rs;
  for (int i = 0; i < 30; ++i) rs.push_back(f.submit(5, "racing " + std::to_string(i)));
  f.vt.run_ready();
  REQUIRE(f.chaos(chaos_target::router, "chat-7b@v1", chaos_action::kill));
  REQUIRE(f.vt.run_until([&] { return all_ended(rs); }, 10s));  // far below the front's last resort
  int bounced = 0;
  for (const auto& r : rs) {
    CHECK(r.rec->ends.size() + r.rec->errors.size() == 1);
    if (!r.rec->errors.empty()) {
      CHECK(r.rec->errors[0].code == errc::unavailable);
      CHECK(r.rec->errors[0].retry_after_s > 0);
      CHECK(r.rec->tokens.empty());
      ++bounced;
    }
  }
  CHECK(bounced == 30);
  // The restarted router serves.
  f.vt.run_for(1500ms);
  auto after = f.submit(5);
  REQUIRE(f.vt.run_until([&] { return after.rec->terminal(); }, 10s));
  CHECK(after.rec->ends.size() == 1);
}

TEST_CASE("pools by model@version: the alias resolves to the live version; a pinned version is served by its own pool") {
  auto c = test::sim_node_config(1);
  c.pools.push_back(c.pools[0]);
  c.pools[1].version = "v2";
  c.models[0].live_version = "v2";
  test::node_fixture f(c);
  auto live = f.submit(5);
  auto pinned = f.submit(5, "hello kiln", 1, "chat-7b@v1");
  REQUIRE(f.vt.run_until([&] { return live.rec->terminal() && pinned.rec->terminal(); }, 10s));
  REQUIRE(live.rec->ends.size() == 1);
  REQUIRE(pinned.rec->ends.size() == 1);
  CHECK(live.rec->ends[0].model_version == "v2");
  CHECK(live.rec->ends[0].replica_id == "chat-7b-v2-r0");
  CHECK(pinned.rec->ends[0].model_version == "v1");
  CHECK(pinned.rec->text() == live.rec->text());  // the sim answer depends on prompt and seed only
  auto views = f.ask<std::vector<actors::pool_view>>(actors::pool_state_request{"chat-7b"});
  REQUIRE(views);
  REQUIRE(views->size() == 2);
  CHECK((*views)[0].version == "v1");
  CHECK((*views)[1].version == "v2");
}
