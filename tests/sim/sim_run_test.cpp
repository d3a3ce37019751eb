// Scenarios and whole simulator runs on kiln's actors: determinism, the routing policies,
// replica death, isolation, the reports and the command's errors.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sim/report.hpp"
#include "sim/scenario.hpp"
#include "sim/sim.hpp"

using namespace kiln::sim;
namespace fs = std::filesystem;

namespace {

const std::string kFleet = R"(
[[teams]]
name = "search"
api_key = "k-search"
max_priority = "interactive"
[[teams.limits]]
model = "chat-7b"
tokens_per_minute = 2000000

[[teams]]
name = "noisy"
api_key = "k-noisy"
[[teams.limits]]
model = "chat-7b"
tokens_per_minute = 6000

[[pools]]
model = "chat-7b"
version = "v1"
replicas = 4
)";

scenario parse(const std::string& text) {
  auto r = parse_scenario(text + kFleet, "test.toml", ".");
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<scenario>(r);
}

const std::string kChat = R"(
[sim]
name = "t"
duration_s = 40
report_interval_s = 5
[arrivals]
rate = 8
prompt_tokens = 400
output_tokens = 60
conversation_turns = 4
[[arrivals.teams]]
name = "search"
tier = "interactive"
)";

run_result run(const scenario& s, const run_plan& p) {
  auto r = run_once(s, p);
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<run_result>(r);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kiln_sim_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("scenario: runs, overrides and errors") {
  auto s = parse(R"(
[sim]
name = "ab"
traces = ["a.csv", "/abs/b.jsonl"]
policies = ["round_robin", "least_tokens"]
regions = ["east", "west"]
[[events]]
at_s = 5
count = 2
region = "west"
)");
  const auto runs = s.runs();
  REQUIRE(runs.size() == 4);
  CHECK(runs[0].label == "a-round_robin");
  CHECK(runs[0].arrivals.trace == "./a.csv");
  CHECK(runs[3].label == "b-least_tokens");
  CHECK(runs[3].arrivals.trace == "/abs/b.jsonl");
  CHECK(s.events.size() == 1);
  CHECK(s.fleet.pools.size() == 1);
  sim_overrides o;
  o.policy = "round_robin";
  o.trace = "c.jsonl";
  o.rate = 7;
  o.seed = 9;
  CHECK(apply_overrides(s, o).empty());
  REQUIRE(s.runs().size() == 1);
  CHECK(s.runs()[0].arrivals.trace == "c.jsonl");
  CHECK(s.runs()[0].arrivals.trace_rate == 7);
  CHECK(s.seed == 9);
  o.policy = "random";
  CHECK(!apply_overrides(s, o).empty());

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"[sim]\ndurtion_s = 3\n", "sim.durtion_s: unknown key"},
           {"[sim]\nduration_s = -1\n", "sim.duration_s must be a number"},
           {"[sim]\npolicies = [\"fastest\"]\n", "unknown policy"},
           {"[sim]\nregions = []\n", "at least one region"},
           {"[sim]\ncompare_without = \"ghost\"\n", "not in [[arrivals.teams]]"},
           {"[arrivals]\nprocess = \"burst\"\n", "arrivals.process must be"},
           {"[arrivals]\nprocess = \"trace\"\n", "arrivals.trace is required"},
           {"[[arrivals.teams]]\nname = \"a\"\ntier = \"gold\"\n", "tier must be"},
           {"[[events]]\naction = \"nuke\"\n", "events[0].action must be"},
           {"[[events]]\nregion = \"mars\"\n", "unknown region"},
           {"[[events]]\nmodel = \"gpt\"\n", "unknown model"},
           {"[sim\n", "test.toml:1"}}) {
    CAPTURE(text);
    auto r = parse_scenario(text + kFleet, "test.toml", ".");
    REQUIRE(std::holds_alternative<std::string>(r));
    CHECK(std::get<std::string>(r).find(want) != std::string::npos);
    CHECK(std::get<std::string>(r).rfind("test.toml", 0) == 0);
  }
  auto cpu = parse_scenario("[[teams]]\nname = \"t\"\napi_key = \"k\"\n[[pools]]\nmodel = \"m\"\nversion = \"v\"\nexecutor = \"cpu\"\nmodel_dir = \"/m\"\n", "c.toml", ".");
  REQUIRE(std::holds_alternative<std::string>(cpu));
  CHECK(std::get<std::string>(cpu).find("sim executor only") != std::string::npos);
  // The fleet is a kiln config, checked as one.
  auto bad = parse_scenario("[[pools]]\nmodel = \"m\"\nversion = \"v\"\nreplicas = 0\n", "f.toml", ".");
  REQUIRE(std::holds_alternative<std::string>(bad));
  CHECK(std::get<std::string>(bad).find("pools[0].replicas") != std::string::npos);
}

