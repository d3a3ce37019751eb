// A region killed mid-run on virtual time: the balancer's moves (open without a token: to the
// survivor whole; open with tokens: one error event; arrivals from then on: the survivor),
// nothing lost, the survivor's autoscaler adding replicas, and the report's figures.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/report.hpp"
#include "sim/scenario.hpp"
#include "sim/sim.hpp"

using namespace kiln::sim;

namespace {

// Two regions of 3 replicas each; an interactive team with a guaranteed share and a batch
// team; the survivor's pool may grow to 5 after a 30 s cold start.
const std::string kFailover = R"(
[sim]
name = "failover"
duration_s = 90
report_interval_s = 5
regions = ["a", "b"]
[arrivals]
rate = 20
prompt_tokens = 600
output_tokens = 120
conversation_turns = 3
[[arrivals.teams]]
name = "search"
tier = "interactive"
weight = 0.4
[[arrivals.teams]]
name = "batch-jobs"
tier = "batch"
weight = 0.6
[[events]]
at_s = 30
action = "kill"
target = "region"
region = "a"
[[teams]]
name = "search"
api_key = "k-search"
max_priority = "interactive"
[[teams.limits]]
model = "chat-7b"
guaranteed_share = 0.6
[[teams]]
name = "batch-jobs"
api_key = "k-batch"
max_priority = "batch"
[[pools]]
model = "chat-7b"
version = "v1"
replicas = 3
max_running = 4
queue_limit = 40
capacity_tokens = 12000
[pools.autoscale]
min_replicas = 3
max_replicas = 5
scale_up_at = 0.7
queue_trigger = 8
interval_s = 5
[pools.cold_start]
node_start_s = 10
weight_copy_s = 10
load_s = 5
warmup_s = 5
)";

scenario parse(const std::string& text) {
  auto r = parse_scenario(text, "failover.toml", ".");
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<scenario>(r);
}

