// The autoscaler's warm pool and schedule on virtual time: a warm replica serves a scale-up
// at once (no cold start) and is replaced behind it; a scheduled entry has the replicas
// serving before the peak it names, and they go again after its hold.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "sim/fleet.hpp"
#include "sim/scenario.hpp"

using namespace kiln::sim;

namespace {

run_result run_text(const std::string& text) {
  auto parsed = parse_scenario(text, "scale.toml", ".");
  if (auto* e = std::get_if<std::string>(&parsed)) FAIL(*e);
  const scenario s = std::get<scenario>(parsed);
  auto r = run_once(s, s.runs().front());
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<run_result>(r);
}

int phase(const pool_sample& smp, const char* name) {
  auto it = smp.phases.find(name);
  return it == smp.phases.end() ? 0 : it->second;
}

const std::string kPool = R"(
[[arrivals.teams]]
name = "search"
[[teams]]
name = "search"
api_key = "k"
[[pools]]
model = "chat-7b"
version = "v1"
replicas = 1
capacity_tokens = 3000
queue_limit = 100000
[pools.cold_start]
node_start_s = 10
weight_copy_s = 10
load_s = 5
warmup_s = 5
)";

}  // namespace

TEST_CASE("sim autoscale: a warm replica serves the scale-up at once and another warms behind it") {
  const run_result res = run_text(R"(
[sim]
name = "warm"
duration_s = 300
report_interval_s = 5
[arrivals]
process = "step"
rate = 0.5
step_at_s = 100
step_factor = 8
prompt_tokens = 400
output_tokens = 100
)" + kPool + R"(
[pools.autoscale]
min_replicas = 1
max_replicas = 3
warm_replicas = 1
down_every_s = 600
interval_s = 5
)");
  double first_add = -1;
  for (const auto& d : res.rollouts)
    if (d.decision.starts_with("add") && first_add < 0) first_add = d.t;
  REQUIRE(first_add > 100);
  bool warm_before = false, warm_again = false;
  double second_serves = -1;
  for (const auto& smp : res.samples.front()) {
    if (smp.t < first_add) {
      CHECK(phase(smp, "serving") == 1);  // the warm one is not capacity before it is needed
      if (smp.t > 40 && phase(smp, "warm") == 1) warm_before = true;
    }
    if (smp.t >= first_add && second_serves < 0 && phase(smp, "serving") >= 2) second_serves = smp.t;
    if (smp.t > first_add + 40 && phase(smp, "warm") == 1) warm_again = true;
  }
  CHECK(warm_before);
  REQUIRE(second_serves > 0);
  // Served within a look and a heartbeat of the add, where a cold replica takes 30 s.
  CHECK(second_serves - first_add <= 10);
  CHECK(warm_again);
  // Every request ends once; none was lost in the promotion.
  for (const auto& q : res.requests) CHECK((q.outcome == "completed" || q.outcome == "over_limit"));
}

TEST_CASE("sim autoscale: a schedule has its replicas serving before the named time, and lets them go after the hold") {
  const run_result res = run_text(R"(
[sim]
name = "scheduled"
start_at = "2026-12-01T08:50:00Z"
duration_s = 1500
report_interval_s = 5
[arrivals]
process = "poisson"
rate = 0.5
prompt_tokens = 200
output_tokens = 50
)" + kPool + R"(
[pools.autoscale]
min_replicas = 1
max_replicas = 4
down_every_s = 60
interval_s = 5
[[pools.autoscale.schedule]]
cron = "0 9 * * *"
min_replicas = 3
lead_s = 300
hold_s = 600
)");
  // 09:00 is t = 600; the lead begins at t = 300, the hold ends at t = 1200.
  double first_add = -1, first_drain = -1;
  for (const auto& d : res.rollouts) {
    if (d.decision.starts_with("add") && first_add < 0) {
      first_add = d.t;
      CHECK(d.reason.find("below min_replicas 3") != std::string::npos);
    }
    if (d.decision.starts_with("drain") && first_drain < 0) first_drain = d.t;
  }
  CHECK(first_add >= 300);
  CHECK(first_add <= 310);
  CHECK(first_drain > 1200);
  double three_serve = -1;
  for (const auto& smp : res.samples.front()) {
    if (smp.t < 300) CHECK(phase(smp, "serving") == 1);
    if (three_serve < 0 && phase(smp, "serving") == 3) three_serve = smp.t;
    if (smp.t >= 600 && smp.t <= 1200) CHECK(phase(smp, "serving") == 3);
  }
  CHECK(three_serve > 300);
  CHECK(three_serve < 600);  // serving before the peak's time
}
