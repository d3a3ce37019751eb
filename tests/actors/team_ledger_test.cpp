// Team limits: the ledger's charges, refunds and slots for every way a request ends, then
// the same through a whole node on virtual time (429 with an honest Retry-After).
#include <doctest/doctest.h>

#include <chrono>

#include "actors/team_ledger.hpp"
#include "tests/support/node_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using actors::errc;

namespace {

std::shared_ptr<const config::tenancy> tenants(double tpm, double burst, int max_concurrency,
                                               engine::priority max_priority = engine::priority::interactive) {
  config::tenancy t;
  config::team_config team;
  team.name = "search";
  team.max_priority = max_priority;
  team.limits.push_back({"chat-7b", tpm, burst, max_concurrency, 0});
  t.teams.push_back(team);
  config::team_config other;
  other.name = "assistant";
  t.teams.push_back(other);
  t.index();
  return std::make_shared<const config::tenancy>(std::move(t));
}

actors::request req(std::uint64_t seq, int prompt, int max_tokens, const std::string& team = "search") {
  actors::request r;
  r.id = {1, seq};
  r.team = team;
  r.model = "chat-7b";
  r.prompt.assign(static_cast<std::size_t>(prompt), 7);
  r.sampling.max_tokens = max_tokens;
  return r;
}

actors::request_released ended(const actors::request& r, int prompt, int completion, bool known = true) {
  actors::request_released e;
  e.id = r.id;
  e.usage = {prompt, completion, 0};
  e.usage_known = known;
  return e;
}

}  // namespace

TEST_CASE("team ledger: every way a request ends refunds exactly what it did not use") {
  const actors::team_ledger::time_point t0{};
  actors::team_ledger l(tenants(6000, 1000, 0));
  struct row {
    const char* how;
    int prompt, max_tokens;
    int used_prompt, used_completion;
    bool known;
    std::int64_t refunded;
  };
  const row table[] = {
      {"completed early (stop)", 100, 300, 100, 120, true, 180},
      {"completed at max_tokens", 100, 300, 100, 300, true, 0},
      {"failed before its first token", 100, 300, 0, 0, true, 400},
      {"cancelled (client gone) mid-stream", 100, 300, 100, 40, true, 260},
      {"failed mid-stream, engine lost with the count", 100, 300, 0, 0, false, 0},
  };
  for (const auto& t : table) {
    CAPTURE(std::string(t.how));
    actors::team_ledger ledger(tenants(6000, 1000, 0));
    auto r = req(1, t.prompt, t.max_tokens);
    REQUIRE_FALSE(ledger.admit(r, t0));
    const std::int64_t after_charge = ledger.limit_info(r, t0).remaining_tokens;
    CHECK(after_charge == 1000 - (t.prompt + t.max_tokens));
    CHECK(ledger.in_flight("search", "chat-7b") == 1);
    CHECK(ledger.release(ended(r, t.used_prompt, t.used_completion, t.known), t0));
    CHECK(ledger.limit_info(r, t0).remaining_tokens - after_charge == t.refunded);
    CHECK(ledger.in_flight("search", "chat-7b") == 0);
    CHECK(ledger.tokens_in_flight("search", "chat-7b") == 0);
    CHECK_FALSE(ledger.release(ended(r, 0, 0), t0));  // once only
  }
  // Refused requests are never charged: nothing to refund, no slot taken.
  auto big = req(2, 100, 950);
  auto refused = l.admit(big, t0);
  REQUIRE(refused);
  CHECK(refused->code == errc::invalid_request);  // 1,050 > the bucket's 1,000: it can never fit
  CHECK(refused->param == "max_tokens");
  CHECK(l.charges() == 0);
}