std::string parse_error(const std::string& text) {
  auto r = parse_scenario(text, "failover.toml", ".");
  auto* e = std::get_if<std::string>(&r);
  return e ? *e : "";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("sim failover: a killed region's open streams move or end once, its traffic goes to the survivor, none lost") {
  const scenario s = parse(kFailover);
  auto ran = run_once(s, s.runs().front());
  if (auto* e = std::get_if<std::string>(&ran)) FAIL(*e);
  const run_result& r = std::get<run_result>(ran);
  const region_kill_record& k = r.region_kill;
  CHECK(k.region == "a");
  CHECK(k.survivor == "b");
  REQUIRE(r.pools.size() == 2);
  const std::uint32_t in_a = r.pools[0] == "a/chat-7b@v1" ? 0 : 1, in_b = 1 - in_a;

  std::size_t moved = 0, lost_mid = 0, after_kill = 0, errors_after = 0;
  for (const auto& q : r.requests) {
    REQUIRE_FALSE(q.outcome.empty());  // every request ended
    if (q.moved_region) {
      ++moved;
      // Moved whole: it completes in b with every token it asked for, its first token after the kill.
      CHECK(q.arrival < k.at_s);
      CHECK(q.outcome == "completed");
      CHECK(q.pool == in_b);
      CHECK(q.output == q.asked_output);
      CHECK(q.first_token >= k.at_s);
    } else if (q.outcome == "replica_lost") {
      ++lost_mid;
      CHECK(q.mid_stream);
      CHECK(q.output > 0);
      CHECK(q.output < q.asked_output);
      CHECK(q.end == doctest::Approx(k.at_s));
    }
    if (q.arrival >= k.at_s) {
      ++after_kill;
      if (q.outcome == "completed") CHECK(q.pool == in_b);  // nothing reaches a after its kill
    }
    if (q.outcome == "completed" && q.pool == in_a) CHECK(q.end <= k.at_s);
    if (q.end >= k.at_s && q.outcome != "completed" && q.outcome != "shed" && q.outcome != "over_limit" &&
        q.outcome != "timed_out")
      ++errors_after;
  }
  MESSAGE("moved " << moved << ", errored mid-stream " << lost_mid << ", arrivals after the kill " << after_kill);
  CHECK(moved == k.moved);
  CHECK(moved > 0);
  CHECK(lost_mid == k.lost_mid_stream);
  CHECK(lost_mid > 0);
  CHECK(after_kill > 0);
  // Redirected: a's own arrivals from the kill on (about half of those after it).
  std::size_t redirected = 0;
  for (const auto& q : r.requests) {
    redirected += q.redirected;
    if (q.redirected) CHECK(q.arrival >= k.at_s);
  }
  CHECK(redirected == k.redirected);
  CHECK(k.redirected > 0);
  CHECK(k.redirected < after_kill);
  // The only errors after the kill are the mid-stream ones at the kill itself.
  CHECK(errors_after == lost_mid);

  const failover_summary f = summarize_failover(r);
  CHECK(f.lost == 0);
  CHECK(f.moved_completed == moved);
  CHECK(f.errors_after == lost_mid);
  CHECK(f.errors_stop_s == doctest::Approx(0));
  // The survivor at double load: its autoscaler adds replicas, which serve after their cold start.
  REQUIRE(f.first_scale_up_s >= 0);
  CHECK(f.new_replicas_serve_s >= f.first_scale_up_s + 30);
  // Batch pays for the shift, not interactive: batch is refused after the kill, interactive never.
  CHECK(f.refused_interactive == 0);
  CHECK(f.refused_batch > 0);
  CHECK(f.refused_batch <= f.batch_after);
  MESSAGE("refused after the kill: interactive " << f.refused_interactive << ", standard " << f.refused_standard
                               << ", batch " << f.refused_batch << " of " << f.batch_after << "; interactive TTFT p95 " << f.interactive_ttft_p95_before_ms
                               << " ms before, " << f.interactive_ttft_p95_shift_ms << " ms during; scale-up at +"
                               << f.first_scale_up_s << " s, serving at +" << f.new_replicas_serve_s << " s");
  // Region a reports nothing after its kill.
  for (const auto& smp : r.samples[in_a])
    if (smp.t >= k.at_s) CHECK(smp.phases.empty());
}

TEST_CASE("sim failover: the balancer notices late: what a sent before then moves at that moment") {
  const scenario s = parse(replaced(kFailover, "region = \"a\"\n", "region = \"a\"\ndetect_s = 2\n"));
  auto ran = run_once(s, s.runs().front());
  if (auto* e = std::get_if<std::string>(&ran)) FAIL(*e);
  const run_result& r = std::get<run_result>(ran);
  const double seen = r.region_kill.at_s + 2;
  std::size_t late = 0;
  for (const auto& q : r.requests) {
    REQUIRE_FALSE(q.outcome.empty());
    if (q.outcome == "replica_lost") CHECK(q.end == doctest::Approx(seen));
    if (q.moved_region) CHECK(q.first_token >= seen);
    // a's arrivals in the two seconds before the balancer knew: sent to b at that moment.
    if (q.redirected && q.arrival < seen && q.first_token >= 0) {
      CHECK(q.first_token >= seen);
      ++late;
    }
  }
  CHECK(late > 0);
}

TEST_CASE("sim failover: the report has the region failover table; the same seed gives the same figures") {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_failover_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto file = dir / "failover.toml";
  std::ofstream(file) << kFailover;
  std::ostringstream out1, err1;
  REQUIRE(run_sim({file.string(), "--out", (dir / "one").string()}, out1, err1) == 0);
  std::ostringstream out2, err2;
  REQUIRE(run_sim({file.string(), "--out", (dir / "two").string()}, out2, err2) == 0);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string one = slurp(dir / "one" / "summary.md");
  CHECK(one.find("## Region failover") != std::string::npos);
  CHECK(one.find("| a | 30.0 | b |") != std::string::npos);
  CHECK(one == slurp(dir / "two" / "summary.md"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("sim failover: a region kill's mistakes are clear errors") {
  CHECK(parse_error(replaced(kFailover, "action = \"kill\"\ntarget = \"region\"", "action = \"freeze\"\ntarget = \"region\""))
            .find("must be kill for a region") != std::string::npos);
  CHECK(parse_error(replaced(kFailover, "regions = [\"a\", \"b\"]", "regions = [\"a\"]")).find("needs a second region") !=
        std::string::npos);
  CHECK(parse_error(replaced(kFailover, "region = \"a\"\n", "")).find("names its region") != std::string::npos);
  CHECK(parse_error(kFailover + "[[events]]\nat_s = 40\naction = \"kill\"\ntarget = \"region\"\nregion = \"b\"\n")
            .find("one region kill per run") != std::string::npos);
  CHECK(parse_error(kFailover + "[[events]]\nat_s = 50\naction = \"kill\"\nregion = \"a\"\n").find("no later event") !=
        std::string::npos);
  // The first region is the one an event without a region hits.
  CHECK(parse_error(kFailover + "[[events]]\nat_s = 30\naction = \"kill\"\n").find("no later event") != std::string::npos);
  // Before the kill, the region may have its own events.
  CHECK(parse_error(kFailover + "[[events]]\nat_s = 10\naction = \"kill\"\nregion = \"a\"\n").empty());
  CHECK(parse_error(replaced(kFailover, "at_s = 30\n", "at_s = 30\ndetect_s = -1\n")).find("detect_s") != std::string::npos);
}

TEST_CASE("sim scenarios: every shipped scenario reads; region_failover kills one of two regions of seed 000's fleet") {
  std::size_t read = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + "/sim/scenarios")) {
    if (e.path().extension() != ".toml") continue;
    auto r = load_scenario(e.path().string());
    if (auto* err = std::get_if<std::string>(&r)) FAIL(e.path().filename().string() << ": " << *err);
    ++read;
  }
  CHECK(read >= 11);
  auto r = load_scenario(std::string(KILN_SOURCE_DIR) + "/sim/scenarios/region_failover.toml");
  REQUIRE(std::holds_alternative<scenario>(r));
  const scenario& s = std::get<scenario>(r);
  CHECK(s.regions.size() == 2);
  REQUIRE(s.events.size() == 1);
  CHECK(s.events[0].region_kill());
  CHECK(s.events[0].region == "east");
  const auto* chat = s.fleet.pool_for("chat-7b", "v1");
  REQUIRE(chat);
  CHECK(chat->replicas == 12);  // each region sized for the whole peak
}
