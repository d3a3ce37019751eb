// The shedding order as a table: load level x tier x team share -> what admission does.
#include <doctest/doctest.h>

#include "actors/overload.hpp"

using namespace kiln::actors;
using kiln::engine::priority;

TEST_CASE("overload: load level x tier x team share x queue -> run, wait, 429 or shed") {
  // Capacity 1,000 tokens in flight; each request adds 100. `in_flight` sets the load after
  // the request: 600 -> 0.7 (normal), 750 -> 0.85 (busy), 950 -> 1.05 (full).
  struct row {
    const char* case_name;
    std::int64_t in_flight;
    std::int64_t team_in_flight;
    double share;
    bool queue_full;
    priority tier;
    admission_verdict want;
  };
  using v = admission_verdict;
  const row table[] = {
      // normal: everything runs
      {"normal interactive", 600, 0, 0, false, priority::interactive, v::run},
      {"normal standard", 600, 0, 0, false, priority::standard, v::run},
      {"normal batch", 600, 0, 0, false, priority::batch, v::run},
      {"exactly at busy, batch still runs", 700, 0, 0, false, priority::batch, v::run},
      // busy: batch pauses first, the others run
      {"busy batch waits", 750, 0, 0, false, priority::batch, v::wait},
      {"busy batch, queue full: shed", 750, 0, 0, true, priority::batch, v::shed},
      {"busy standard runs", 750, 0, 0, false, priority::standard, v::run},
      {"busy interactive runs", 750, 0, 0, false, priority::interactive, v::run},
      {"exactly at capacity, standard runs", 900, 0, 0, false, priority::standard, v::run},
      // full: above its share a team gets 429, whatever the tier
      {"full, no share, interactive", 950, 0, 0, false, priority::interactive, v::over_share},
      {"full, above share, standard", 950, 300, 0.3, false, priority::standard, v::over_share},
      {"full, one past the share", 950, 201, 0.3, false, priority::interactive, v::over_share},
      // full, inside the share: standard waits, interactive runs (never shed)
      {"full, exactly at the share, interactive", 950, 200, 0.3, false, priority::interactive, v::run},
      {"full, inside share, interactive, queue full", 950, 0, 0.3, true, priority::interactive, v::run},
      {"full, inside share, standard waits", 950, 0, 0.3, false, priority::standard, v::wait},
      {"full, inside share, standard, queue full: shed", 950, 0, 0.3, true, priority::standard, v::shed},
      {"full, inside share, batch still pauses", 950, 0, 0.3, false, priority::batch, v::wait},
  };
  for (const auto& r : table) {
    CAPTURE(std::string(r.case_name));
    load_picture p;
    p.capacity = 1000;
    p.in_flight = r.in_flight;
    p.team_in_flight = r.team_in_flight;
    p.team_share = r.share;
    p.charge = 100;
    p.queue_full = r.queue_full;
    CHECK(decide(p, r.tier) == r.want);
  }
  load_picture none;  // no capacity known: nothing is held back
  none.in_flight = 1 << 30;
  CHECK(decide(none, priority::batch) == admission_verdict::run);
}

#include <chrono>

#include "actors/pool_gate.hpp"

namespace {

using namespace std::chrono_literals;

request ask(std::uint64_t seq, const std::string& team, priority tier) {
  request r;
  r.id = {1, seq};
  r.team = team;
  r.priority = tier;
  return r;
}

std::vector<std::uint64_t> seqs(const std::vector<request>& rs) {
  std::vector<std::uint64_t> out;
  for (const auto& r : rs) out.push_back(r.id.seq);
  return out;
}

}  // namespace

TEST_CASE("pool gate: batch pauses first, teams above their share get 429, standard waits, interactive runs") {
  const pool_gate::time_point t0{};
  pool_gate g(1000, 10, 30s);
  pool_gate::moves m;
  for (std::uint64_t i = 1; i <= 8; ++i) g.arrive(ask(i, "a", priority::standard), 100, 0, t0, m);  // load 0.8
  CHECK(m.run.size() == 8);
  g.arrive(ask(9, "a", priority::batch), 100, 0, t0, m);  // would be 0.9: batch waits
  CHECK(g.waiting(priority::batch) == 1);
  g.arrive(ask(10, "a", priority::standard), 100, 0, t0, m);  // 0.9: runs
  g.arrive(ask(11, "a", priority::standard), 100, 0, t0, m);  // 1.0: runs
  CHECK(m.run.size() == 10);
  g.arrive(ask(12, "a", priority::interactive), 100, 0, t0, m);  // full, team a has no share: 429
  REQUIRE(m.refused.size() == 1);
  CHECK(m.refused[0].why == admission_verdict::over_share);
  g.arrive(ask(13, "b", priority::standard), 100, 0.2, t0, m);     // full, b inside its share: waits
  g.arrive(ask(14, "b", priority::interactive), 100, 0.2, t0, m);  // inside its share: runs
  CHECK(g.waiting(priority::standard) == 1);
  CHECK(m.run.back().id.seq == 14);
  CHECK(g.in_flight() == 1100);
  CHECK(g.team_in_flight("b") == 100);
  // Ends let the most urgent in first: standard before batch.
  pool_gate::moves after;
  g.end({1, 1}, t0, after);
  g.end({1, 2}, t0, after);
  g.end({1, 3}, t0, after);
  CHECK(seqs(after.run) == std::vector<std::uint64_t>{13});
  for (std::uint64_t i = 4; i <= 8; ++i) g.end({1, i}, t0, after);
  CHECK(seqs(after.run) == std::vector<std::uint64_t>{13, 9});  // batch once load allows
  CHECK(g.waiting() == 0);
  g.end({1, 99}, t0, after);  // unknown: nothing happens
  CHECK(after.refused.empty());
}