TEST_CASE("sim: every request ends once; the same seed gives byte-identical reports, another seed others") {
  const scenario s = parse(kChat);
  const auto plan = s.runs().at(0);
  const run_result a = run(s, plan), b = run(s, plan);
  REQUIRE(a.requests.size() > 200);
  for (const auto& q : a.requests) {
    CHECK(q.outcome == "completed");
    CHECK(q.output == q.asked_output);  // every token once, none lost
    CHECK(q.first_token >= q.arrival);
    CHECK(q.end >= q.first_token);
  }
  const auto da = temp_dir("det_a"), db = temp_dir("det_b"), dc = temp_dir("det_c");
  REQUIRE(write_run(a, s, da.string()).empty());
  REQUIRE(write_run(b, s, db.string()).empty());
  REQUIRE(write_summary({summarize(a, s)}, s, da.string(), "").empty());
  REQUIRE(write_summary({summarize(b, s)}, s, db.string(), "").empty());
  std::size_t files = 0;
  for (const auto& f : fs::recursive_directory_iterator(da)) {
    if (!f.is_regular_file()) continue;
    ++files;
    CAPTURE(f.path());
    CHECK(slurp(f.path()) == slurp(db / fs::relative(f.path(), da)));
  }
  CHECK(files >= 9);  // pool CSV, teams.csv, six charts, summary.md
  scenario other = s;
  other.seed = 2;
  const run_result c = run(other, other.runs().at(0));
  REQUIRE(write_run(c, other, dc.string()).empty());
  CHECK(slurp(dc / "t" / "pool_local_chat-7b_v1.csv") != slurp(da / "t" / "pool_local_chat-7b_v1.csv"));
  const std::string svg = slurp(da / "t" / "ttft_p95.svg");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find("<polyline") != std::string::npos);
  const std::string csv = slurp(da / "t" / "pool_local_chat-7b_v1.csv");
  CHECK(csv.rfind("time_s,replicas_serving,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') >= 9);  // a header and a row per 5 s
}

TEST_CASE("sim: prefix affinity finds more of the oracle's hits than round robin, on the same arrivals") {
  scenario s = parse(kChat);
  s.policies = {"round_robin", "prefix_affinity_bounded", "least_tokens"};
  const auto runs = s.runs();
  REQUIRE(runs.size() == 3);
  const run_summary rr = summarize(run(s, runs[0]), s), pa = summarize(run(s, runs[1]), s),
                    lt = summarize(run(s, runs[2]), s);
  CHECK(rr.oracle_hit_rate == doctest::Approx(pa.oracle_hit_rate).epsilon(0.02));
  CHECK(pa.oracle_hit_rate > 0.3);
  CHECK(pa.hit_rate > rr.hit_rate + 0.1);
  CHECK(pa.hit_rate > lt.hit_rate);
  CHECK(pa.hit_rate <= pa.oracle_hit_rate + 1e-9);
  CHECK(rr.policy == "round_robin");
  CHECK(rr.completed == rr.requests);
}

TEST_CASE("sim: replicas killed mid-run: retried before the first token, one error after it, none lost") {
  scenario s = parse(kChat + R"(
[[events]]
at_s = 20
action = "kill"
count = 2
)");
  const run_result r = run(s, s.runs().at(0));
  CHECK(r.event_log.size() == 2);
  std::size_t completed = 0, mid = 0;
  for (const auto& q : r.requests) {
    CHECK(!q.outcome.empty());  // every request ended
    if (q.outcome == "completed") {
      ++completed;
      CHECK(q.output == q.asked_output);
    } else {
      CHECK(q.outcome == "replica_lost");
      CHECK(q.mid_stream);
      ++mid;
    }
  }
  CHECK(mid > 0);
  CHECK(completed + mid == r.requests.size());
  // The pool restarted them: four serving at the end.
  CHECK(r.samples[0].back().phases.at("serving") == 4);
}

TEST_CASE("sim: a team at ten times its limit gets 429s; the other team none, and its TTFT holds against the run without") {
  scenario s = parse(kChat + R"(
[[arrivals.teams]]
name = "noisy"
)");
  s.compare_without = "noisy";
  const auto runs = s.runs();
  REQUIRE(runs.size() == 2);
  CHECK(runs[1].label == "t-without-noisy");
  const run_summary m = summarize(run(s, runs[0]), s), quiet = summarize(run(s, runs[1]), s);
  REQUIRE(m.teams.size() == 2);
  const auto& noisy = m.teams[0].team == "noisy" ? m.teams[0] : m.teams[1];
  const auto& search = m.teams[0].team == "noisy" ? m.teams[1] : m.teams[0];
  CHECK(noisy.rejected_429 > noisy.requests / 2);
  CHECK(search.rejected_429 == 0);
  CHECK(search.completed == search.requests);
  REQUIRE(quiet.teams.size() == 1);
  CHECK(quiet.teams[0].requests == search.requests);  // the same arrivals for the others
  CHECK(search.ttft_p95_ms <= quiet.teams[0].ttft_p95_ms * 1.10);
  auto bad = parse_scenario(kChat + kFleet + "[sim.x]\n", "t.toml", ".");
  CHECK(std::holds_alternative<std::string>(bad));
}

TEST_CASE("kiln sim: the command writes the reports; bad arguments and files are clear errors") {
  const auto dir = temp_dir("cli");
  fs::create_directories(dir);
  const auto file = dir / "s.toml";
  std::ofstream(file) << kChat << kFleet;
  std::ostringstream out, err;
  REQUIRE(run_sim({file.string(), "--out", (dir / "out").string(), "--rate", "4", "--policy", "least_tokens"}, out, err) == 0);
  CHECK(fs::exists(dir / "out" / "summary.md"));
  CHECK(slurp(dir / "out" / "summary.md").find("| t-least_tokens | least_tokens |") != std::string::npos);
  CHECK(fs::exists(dir / "out" / "t-least_tokens" / "load.svg"));
  CHECK(out.str().find("speed-up") != std::string::npos);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {}, {file.string(), "--rate"}, {file.string(), "--rate", "-1"}, {file.string(), "--seed", "x"},
           {file.string(), "--bogus", "1"}, {file.string(), "--policy", "fastest"}, {file.string(), "--out", ""},
           {file.string(), "--trace", ""}}) {
    std::ostringstream o, e;
    CHECK(run_sim(args, o, e) == 2);
    CHECK(!e.str().empty());
  }
  for (const char* seed : {"0", "9000000000000001", "1.5"}) {  // from 1 to 9e15, whole
    std::ostringstream o, e;
    CHECK(run_sim({file.string(), "--seed", seed}, o, e) == 2);
    CHECK(e.str() == std::string("kiln: --seed must be a whole number from 1 to 9000000000000000, got '") + seed + "'\n");
  }
  std::ostringstream o, e;
  CHECK(run_sim({(dir / "none.toml").string()}, o, e) == 1);
  CHECK(run_sim({file.string(), "--out", (dir / "o2").string(), "--trace", (dir / "none.csv").string()}, o, e) == 1);
  CHECK(e.str().find("none.csv") != std::string::npos);
}

