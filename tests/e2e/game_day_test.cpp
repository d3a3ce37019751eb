// The region failover game day with real processes on 127.0.0.1: two regions, each a
// front+router node and a worker node that hosts its replicas, and a control node (at region
// b's site) that holds the store. Clients stream through region b's front, whose preference
// puts region a first (the clients are nearer to a); then every process of region a is killed
// under load. Streams that had shown a token end with one error event; the others complete in
// region b; region b keeps interactive whole and pays with batch (it waits; past its wait it
// would be refused); its autoscaler adds replicas on its worker; every token the clients
// received is metered once in the control node's store (what a had sent before it died, by
// b's front). A second run stops the control node for the whole load instead: both regions
// serve every request of the known teams from their last-known-good configuration, and what
// they metered reaches the store when the control node returns.
#include <doctest/doctest.h>

#include <unistd.h>

#include <csignal>
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

// What every node of a region runs: 2 chat-7b replicas of 4 running sequences and 3,000 tokens
// in flight each, autoscaled to 4 with a one-second cold start; search is interactive with
// 90% of the pool guaranteed, batch-jobs is batch.
std::string region_config(const std::string& region) {
  std::string c = test_config(2, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"" + region + "\"");
  c.replace(c.find("max_running = 128"), 17, "max_running = 4\ncapacity_tokens = 3000");
  c.replace(c.find("min_output_tokens = 200"), 23, "min_output_tokens = 9000");
  c.replace(c.find("max_output_tokens = 400"), 23, "max_output_tokens = 9000");
  c.replace(c.find("api_key = \"key-search\"\n"), 23,
            "api_key = \"key-search\"\nmax_priority = \"interactive\"\n[[teams.limits]]\nmodel = \"chat-7b\"\nguaranteed_share = 0.9\n");
  c.replace(c.find("[[pools]]"), 9,
            "[[teams]]\nname = \"batch-jobs\"\napi_key = \"key-batch\"\nmax_priority = \"batch\"\n[[pools]]");
  return c +
         "[pools.autoscale]\nmin_replicas = 2\nmax_replicas = 4\nscale_up_at = 0.7\nqueue_trigger = 4\ninterval_s = 0.5\n"
         "down_every_s = 3600\n[pools.cold_start]\nnode_start_s = 1\n";
}

std::string cluster_table(const std::string& node, const std::string& roles, int port, const std::vector<int>& seeds) {
  std::string t = "[cluster]\nnode = \"" + node + "\"\nroles = " + roles + "\nlisten = \"127.0.0.1:" + std::to_string(port) +
                  "\"\nregions = [\"a\", \"b\"]\nheartbeat_ms = 300\nconnection_timeout_ms = 1000\nseeds = [";
  for (std::size_t i = 0; i < seeds.size(); ++i) t += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(seeds[i]) + "\"";
  return t + "]\n";
}

bool region_up(int port, const std::string& region) {
  auto r = request(port, "GET", "/admin/regions", "", {"Authorization: Bearer key-admin"});
  const json j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || !j.contains("regions")) return false;
  for (const auto& x : j["regions"])
    if (x.value("region", "") == region) return x.value("status", "") == "up";
  return false;
}

std::string chat(int max_tokens, const std::string& text) {
  return json{{"model", "chat-7b"}, {"stream", true}, {"max_tokens", max_tokens},
              {"messages", {{{"role", "user"}, {"content", text}}}}}
      .dump();
}

const std::vector<std::string> kInteractive = {"Authorization: Bearer key-search", "x-priority: interactive"};
const std::vector<std::string> kBatch = {"Authorization: Bearer key-batch", "x-priority: batch"};

// Output tokens a team's usage in a store holds: all of them, or those of requests lost with
// their region (metered by the front, version unknown: "").
std::int64_t metered_output(int port, const std::string& team, bool lost_only = false) {
  auto r = request(port, "GET", "/admin/teams/" + team + "/usage", "", {"Authorization: Bearer key-admin"});
  const json rows = json::parse(r.body, nullptr, false)["usage"];
  std::int64_t out = 0;
  if (rows.is_array())
    for (const auto& row : rows)
      if (!lost_only || row["version"] == "") out += row["output_tokens"].get<std::int64_t>();
  return out;
}

// The five processes: each region's worker and front+router node, and the control node.
struct cluster_of_two {
  int pa = free_port(), paw = free_port(), pb = free_port(), pbw = free_port(), pc = free_port();
  std::string ctl_store = "/tmp/kiln-game-day-" + std::to_string(::getpid()) + "-control.db";
  std::string b_log = "/tmp/kiln-game-day-" + std::to_string(::getpid()) + "-b.db";  // b's snapshot and usage log
  std::string a_log = "/tmp/kiln-game-day-" + std::to_string(::getpid()) + "-a.db";
  std::unique_ptr<kiln_process> ctl, a_worker, b_worker, a_edge, b_edge;