TEST_CASE("pool gate: past the queue limit the newest of the lowest tier present is shed") {
  const pool_gate::time_point t0{};
  pool_gate g(100, 2, 30s);
  pool_gate::moves m;
  g.arrive(ask(1, "a", priority::standard), 100, 0, t0, m);  // fills the pool (1.0)
  g.arrive(ask(2, "a", priority::batch), 50, 0, t0, m);
  g.arrive(ask(3, "a", priority::batch), 50, 0, t0, m);  // the queue is at its limit (2)
  CHECK(g.waiting() == 2);
  g.arrive(ask(4, "b", priority::standard), 50, 0.9, t0, m);  // waits; batch 3 gives way
  REQUIRE(m.refused.size() == 1);
  CHECK(m.refused[0].r.id.seq == 3);
  CHECK(m.refused[0].why == admission_verdict::shed);
  g.arrive(ask(5, "a", priority::batch), 50, 0, t0, m);  // nothing lower to give way: shed itself
  REQUIRE(m.refused.size() == 2);
  CHECK(m.refused[1].r.id.seq == 5);
  CHECK(g.waiting(priority::standard) == 1);
  CHECK(g.waiting(priority::batch) == 1);
}

TEST_CASE("pool gate: a request that waits past max_wait ends; no capacity means no gate") {
  const pool_gate::time_point t0{};
  pool_gate g(100, 10, 2s);
  pool_gate::moves m;
  g.arrive(ask(1, "a", priority::standard), 100, 0, t0, m);
  g.arrive(ask(2, "a", priority::batch), 10, 0, t0 + 500ms, m);
  CHECK(g.next_expiry() == t0 + 2500ms);
  g.expire(t0 + 2499ms, m);
  CHECK(m.refused.empty());
  g.expire(t0 + 2500ms, m);
  REQUIRE(m.refused.size() == 1);
  CHECK(m.refused[0].why == admission_verdict::wait);
  CHECK(g.next_expiry() == pool_gate::time_point::max());
  pool_gate open;  // capacity 0
  pool_gate::moves all;
  for (std::uint64_t i = 1; i <= 100; ++i) open.arrive(ask(i, "a", priority::batch), 1000000, 0, t0, all);
  CHECK(all.run.size() == 100);
}

#include "tests/support/node_fixture.hpp"

TEST_CASE("overload on a node: batch waits, a team above its share gets 429, inside its share standard waits and interactive runs") {
  using namespace kiln;
  auto cfg = test::sim_node_config(2);
  cfg.pools[0].capacity_tokens = 5100;  // 10,200 tokens in flight in all; each request below charges ~1,011
  config::tenancy t;
  config::team_config search, assistant, batchers;
  search.name = "search";
  search.limits.push_back({"chat-7b", 0, 0, 0, 0.5});
  assistant.name = "assistant";
  batchers.name = "batchers";
  batchers.max_priority = priority::batch;
  t.teams = {search, assistant, batchers};
  t.index();
  test::node_fixture f(cfg, std::make_shared<const config::tenancy>(t));
  std::vector<test::node_fixture::open_request> fill;
  for (int i = 0; i < 8; ++i) fill.push_back(f.submit(1000, "fill " + std::to_string(i), 1, "chat-7b", "assistant", "", priority::standard));
  auto batch = f.submit(1000, "a batch job", 1, "chat-7b", "batchers", "", priority::interactive);  // clamped to batch
  for (int i = 8; i < 10; ++i) fill.push_back(f.submit(1000, "fill " + std::to_string(i), 1, "chat-7b", "assistant", "", priority::standard));
  auto over_share = f.submit(1000, "no share", 1, "chat-7b", "assistant", "", priority::interactive);
  auto share_std = f.submit(1000, "inside the share", 1, "chat-7b", "search", "", priority::standard);
  auto share_int = f.submit(1000, "inside, interactive", 1, "chat-7b", "search", "", priority::interactive);
  f.vt.run_for(100ms);
  REQUIRE(over_share.rec->errors.size() == 1);
  CHECK(over_share.rec->errors[0].code == actors::errc::over_limit);
  CHECK(over_share.rec->errors[0].retry_after_s > 0);
  CHECK(batch.rec->tokens.empty());     // waiting
  CHECK(share_std.rec->tokens.empty());  // waiting
  CHECK_FALSE(share_int.rec->tokens.empty());  // running though the pool is full
  for (const auto& r : fill) CHECK_FALSE(r.rec->tokens.empty());
  // As the pool drains, the waiting standard request runs before the batch one.
  REQUIRE(f.vt.run_until([&] { return !share_std.rec->tokens.empty(); }, 60s));
  CHECK(batch.rec->tokens.empty());
  REQUIRE(f.vt.run_until([&] { return batch.rec->terminal(); }, 120s));
  CHECK(batch.rec->ends.size() == 1);
  CHECK(share_std.rec->ends.size() == 1);
}