TEST_CASE("sim: coasting engines give exactly what step-by-step engines give, through kills, failures and refusals") {
  scenario s = parse(kChat + R"(
[[arrivals.teams]]
name = "noisy"
weight = 0.3
[[events]]
at_s = 15
action = "kill"
count = 1
[[events]]
at_s = 18.5
action = "kill"
target = "engine"
count = 2
[[events]]
at_s = 25
action = "slow"
target = "engine"
seconds = 3
factor = 4
[[events]]
at_s = 27.3
action = "fail"
target = "engine"
count = 2
)");
  std::size_t mid = 0, refused = 0;
  for (std::uint64_t seed : {1, 2, 3, 4}) {
  CAPTURE(seed);
  s.seed = seed;
  s.coast = false;
  const run_result stepwise = run(s, s.runs().at(0));
  s.coast = true;
  const run_result coasting = run(s, s.runs().at(0));
  REQUIRE(stepwise.requests.size() == coasting.requests.size());
  for (std::size_t i = 0; i < stepwise.requests.size(); ++i) {
    const auto &a = stepwise.requests[i], &b = coasting.requests[i];
    CAPTURE(i);
    CHECK(a.first_token == b.first_token);
    CHECK(a.end == b.end);
    CHECK(a.output == b.output);
    CHECK(a.outcome == b.outcome);
    CHECK(a.prompt == b.prompt);
    CHECK(a.cached == b.cached);
    CHECK(a.attempts == b.attempts);
    mid += a.mid_stream;
    refused += a.outcome == "over_limit";
  }
  CHECK(coasting.engine_steps == stepwise.engine_steps);
  CHECK(coasting.retried == stepwise.retried);
  }
  CHECK(mid > 0);      // the kills hit running streams
  CHECK(refused > 0);  // and the noisy team was refused
}