  cluster_of_two() {
    for (const auto& p : {ctl_store, a_log, b_log}) remove_store(p);
    start_control();
    a_worker = std::make_unique<kiln_process>(region_config("a") + cluster_table("a-worker", "[\"worker\"]", paw, {pa}));
    b_worker = std::make_unique<kiln_process>(region_config("b") + cluster_table("b-worker", "[\"worker\"]", pbw, {pb}));
    a_edge = std::make_unique<kiln_process>(
        region_config("a") + cluster_table("a-edge", "[\"front\", \"router\"]", pa, {paw, pb, pc}),
        process_options{"", 0, 0, a_log, ""});
    start_b_edge();
  }
  ~cluster_of_two() {
    a_edge.reset();
    b_edge.reset();
    ctl.reset();
    for (const auto& p : {ctl_store, a_log, b_log}) remove_store(p);
  }
  void start_control() {
    ctl = std::make_unique<kiln_process>(region_config("b") + cluster_table("control", "[\"control\"]", pc, {}),
                                         process_options{"", 0, 0, ctl_store, ""});
  }
  void start_b_edge() {
    b_edge = std::make_unique<kiln_process>(
        region_config("b") + cluster_table("b-edge", "[\"front\", \"router\"]", pb, {pbw, pa, pc}),
        process_options{"", 0, 0, b_log, ""});
  }
  // Output tokens the control node's store holds for both teams: all, or those lost with
  // their region (metered by a front, version unknown).
  std::int64_t metered(bool lost_only = false) const {
    return metered_output(ctl->port(), "search", lost_only) + metered_output(ctl->port(), "batch-jobs", lost_only);
  }
};

std::string config_source(int port) {
  auto r = request(port, "GET", "/admin/config", "", {"Authorization: Bearer key-admin"});
  return json::parse(r.body, nullptr, false).value("source", "");
}

}  // namespace

TEST_CASE("game day: region a is lost under load; region b takes its streams, keeps interactive, scales, meters exactly") {
  cluster_of_two c;
  const int front = c.b_edge->port();
  REQUIRE(eventually([&] { return region_up(front, "a") && region_up(front, "b"); }, 20s));
  auto& a_edge = c.a_edge;
  auto& a_worker = c.a_worker;

  // Wave 1 (0-1.2 s) goes to region a; a is killed at 1.5 s; wave 2 (2.5-4.5 s) finds only b.
  constexpr int kTokens = 150;
  std::vector<stream_spec> specs;
  for (int i = 0; i < 48; ++i)
    specs.push_back({chat(kTokens, "wave 1 stream " + std::to_string(i)), i % 2 ? kBatch : kInteractive, i * 25});
  for (int i = 0; i < 40; ++i)
    specs.push_back({chat(kTokens, "wave 2 stream " + std::to_string(i)), i % 2 ? kBatch : kInteractive, 2500 + i * 50});
  std::thread killer([&] {
    std::this_thread::sleep_for(1500ms);
    a_edge->signal(SIGKILL);
    a_worker->signal(SIGKILL);
  });
  auto results = run_streams(front, specs, 90);
  killer.join();

  std::vector<double> ttft[2];  // wave 2, completed in b: interactive, batch
  int lost_mid_stream = 0, moved_to_b = 0, interactive_after = 0, batch_refused = 0, batch_completed = 0;
  std::int64_t served_by_b[2] = {0, 0};  // output tokens b delivered: interactive, batch
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const bool interactive = i % 2 == 0;
    const bool wave2 = i >= 48;
    CHECK(r.terminals == 1);  // exactly one end
    CHECK(r.after_done == 0);
    if (r.status != 200) {
      // Only batch is refused (shed, or its wait run out) while b carries both regions.
      CHECK_FALSE(interactive);
      CHECK(r.content.empty());
      ++batch_refused;
      continue;
    }
    if (r.error_mid_stream) {
      // Lost with region a after its first tokens: one error event; never in wave 2.
      CHECK(r.error_code == "replica_lost");
      CHECK_FALSE(r.content.empty());
      CHECK_FALSE(wave2);
      ++lost_mid_stream;
      continue;
    }
    if (!interactive && !r.finished) {  // a batch stream refused after its head was sent
      ++batch_refused;
      continue;
    }
    CHECK(r.finished);
    CHECK(r.completion_tokens == kTokens);
    CHECK(r.region == "b");  // a was killed before any of its streams could finish
    served_by_b[interactive ? 0 : 1] += r.completion_tokens;
    if (!wave2) ++moved_to_b;
    if (wave2 && interactive) ++interactive_after;
    if (wave2) ttft[interactive ? 0 : 1].push_back(r.ttft_ms);
    if (!interactive) ++batch_completed;
  }
  MESSAGE("game day: " << lost_mid_stream << " streams ended mid-stream with region a, " << moved_to_b
                       << " moved to b and completed, " << interactive_after << " of 20 interactive after the loss completed; batch: "
                       << batch_completed << " completed, " << batch_refused << " refused");
  auto p95 = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(v.size())))];
  };
  MESSAGE("after the loss: TTFT p95 interactive " << p95(ttft[0]) << " ms, batch " << p95(ttft[1]) << " ms");
  // Region b at double load pays with batch: it waits behind interactive.
  CHECK(p95(ttft[1]) > p95(ttft[0]));
  CHECK(lost_mid_stream >= 1);
  CHECK(moved_to_b >= 1);
  CHECK(interactive_after == 20);  // errors stopped: everything interactive sent a second after the kill completed
  CHECK(metric(front, "kiln_region_lost_total{region=\"a\"}") == 1);
  CHECK(metric(front, "kiln_region_failed_mid_stream_total{region=\"a\"}") == lost_mid_stream);

  // Region b's autoscaler added replicas, hosted on its worker, and they serve.
  CHECK(eventually([&] {
    auto r = request(front, "GET", "/admin/pools/chat-7b/state", "", {"Authorization: Bearer key-admin"});
    const json st = json::parse(r.body, nullptr, false);
    int serving = 0;
    if (st.contains("replicas"))
      for (const auto& x : st["replicas"]) serving += x["state"] == "serving";
    return serving >= 3;
  }, 15s));

  // What the clients received is what the control node's store metered: what b served, and
  // what region a had sent before it died (its router's record died with it; b's front
  // metered it). b's node restarts and folds its usage log there.
  const auto lost_tokens = static_cast<std::int64_t>(metric(front, "kiln_region_lost_tokens_total{region=\"a\"}"));
  CHECK(lost_tokens >= lost_mid_stream);
  CHECK(lost_tokens < lost_mid_stream * kTokens);
  c.b_edge->signal(SIGTERM);
  CHECK(c.b_edge->wait_exit(15000) == 0);
  c.start_b_edge();
  const std::int64_t delivered = served_by_b[0] + served_by_b[1] + lost_tokens;
  CHECK(eventually([&] { return c.metered() == delivered; }, 20s));
  MESSAGE("clients received " << served_by_b[0] << " + " << served_by_b[1] << " tokens from b and " << lost_tokens
                              << " from a before it died; the control node's store metered " << c.metered() << ", "
                              << c.metered(true) << " of them lost with a");
  CHECK(c.metered(true) == lost_tokens);
}

