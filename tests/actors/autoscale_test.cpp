// The autoscaler's decisions as a table: scale-up at 70% of serving capacity and on the queue
// trigger, each exactly at and one past its edge; replicas starting count against what is
// added; the maximum; one removal per period, only when nothing starts, drains or waits.
#include <doctest/doctest.h>

#include "actors/autoscale.hpp"

using namespace kiln::actors;

TEST_CASE("autoscale decisions at and past each edge") {
  kiln::config::autoscale_config c;
  c.enabled = true;
  c.min_replicas = 2;
  c.max_replicas = 10;
  c.scale_up_at = 0.70;
  c.queue_trigger = 16;
  c.scale_down_at = 0.40;
  c.down_every_s = 600;
  const double cap = 1000;  // tokens in flight per replica
  struct row {
    const char* what;
    scale_inputs in;
    int add;
    bool remove;
  };
  const row rows[] = {
      {"at 70%: nothing", {4, 0, 0, 2800, 0, cap, 0}, 0, false},
      {"one token past 70%: one more", {4, 0, 0, 2801, 0, cap, 0}, 1, false},
      {"far past: enough to come back to 70%", {4, 0, 0, 5600, 0, cap, 0}, 4, false},
      {"the ones starting count", {4, 2, 0, 4000, 0, cap, 0}, 0, false},
      {"starting, still short", {4, 1, 0, 4900, 0, cap, 0}, 2, false},
      {"no more than the maximum", {8, 1, 0, 9000, 0, cap, 0}, 1, false},
      {"at the maximum", {10, 0, 0, 9000, 0, cap, 0}, 0, false},
      {"queue at the trigger: nothing", {4, 0, 0, 1000, 16, cap, 0}, 0, false},
      {"queue one past: one more", {4, 0, 0, 1000, 17, cap, 0}, 1, false},
      {"queue past, one already starting", {4, 1, 0, 1000, 17, cap, 0}, 0, false},
      {"none serving yet, load: enough for it", {0, 0, 0, 1400, 0, cap, 1e9}, 2, false},
      {"below min", {1, 0, 0, 0, 0, cap, 1e9}, 1, false},
      {"idle, period passed: one fewer", {4, 0, 0, 1199, 0, cap, 600}, 0, true},
      {"idle now, but busy a moment ago", {4, 0, 0, 100, 0, cap, 600, 0, 1200}, 0, false},
      {"idle now and over the last minute", {4, 0, 0, 100, 0, cap, 600, 0, 1199}, 0, true},
      {"idle at the edge: the rest would be at 40%", {4, 0, 0, 1200, 0, cap, 600}, 0, false},
      {"idle, a second before the period", {4, 0, 0, 0, 0, cap, 599}, 0, false},
      {"idle but one is starting", {4, 1, 0, 0, 0, cap, 1e9}, 0, false},
      {"idle but one is draining", {4, 0, 1, 0, 0, cap, 1e9}, 0, false},
      {"idle but something waits", {4, 0, 0, 0, 1, cap, 1e9}, 0, false},
      {"idle at min", {2, 0, 0, 0, 0, cap, 1e9}, 0, false},
      {"no capacity figure: no decision", {4, 0, 0, 100000, 100, 0, 1e9}, 0, false},
      // What waits counts: 10 queued of 100 tokens each beside 1,800 running is 2,800 = 70%.
      {"running and waiting at 70%", {4, 0, 0, 1800, 10, cap, 0, 100}, 0, false},
      {"running and waiting past 70%", {4, 0, 0, 1801, 10, cap, 0, 100}, 1, false},
      {"a deep queue: all of it, to the maximum", {4, 0, 0, 2800, 100, cap, 0, 100}, 6, false},
      {"a deep queue, most of it starting", {4, 4, 0, 2800, 100, cap, 0, 100}, 2, false},
  };
  for (const auto& r : rows) {
    CAPTURE(r.what);
    const scale_decision d = decide_scale(r.in, c);
    CHECK(d.add == r.add);
    CHECK(d.remove_one == r.remove);
    CHECK(d.why.empty() == (d.add == 0 && !d.remove_one));
  }
}

TEST_CASE("autoscale schedule: the minimum rises from the lead before a named time until the hold after") {
  kiln::config::autoscale_config c;
  auto entry = [](const char* cron, int n, double lead, double hold) {
    kiln::config::scale_schedule e;
    e.when = std::get<kiln::config::cron_spec>(kiln::config::parse_cron(cron));
    e.min_replicas = n;
    e.lead_s = lead;
    e.hold_s = hold;
    return e;
  };
  c.schedule = {entry("0 9 * * 1-5", 6, 600, 3600), entry("0 12 * * *", 4, 300, 1800)};
  constexpr std::int64_t tue = 1796083200;  // 2026-12-01 00:00 UTC, a Tuesday
  const std::int64_t nine = tue + 9 * 3600;
  CHECK(scheduled_minimum(c, nine - 601) == 0);  // one second before the lead
  CHECK(scheduled_minimum(c, nine - 600) == 6);  // the lead exactly
  CHECK(scheduled_minimum(c, nine) == 6);
  CHECK(scheduled_minimum(c, nine + 3600) == 6);  // the hold exactly
  CHECK(scheduled_minimum(c, nine + 3660) == 0);  // a minute past the hold
  // The two entries overlap at 11:55: the larger minimum wins.
  CHECK(scheduled_minimum(c, tue + 11 * 3600 + 55 * 60) == 4);  // 9:00's hold is over
  c.schedule[0].hold_s = 4 * 3600;
  CHECK(scheduled_minimum(c, tue + 11 * 3600 + 55 * 60) == 6);
  // Saturday: only the noon entry.
  const std::int64_t sat_nine = tue + 4 * 86400 + 9 * 3600;
  CHECK(scheduled_minimum(c, sat_nine) == 0);
  CHECK(scheduled_minimum(c, sat_nine + 3 * 3600) == 4);
}

TEST_CASE("calendar anchor: the actor clock on the calendar") {
  calendar_anchor a;
  a.at = caf::actor_clock::time_point{} + std::chrono::seconds(100);
  a.unix_s = 1796083200;
  CHECK(a.unix_at(a.at) == 1796083200);
  CHECK(a.unix_at(a.at + std::chrono::minutes(90)) == 1796083200 + 5400);
}

TEST_CASE("autoscale capacity: the configured figure, else the version's gate, else the pool's KV") {
  kiln::config::pool_config p;
  p.replicas = 2;
  p.capacity_tokens = 8000;  // one replica's tokens in flight at full load
  CHECK(per_replica_capacity(p, 0) == 8000);
  CHECK(per_replica_capacity(p, 1270) == 1270);  // gated
  p.autoscale.capacity_tokens = 3000;
  CHECK(per_replica_capacity(p, 1270) == 3000);  // configured wins
  CHECK(per_replica_capacity(p, 0) == 3000);
}
