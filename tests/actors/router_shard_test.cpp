// The router shard's state without a mailbox: ranking, load bound, heartbeats, and the
// ownership table's retry budget.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <set>

#include <caf/all.hpp>

#include "actors/ownership.hpp"
#include "actors/router_shard.hpp"
#include "tests/support/actor_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

struct router_fixture : test::actor_fixture {
  actors::router_shard_state st;
  caf::actor_clock::time_point t0 = vt.now();

  caf::actor dummy() {
    return sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  }
  /// `n` serving replicas r0.., each with a beat at t0.
  void serving(int n) {
    for (int i = 0; i < n; ++i) {
      actors::replica_status s;
      s.replica_id = "r" + std::to_string(i);
      s.phase = actors::replica_phase::serving;
      s.engine = dummy();
      router_entry(s.replica_id);
      st.on_status(s, t0);
    }
  }
  void router_entry(const std::string& id) { st.add_replica(id, caf::actor{}); }
  ~router_fixture() {
    for (auto& e : st.replicas) caf::anon_send_exit(e.engine, caf::exit_reason::user_shutdown);
    vt.run_ready();
  }
};

}  // namespace

TEST_CASE_FIXTURE(router_fixture, "router shard state: a key keeps its replica until that replica is 1.25x over average") {
  serving(4);
  std::set<int> used;
  for (std::uint64_t key = 1; key <= 64; ++key) {
    const int r = st.pick(key, 10, t0);
    CHECK(r == st.pick(key, 10, t0));
    used.insert(r);
  }
  CHECK(used.size() == 4);
  const std::uint64_t key = 42;
  const int home = st.pick(key, 10, t0);
  auto& h = st.replicas[static_cast<std::size_t>(home)];
  // Exactly at the bound it stays home; one token past it, the key moves.
  // With the job: average = (sent + 10) / 4, bound = 1.25 x that; sent = 1.25 (sent + 10) / 4 at sent = 4.545..
  h.sent = 4;  // 4 <= 1.25 * 14 / 4 = 4.375
  CHECK(st.pick(key, 10, t0) == home);
  h.sent = 5;  // 5 > 1.25 * 15 / 4 = 4.6875
  const int moved = st.pick(key, 10, t0);
  CHECK(moved != home);
  // A report taken before those jobs arrived does not hide them; one taken after does.
  actors::replica_status s{h.replica_id, actors::replica_phase::serving, h.engine, {}, 0};
  st.on_status(s, t0);
  CHECK(st.pick(key, 10, t0) == moved);
  s.load.received_tokens = 5;
  st.on_status(s, t0);
  CHECK(h.tokens() == 0);
  CHECK(st.pick(key, 10, t0) == home);
  // Excluded replicas (already tried) are skipped; with every one excluded there is none.
  const std::vector<std::string> tried{h.replica_id};
  const int next = st.pick(key, 10, t0, tried);
  CHECK(next >= 0);
  CHECK(next != home);
  CHECK(st.pick(key, 10, t0, {"r0", "r1", "r2", "r3"}) == -1);
}

TEST_CASE_FIXTURE(router_fixture, "router shard state: everyone over the bound gets the least loaded; none serving gives -1") {
  serving(2);
  st.replicas[0].reported = 100;
  st.replicas[1].reported = 50;
  CHECK(st.pick(7, 1000, t0) == 1);
  actors::router_shard_state empty;
  CHECK(empty.pick(1, 1, t0) == -1);
}