TEST_CASE("team ledger: the bucket's limit at and one past it; Retry-After; no limit, no charge") {
  const actors::team_ledger::time_point t0{};
  actors::team_ledger l(tenants(600, 1000, 0));  // 10 tokens a second
  CHECK_FALSE(l.admit(req(1, 500, 500), t0));  // exactly the bucket
  auto over = l.admit(req(2, 1, 0), t0);         // one token past it
  REQUIRE(over);
  CHECK(over->code == errc::over_limit);
  CHECK(over->retry_after_s == 1);
  CHECK(over->message.find("600 tokens per minute") != std::string::npos);
  auto later = l.admit(req(3, 30, 20), t0);
  REQUIRE(later);
  CHECK(later->retry_after_s == 5);  // 50 tokens at 10 a second
  CHECK_FALSE(l.admit(req(3, 30, 20), t0 + 5s));
  // Another team has no limit: admitted, with no rate-limit figures.
  CHECK_FALSE(l.admit(req(4, 5000, 5000, "assistant"), t0));
  CHECK(l.limit_info(req(5, 1, 1, "assistant"), t0).limit_tokens == 0);
}

TEST_CASE("team ledger: a region's share of a limit runs its bucket; what was asked is counted, refused or not") {
  const actors::team_ledger::time_point t0{};
  actors::team_ledger l(tenants(600, 1000, 0));
  CHECK(l.region_share("search", "chat-7b") == 1);
  // Nothing asked yet: every limited pair is reported, at 0; a team without a limit is not.
  auto asked = l.take_asked();
  REQUIRE(asked.size() == 1);
  CHECK(asked.begin()->first == std::make_pair(std::string("search"), std::string("chat-7b")));
  CHECK(asked.begin()->second == 0);
  // A quarter of the limit here: a burst of 250 at 2.5 tokens a second, at once.
  l.set_region_shares({{{"search", "chat-7b"}, 0.25}}, t0);
  CHECK(l.region_share("search", "chat-7b") == 0.25);
  CHECK(l.limit_info(req(1, 1, 1), t0).limit_tokens == 150);
  CHECK_FALSE(l.admit(req(2, 125, 125), t0));  // exactly the regional burst
  auto over = l.admit(req(3, 1, 0), t0);       // one past it
  REQUIRE(over);
  CHECK(over->code == errc::over_limit);
  CHECK(over->message.find("this region's share, 25%, of 600 across regions") != std::string::npos);
  // More than this region's burst but within the whole limit's: it waits (429), as the
  // share follows what is asked; past the whole burst it never fits (400).
  auto big = l.admit(req(4, 400, 400), t0);
  REQUIRE(big);
  CHECK(big->code == errc::over_limit);
  CHECK(big->retry_after_s >= 1);
  auto never = l.admit(req(5, 600, 401), t0);
  REQUIRE(never);
  CHECK(never->code == errc::invalid_request);
  // Asked: admitted and refused alike; the count restarts.
  asked = l.take_asked();
  CHECK(asked.at({"search", "chat-7b"}) == 250 + 1 + 800 + 1001);
  CHECK(l.take_asked().at({"search", "chat-7b"}) == 0);
  // The share whole again (no other region): the full limit's rate and burst; the bucket
  // keeps what it held (250) and fills at the full rate from there.
  l.set_region_shares({}, t0 + 120s);
  CHECK(l.limit_info(req(6, 1, 1), t0 + 120s).limit_tokens == 600);
  CHECK(l.admit(req(7, 500, 400), t0 + 120s));
  CHECK_FALSE(l.admit(req(8, 500, 400), t0 + 185s));  // 250 + 65 s x 10
}

TEST_CASE("team ledger: max_concurrency at and one past it; a freed slot is taken again; limits change live") {
  const actors::team_ledger::time_point t0{};
  actors::team_ledger l(tenants(0, 0, 2));
  auto a = req(1, 10, 10), b = req(2, 10, 10), c = req(3, 10, 10);
  CHECK_FALSE(l.admit(a, t0));
  CHECK_FALSE(l.admit(b, t0));
  auto third = l.admit(c, t0);
  REQUIRE(third);
  CHECK(third->code == errc::over_limit);
  CHECK(third->message.find("max_concurrency 2") != std::string::npos);
  l.release(ended(a, 10, 3), t0);
  CHECK_FALSE(l.admit(c, t0));
  // A new limit applies at once.
  l.set_tenancy(tenants(0, 0, 3), t0);
  CHECK_FALSE(l.admit(req(4, 10, 10), t0));
  CHECK(l.admit(req(5, 10, 10), t0));
  l.set_tenancy(tenants(60, 10, 0), t0);  // now a bucket of 10
  CHECK(l.admit(req(6, 10, 10), t0)->code == errc::invalid_request);
  CHECK_FALSE(l.admit(req(7, 5, 5), t0));
}