TEST_CASE("game day, control node away: both regions serve the known teams from last-known-good; usage reaches the store on its return") {
  cluster_of_two c;
  const int front = c.b_edge->port();
  REQUIRE(eventually([&] { return region_up(front, "a") && region_up(front, "b"); }, 20s));
  REQUIRE(eventually([&] { return config_source(c.a_edge->port()) == "control" && config_source(front) == "control"; }, 10s));
  c.ctl->signal(SIGKILL);
  CHECK(c.ctl->wait_exit(5000) == -1);  // a signal death
  // Half the load while a serves, half with a drained (b serves).
  constexpr int kTokens = 60;
  std::vector<stream_spec> specs;
  for (int i = 0; i < 30; ++i)
    specs.push_back({chat(kTokens, "outage stream " + std::to_string(i)), i % 2 ? kBatch : kInteractive, i * 60});
  auto results = run_streams(front, specs, 60);
  REQUIRE(request(front, "POST", "/admin/regions/a/drain", R"({"seconds":0})", {"Authorization: Bearer key-admin"}).status == 200);
  auto more = run_streams(front, specs, 60);
  results.insert(results.end(), more.begin(), more.end());
  int served = 0, in_a = 0, in_b = 0;
  std::int64_t delivered = 0;
  for (const auto& r : results) {
    CHECK(r.status == 200);
    CHECK(r.finished);
    CHECK(r.terminals == 1);
    CHECK(r.completion_tokens == kTokens);
    if (r.status != 200 || !r.finished) continue;
    ++served;
    delivered += r.completion_tokens;
    (r.region == "a" ? in_a : in_b) += 1;
  }
  MESSAGE("control node away: " << served << " of " << results.size() << " streams of known teams served (" << in_a
                                << " in a, " << in_b << " in b)");
  CHECK(served == static_cast<int>(results.size()));
  CHECK(in_a == 30);
  CHECK(in_b == 30);
  // The control node returns: both router nodes fold what they metered meanwhile, once.
  c.start_control();
  CHECK(eventually([&] { return c.metered() == delivered; }, 30s));
  MESSAGE("delivered " << delivered << " tokens; the returned control node's store metered " << c.metered());
}