TEST_CASE_FIXTURE(router_fixture, "heartbeats: a replica leaves the ranking after exactly 3 missed beats and returns with the next") {
  serving(2);
  auto& r0 = st.replicas[0];
  // Beat due every second; one counts as missed half a period after it was due.
  CHECK(st.missed_beats(r0, t0 + 1400ms) == 0);
  CHECK(st.missed_beats(r0, t0 + 1500ms) == 1);
  CHECK(st.missed_beats(r0, t0 + 3499ms) == 2);
  CHECK(st.in_ranking(r0, t0 + 3499ms));
  CHECK(st.missed_beats(r0, t0 + 3500ms) == 3);
  CHECK_FALSE(st.in_ranking(r0, t0 + 3500ms));
  // Its keys go elsewhere meanwhile (r1 kept beating).
  auto& r1 = st.replicas[1];
  st.on_status({r1.replica_id, actors::replica_phase::serving, r1.engine, {}, 0}, t0 + 3s);
  for (std::uint64_t key = 1; key <= 32; ++key) CHECK(st.pick(key, 1, t0 + 4s) == 1);
  // One beat brings it back.
  actors::replica_status s{r0.replica_id, actors::replica_phase::serving, r0.engine, {}, 0};
  st.on_status(s, t0 + 9s);
  CHECK(st.in_ranking(r0, t0 + 9s));
  CHECK(st.view(t0 + 9s).replicas[0].in_ranking);
  CHECK(st.view(t0 + 12500ms).replicas[0].missed_heartbeats == 3);
}

TEST_CASE_FIXTURE(router_fixture, "heartbeats: only serving replicas with an engine rank") {
  serving(1);
  auto& e = st.replicas[0];
  for (auto phase : {actors::replica_phase::starting, actors::replica_phase::loading, actors::replica_phase::draining,
                     actors::replica_phase::stopped, actors::replica_phase::failed}) {
    CAPTURE(actors::to_string(phase));
    e.phase = phase;
    CHECK_FALSE(st.in_ranking(e, t0));
    CHECK(st.pick(1, 1, t0) == -1);
  }
  e.phase = actors::replica_phase::serving;
  CHECK(st.in_ranking(e, t0));
  e.engine = nullptr;  // its engine died: out until a beat names the new one
  CHECK_FALSE(st.in_ranking(e, t0));
}

TEST_CASE("ownership: retries in flight stay within 20% of active requests, at least 3") {
  struct row {
    int active;
    int retrying;
    bool allowed;
  };
  // 3 always; 20% from 15 active on; at and one past each limit.
  const row table[] = {{3, 2, true},   {3, 3, false},  {14, 2, true},  {14, 3, false}, {15, 2, true},
                       {15, 3, false}, {20, 3, true},  {20, 4, false}, {24, 4, false}, {25, 4, true},
                       {25, 5, false}, {100, 19, true}, {100, 20, false}};
  for (const auto& t : table) {
    CAPTURE(t.active);
    CAPTURE(t.retrying);
    actors::ownership own;
    for (int i = 0; i < t.active; ++i) {
      actors::request r;
      r.id = {1, static_cast<std::uint64_t>(i + 1)};
      auto& o = own.add(r, {});
      o.tried = {"a"};
      if (i < t.retrying) own.begin_retry(o);
    }
    CHECK(own.retrying() == static_cast<std::size_t>(t.retrying));
    CHECK(own.retry_allowed() == t.allowed);
  }
}

TEST_CASE("ownership: a retried request counts once until it ends; stale attempts find nothing") {
  actors::ownership own;
  actors::request r;
  r.id = {9, 1};
  auto& o = own.add(r, {});
  own.begin_retry(o);
  own.begin_retry(o);  // its second retry is the same retry in flight
  CHECK(own.retrying() == 1);
  o.req.attempt = 2;
  CHECK(own.find(r.id, 2) == &o);
  CHECK(own.find(r.id, 1) == nullptr);
  own.erase(r.id);
  CHECK(own.retrying() == 0);
  CHECK(own.active() == 0);
}