TEST_CASE("sim: a canary that errs is rolled back by its guards; an identical one is not; requests count where they ran") {
  auto make = [](const std::string& fault, const std::string& stage = "canary") {
    const std::string text = R"(
[sim]
name = "canary"
duration_s = 200
report_interval_s = 10
natural_lengths = true
[arrivals]
rate = 20
prompt_tokens = 300
output_tokens = 400
conversation_turns = 3
[[arrivals.teams]]
name = "search"
[rollout]
guard_window_s = 120
guard_min_requests = 50
check_interval_s = 5
[[events]]
at_s = 20
action = ")" + stage + R"("
version = "v2"
percent = 50
[[teams]]
name = "search"
api_key = "k"
[[models]]
name = "chat-7b"
live_version = "v1"
[[pools]]
model = "chat-7b"
version = "v1"
replicas = 2
[pools.sim_text]
min_output_tokens = 40
max_output_tokens = 80
[[pools]]
model = "chat-7b"
version = "v2"
replicas = 2
)" + fault + R"(
[pools.sim_text]
min_output_tokens = 40
max_output_tokens = 80
)";
    auto r = parse_scenario(text, "canary.toml", ".");
    if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
    return std::get<scenario>(r);
  };
  {
    const scenario s = make("fault_fraction = 0.1");
    auto r = run_once(s, s.runs().front());
    REQUIRE(std::holds_alternative<run_result>(r));
    const auto& res = std::get<run_result>(r);
    REQUIRE(res.rollouts.size() == 2);
    CHECK(res.rollouts[0].decision == "start");
    CHECK(res.rollouts[0].t == doctest::Approx(20));
    CHECK(res.rollouts[1].decision == "rollback");
    CHECK(res.rollouts[1].version == "v2");
    CHECK(res.rollouts[1].reason.find("error rate") == 0);
    CHECK(res.rollouts[1].t > 20);
    CHECK(res.rollouts[1].t < 200);
    // After the rollback every request goes to v1.
    std::size_t after = 0, after_on_v1 = 0;
    for (const auto& q : res.requests)
      if (q.arrival > res.rollouts[1].t + 1 && q.outcome == "completed") {
        ++after;
        after_on_v1 += q.version == "v1";
      }
    CHECK(after > 100);
    CHECK(after_on_v1 == after);
  }
  {
    const scenario s = make("");
    auto r = run_once(s, s.runs().front());
    REQUIRE(std::holds_alternative<run_result>(r));
    const auto& res = std::get<run_result>(r);
    REQUIRE(res.rollouts.size() == 1);
    CHECK(res.rollouts[0].decision == "start");
    // Half the requests on each version; the pool series count them where they ran.
    std::size_t on_v2 = 0, routed = 0;
    for (const auto& q : res.requests) {
      if (q.arrival < 21 || q.outcome != "completed") continue;
      ++routed;
      on_v2 += q.version == "v2";
      CHECK(res.pools[q.pool] == "local/chat-7b@" + q.version);
    }
    CHECK(on_v2 > routed * 4 / 10);
    CHECK(on_v2 < routed * 6 / 10);
  }
  {
    // A shadow that errs is rolled back too, and no client saw its errors: every answer came
    // from v1, while v2 carried the copies.
    const scenario s = make("fault_fraction = 0.1", "shadow");
    auto r = run_once(s, s.runs().front());
    REQUIRE(std::holds_alternative<run_result>(r));
    const auto& res = std::get<run_result>(r);
    REQUIRE(res.rollouts.size() == 2);
    CHECK(res.rollouts[1].decision == "rollback");
    CHECK(res.rollouts[1].stage == "shadow");
    CHECK(res.rollouts[1].reason.find("error rate") == 0);
    std::size_t completed = 0;
    for (const auto& q : res.requests) {
      CHECK(q.outcome == "completed");
      completed += q.version == "v1";
    }
    CHECK(completed == res.requests.size());
    std::int64_t shadow_load = 0;
    for (const auto& smp : res.samples[1]) shadow_load += smp.tokens_in_flight;  // local/chat-7b@v2
    CHECK(res.pools[1] == "local/chat-7b@v2");
    CHECK(shadow_load > 0);
  }
}