TEST_CASE("team ledger: a team's tier is clamped to the highest it may use") {
  actors::team_ledger l(tenants(0, 0, 0, engine::priority::standard));
  CHECK(l.clamp("search", engine::priority::interactive) == engine::priority::standard);
  CHECK(l.clamp("search", engine::priority::batch) == engine::priority::batch);
  CHECK(l.clamp("assistant", engine::priority::interactive) == engine::priority::interactive);
}

TEST_CASE("limits on a node: 429 with Retry-After, admitted after waiting it out; refunds follow the end") {
  auto cfg = test::sim_node_config(2);
  cfg.pools[0].text = {10, 10};  // every answer: 10 tokens, then eos
  test::node_fixture f(cfg, tenants(600, 400, 0));
  // prompt (~10 tokens) + 200: one fits, a second does not yet.
  auto first = f.submit(200);
  REQUIRE(f.vt.run_until([&] { return first.rec->terminal(); }, 10s));
  REQUIRE(first.rec->ends.size() == 1);
  const int prompt = first.rec->ends[0].prompt_tokens;
  CHECK(first.rec->ends[0].completion_tokens == 11);  // ten words and eos
  // Charged prompt + 200, refunded the 189 not used: the bucket holds 400 - prompt - 11 plus
  // what flowed back meanwhile (10 a second).
  REQUIRE(first.rec->rate_limits.size() == 1);
  CHECK(first.rec->rate_limits[0].limit_tokens == 600);
  CHECK(first.rec->rate_limits[0].remaining_tokens == 400 - prompt - 200);
  auto second = f.submit(390 - prompt);
  f.vt.run_for(10ms);
  REQUIRE(second.rec->errors.size() == 1);
  CHECK(second.rec->errors[0].code == errc::over_limit);
  const int wait = second.rec->errors[0].retry_after_s;
  CHECK(wait > 0);
  f.vt.run_for(std::chrono::seconds(wait));
  auto third = f.submit(390 - prompt);
  REQUIRE(f.vt.run_until([&] { return third.rec->terminal(); }, 10s));
  CHECK(third.rec->ends.size() == 1);
}

TEST_CASE("limits on a node: max_concurrency holds while requests run and frees as they end") {
  test::node_fixture f(test::sim_node_config(2), tenants(0, 0, 2));
  auto a = f.submit(300), b = f.submit(300, "another prompt");
  f.vt.run_for(50ms);
  auto c = f.submit(5, "third");
  f.vt.run_for(50ms);
  REQUIRE(c.rec->errors.size() == 1);
  CHECK(c.rec->errors[0].code == errc::over_limit);
  REQUIRE(f.vt.run_until([&] { return a.rec->terminal() && b.rec->terminal(); }, 30s));
  f.vt.run_for(10ms);
  auto d = f.submit(5, "fourth");
  REQUIRE(f.vt.run_until([&] { return d.rec->terminal(); }, 10s));
  CHECK(d.rec->ends.size() == 1);
  // A client that goes away frees its slot too.
  auto e = f.submit(3000, "long one"), g = f.submit(3000, "long two");
  f.vt.run_for(50ms);
  actors::stop_sink(e.sink);
  f.vt.run_for(50ms);
  auto h = f.submit(5, "after the disconnect");
  REQUIRE(f.vt.run_until([&] { return h.rec->terminal(); }, 10s));
  CHECK(h.rec->ends.size() == 1);
}