TEST_CASE_FIXTURE(router_fixture, "ownership: records stay put while others come and go; walks go in id order") {
  actors::ownership own;
  const caf::actor e1 = dummy(), e2 = dummy();
  std::vector<actors::owned_request*> kept;
  // Ids added out of order, from two origins; every third runs on e1, the rest on e2.
  for (std::uint64_t k = 0; k < 300; ++k) {
    actors::request r;
    r.id = {k % 2 ? 7u : 3u, (k * 37) % 300 + 1};
    auto& o = own.add(r, {});
    o.engine = k % 3 == 0 ? e1 : e2;
    kept.push_back(&o);
  }
  for (std::uint64_t k = 0; k < 300; k += 2) own.erase({3, (k * 37) % 300 + 1});  // the even k
  CHECK(own.active() == 150);
  for (std::uint64_t k = 1; k < 300; k += 2) {
    CAPTURE(k);
    const actors::request_id id{7, (k * 37) % 300 + 1};
    CHECK(own.find(id) == kept[k]);  // the same record, at the same address
    CHECK(kept[k]->req.id == id);
  }
  const auto all = own.ids();
  CHECK(all.size() == 150);
  CHECK(std::is_sorted(all.begin(), all.end()));
  const auto on_e1 = own.on_engine(e1.address());
  CHECK(std::is_sorted(on_e1.begin(), on_e1.end()));
  CHECK(on_e1.size() == 50);  // odd k that are multiples of 3
  for (const auto& id : on_e1) CHECK(own.find(id)->engine == e1);
  CHECK(own.on_engine(e2.address()).size() == 100);
  for (const auto& a : {e1, e2}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("router: the affinity key is the conversation id, else team and prompt opening") {
  actors::request a;
  a.team = "search";
  a.prompt = {1, 2, 3};
  actors::request b = a;
  CHECK(actors::affinity_key(a) == actors::affinity_key(b));
  b.team = "assistant";
  CHECK(actors::affinity_key(a) != actors::affinity_key(b));
  actors::request c = a;
  c.conversation_id = "conv-1";
  actors::request d = c;
  d.prompt = {9, 9, 9};  // a later turn of the same conversation
  CHECK(actors::affinity_key(c) == actors::affinity_key(d));
  CHECK(actors::affinity_key(c) != actors::affinity_key(a));
}

TEST_CASE_FIXTURE(router_fixture, "router shard state: the A/B baselines, round robin and least tokens in flight") {
  serving(3);
  st.replicas[0].sent = 30;
  st.replicas[1].sent = 10;
  st.replicas[2].sent = 20;
  SUBCASE("least tokens: the least loaded whatever the key, the next least when it is excluded") {
    st.cfg.policy = actors::routing_policy::least_tokens;
    for (std::uint64_t key = 1; key <= 16; ++key) CHECK(st.pick(key, 10, t0) == 1);
    CHECK(st.pick(7, 10, t0, {"r1"}) == 2);
    st.replicas[1].sent = 20;  // a tie goes to the first in order
    CHECK(st.pick(7, 10, t0) == 1);
  }
  SUBCASE("round robin: each serving replica in turn whatever its load, skipping one out of the ranking") {
    st.cfg.policy = actors::routing_policy::round_robin;
    std::vector<int> turns;
    for (int i = 0; i < 6; ++i) turns.push_back(st.pick(99, 10, t0));
    CHECK(turns == std::vector<int>{0, 1, 2, 0, 1, 2});
    st.replicas[1].phase = actors::replica_phase::draining;
    turns.clear();
    for (int i = 0; i < 4; ++i) turns.push_back(st.pick(99, 10, t0));
    CHECK(turns == std::vector<int>{0, 2, 0, 2});
    CHECK(st.pick(99, 10, t0, {"r0", "r2"}) == -1);
  }
  SUBCASE("the default keeps the key's home while it is within the bound") {
    CHECK(st.cfg.policy == actors::routing_policy::prefix_affinity_bounded);
    std::set<int> homes;
    for (std::uint64_t key = 1; key <= 32; ++key) homes.insert(st.pick(key, 10, t0));
    CHECK(homes.size() >= 2);  // keys spread; least-tokens would send all to r1
  }
  CHECK(actors::routing_policy_from("round_robin") == actors::routing_policy::round_robin);
  CHECK(actors::routing_policy_from("least_tokens") == actors::routing_policy::least_tokens);
  CHECK(actors::routing_policy_from("prefix_affinity_bounded") == actors::routing_policy::prefix_affinity_bounded);
}