#include "sim/gate.hpp"

TEST_CASE("gate: one replica's capacity from the capacity scenario; a slower GPU carries less; only sim pools") {
  auto parsed = kiln::config::parse_config(R"(
[[teams]]
name = "t"
api_key = "k"
[[pools]]
model = "chat-7b"
version = "v2"
replicas = 6
[pools.gpu]
hbm_bytes_per_s = 3.35e12
flops_per_s = 989e12
hbm_capacity_bytes = 80e9
)", "gate.toml");
  REQUIRE(std::holds_alternative<kiln::config::kiln_config>(parsed));
  kiln::config::pool_config pool = std::get<kiln::config::kiln_config>(parsed).pools.front();
  auto r = gate_capacity(pool);
  REQUIRE(std::holds_alternative<gate_result>(r));
  const gate_result g = std::get<gate_result>(r);
  CHECK(g.rate >= 2);
  CHECK(g.steps == static_cast<int>(g.rate) + 1);  // every step up to the first that fails
  CHECK(g.tokens_per_s == doctest::Approx(g.rate * 300).epsilon(0.05));  // 300-token answers
  CHECK(g.tokens_in_flight > 0);
  CHECK(g.ttft_p95_ms <= 1000);
  pool.gpu.hbm_bytes_per_s /= 2;
  pool.gpu.flops_per_s /= 2;
  const gate_result slow = std::get<gate_result>(gate_capacity(pool));
  CHECK(slow.rate < g.rate);
  pool.executor = kiln::config::executor_kind::cpu;
  auto refused = gate_capacity(pool);
  REQUIRE(std::holds_alternative<std::string>(refused));
  CHECK(std::get<std::string>(refused).find("sim executor") != std::string::npos);
}

TEST_CASE("sim: the autoscaler adds replicas that serve after their cold start, then drains and removes one") {
  const std::string text = R"(
[sim]
name = "scale"
duration_s = 400
report_interval_s = 5
[arrivals]
process = "step"
rate = 8
step_at_s = 150
step_factor = 0.1
prompt_tokens = 400
output_tokens = 100
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
[pools.autoscale]
min_replicas = 1
max_replicas = 3
down_every_s = 60
interval_s = 5
[pools.cold_start]
node_start_s = 10
weight_copy_s = 10
load_s = 5
warmup_s = 5
)";
  auto parsed = parse_scenario(text, "scale.toml", ".");
  if (auto* e = std::get_if<std::string>(&parsed)) FAIL(*e);
  const scenario s = std::get<scenario>(parsed);
  auto r = run_once(s, s.runs().front());
  REQUIRE(std::holds_alternative<run_result>(r));
  const auto& res = std::get<run_result>(r);
  double first_add = -1, last_add = -1, drain = -1, removed = -1;
  for (const auto& d : res.rollouts) {
    CHECK(d.stage == "autoscale");
    if (d.decision.starts_with("add") && first_add < 0) first_add = d.t;
    if (d.decision.starts_with("add") && d.t < 150) last_add = d.t;
    if (d.decision.starts_with("drain") && drain < 0) drain = d.t;
    if (d.decision.starts_with("remove") && removed < 0) removed = d.t;
  }
  REQUIRE(first_add > 0);
  CHECK(first_add < 150);
  // Capacity counts once it serves: no second replica serves before its 30 s cold start.
  int most = 0;
  for (const auto& smp : res.samples.front()) {
    const int serving = smp.phases.count("serving") ? smp.phases.at("serving") : 0;
    if (smp.t < first_add + 30) CHECK(serving <= 1);
    most = std::max(most, serving);
  }
  CHECK(most >= 2);
  CHECK(most <= 3);
  // After the load falls: one drain, a period after the last add, then its removal once drained.
  REQUIRE(drain > 150);
  for (const auto& d : res.rollouts)
    if (d.decision.starts_with("add")) CHECK(drain - d.t >= 60);
  CHECK(removed >= drain);
  CHECK(res.requests.size() > 500);
  // The full pool refuses (429, over its share) while the new replicas start; once they serve,
  // admission sizes the pool by them and refusals all but stop.
  int early = 0, late = 0;
  for (const auto& q : res.requests) {
    CHECK((q.outcome == "completed" || q.outcome == "over_limit"));
    if (q.outcome == "over_limit") ++(q.arrival < last_add + 40 ? early : late);
  }
  CHECK(early > 0);
  CHECK(late * 5 < early);
}
