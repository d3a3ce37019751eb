// A cluster of real kiln processes on 127.0.0.1: a front-only node (the global balancer)
// and one router node per region, over CAF's middleman.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <csignal>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using json = nlohmann::json;

namespace {

std::string region_node(const std::string& region, int cluster_port, int replicas, int max_running) {
  std::string c = test_config(replicas, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"" + region + "\"");
  c.replace(c.find("max_running = 128"), 17, "max_running = " + std::to_string(max_running));
  // Answers run to max_tokens: a stream lasts as long as a test needs it to.
  c.replace(c.find("min_output_tokens = 200"), 23, "min_output_tokens = 9000");
  c.replace(c.find("max_output_tokens = 400"), 23, "max_output_tokens = 9000");
  return c + "[cluster]\nnode = \"" + region + "-router\"\nroles = [\"router\", \"worker\", \"control\"]\nlisten = \"127.0.0.1:" +
         std::to_string(cluster_port) + "\"\n";
}

std::string front_node(int cluster_port, const std::vector<int>& seeds, const std::string& regions) {
  std::string c = test_config(1, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"a\"");
  c += "[cluster]\nnode = \"front\"\nroles = [\"front\"]\nlisten = \"127.0.0.1:" + std::to_string(cluster_port) +
       "\"\nregions = " + regions + "\nseeds = [";
  for (std::size_t i = 0; i < seeds.size(); ++i) c += (i ? ", " : "") + std::string("\"127.0.0.1:") + std::to_string(seeds[i]) + "\"";
  return c + "]\nheartbeat_ms = 300\nconnection_timeout_ms = 1000\n";
}

json regions_of(int port) {
  auto r = request(port, "GET", "/admin/regions", "", {"Authorization: Bearer key-admin"});
  if (r.status != 200) return json::object();
  return json::parse(r.body, nullptr, false);
}

bool region_up(int port, const std::string& region) {
  const json j = regions_of(port);
  if (!j.contains("regions")) return false;
  for (const auto& r : j["regions"])
    if (r.value("region", "") == region) return r.value("status", "") == "up";
  return false;
}

std::string chat(int max_tokens, bool stream) {
  return json{{"model", "chat-7b"}, {"stream", stream}, {"max_tokens", max_tokens},
              {"messages", {{{"role", "user"}, {"content", "Hello from the cluster test"}}}}}
      .dump();
}

const std::vector<std::string> kTeam = {"Authorization: Bearer key-search", "Content-Type: application/json"};
const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin", "Content-Type: application/json"};

// The region that served a short answer through the front (or the status it failed with).
std::string served_by(int front_port) {
  auto r = request(front_port, "POST", "/v1/chat/completions", chat(3, false), kTeam);
  return r.status == 200 ? json::parse(r.body)["region"].get<std::string>() : "status " + std::to_string(r.status);
}

}  // namespace

TEST_CASE("cluster: the front serves from its nearest region; a killed region's requests move on or end once") {
  const int pa = free_port(), pb = free_port(), pf = free_port();
  // Region a is small: at the kill some of its requests run (with tokens) and some still wait.
  auto a = std::make_unique<kiln_process>(region_node("a", pa, 1, 4));
  kiln_process b(region_node("b", pb, 2, 128));
  kiln_process front(front_node(pf, {pa, pb}, "[\"a\", \"b\"]"));
  REQUIRE(eventually([&] { return region_up(front.port(), "a") && region_up(front.port(), "b"); }, std::chrono::seconds(20)));

  // Nearest first: a whole answer from region a, through two processes.
  auto first = request(front.port(), "POST", "/v1/chat/completions", chat(8, false), kTeam);
  REQUIRE(first.status == 200);
  CHECK(json::parse(first.body)["region"] == "a");
  CHECK(json::parse(first.body)["usage"]["completion_tokens"] == 8);

  // Streams through the front; region a is killed while some stream and some wait.
  std::vector<stream_spec> specs;
  for (int i = 0; i < 16; ++i) specs.push_back({chat(300, true), kTeam, i * 20});
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    a->signal(SIGKILL);
  });
  auto results = run_streams(front.port(), specs, 60);
  killer.join();
  int completed_in_b = 0, failed_mid_stream = 0;
  for (const auto& r : results) {
    CHECK(r.status == 200);
    CHECK(r.terminals == 1);  // exactly one end: a finish or one error event
    CHECK(r.after_done == 0);
    if (r.error_mid_stream) {
      ++failed_mid_stream;
      CHECK(r.error_code == "replica_lost");
      CHECK_FALSE(r.content.empty());  // it had tokens (none had: it would have moved)
    } else {
      CHECK(r.finished);
      CHECK(r.done);
      CHECK(r.completion_tokens == 300);
      completed_in_b += r.region == "b";
    }
  }
  MESSAGE("of 16 streams: " << failed_mid_stream << " lost mid-stream with region a, " << completed_in_b
                            << " completed in region b");
  CHECK(failed_mid_stream >= 1);
  CHECK(completed_in_b >= 1);
  // The front counted each once.
  CHECK(metric(front.port(), "kiln_region_failed_mid_stream_total{region=\"a\"}") == failed_mid_stream);
  CHECK(metric(front.port(), "kiln_region_retried_total{region=\"a\"}") >= 1);
  CHECK(metric(front.port(), "kiln_region_lost_total{region=\"a\"}") == 1);
  // What those clients had received is counted (a front-only node has no usage log to meter it into).
  CHECK(metric(front.port(), "kiln_region_lost_tokens_total{region=\"a\"}") >= failed_mid_stream);
  CHECK(metric(front.port(), "kiln_region_up{region=\"a\"}") == 0);
  // Gauges are published every half second.
  CHECK(eventually([&] { return metric(front.port(), "kiln_region_requests_in_flight") == 0; }, std::chrono::seconds(3)));
  CHECK(metric(front.port(), "kiln_region_requests_total{region=\"b\"}") >= completed_in_b);

  // With a gone, new requests go to b at once.
  auto next = request(front.port(), "POST", "/v1/chat/completions", chat(4, false), kTeam);
  REQUIRE(next.status == 200);
  CHECK(json::parse(next.body)["region"] == "b");

  // Region a returns on its cluster port: the front dials it again and prefers it again.
  a = std::make_unique<kiln_process>(region_node("a", pa, 1, 4));
  REQUIRE(eventually([&] { return region_up(front.port(), "a"); }, std::chrono::seconds(20)));
  auto back = request(front.port(), "POST", "/v1/chat/completions", chat(4, false), kTeam);
  REQUIRE(back.status == 200);
  CHECK(json::parse(back.body)["region"] == "a");
}

TEST_CASE("cluster: a frozen region node leaves the front's regions within the connection timeout; with none left, 503") {
  const int pa = free_port(), pf = free_port();
  kiln_process a(region_node("a", pa, 1, 8));
  kiln_process front(front_node(pf, {pa}, "[\"a\"]"));
  REQUIRE(eventually([&] { return region_up(front.port(), "a"); }, std::chrono::seconds(20)));

  // A client that vanishes through the front cancels its request in the region's engine.
  {
    http_conn c(front.port());
    c.send_raw(make_request("POST", "/v1/chat/completions", chat(8000, true), kTeam));
    REQUIRE(c.read_head().status == 200);
    std::string got;
    while (got.find("\"content\":\" ") == std::string::npos) got += c.read_some();
    CHECK(metric(a.port(), "kiln_engine_tokens_in_flight") > 0);
  }
  CHECK(eventually([&] { return metric(a.port(), "kiln_engine_tokens_in_flight") == 0; }, std::chrono::seconds(5)));

  // Log-probabilities cross nodes too (a prompt's first token has none: NaN on the wire).
  const std::string lp_body = json{{"model", "chat-7b"}, {"max_tokens", 6}, {"seed", 3}, {"logprobs", true}, {"top_logprobs", 2},
                                   {"messages", {{{"role", "user"}, {"content", "logprobs across nodes"}}}}}
                                  .dump();
  auto via_front = request(front.port(), "POST", "/v1/chat/completions", lp_body, kTeam);
  auto direct = request(a.port(), "POST", "/v1/chat/completions", lp_body, kTeam);
  REQUIRE(via_front.status == 200);
  REQUIRE(direct.status == 200);
  CHECK(json::parse(via_front.body)["choices"] == json::parse(direct.body)["choices"]);
  CHECK(json::parse(via_front.body)["choices"][0]["logprobs"]["content"].size() == 6);

  const auto t0 = std::chrono::steady_clock::now();
  a.signal(SIGSTOP);
  const bool seen = eventually([&] { return !region_up(front.port(), "a"); }, std::chrono::seconds(10));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("a frozen node (SIGSTOP) left the front's regions after " << took << " s (heartbeat 300 ms, timeout 1000 ms)");
  CHECK(seen);
  // No region: a clear 503 with Retry-After, not a hang.
  auto none = request(front.port(), "POST", "/v1/chat/completions", chat(4, false), kTeam);
  CHECK(none.status == 503);
  CHECK(none.headers["retry-after"] == "1");
  CHECK(json::parse(none.body)["error"]["code"] == "model_unavailable");
  a.signal(SIGCONT);
  REQUIRE(eventually([&] { return region_up(front.port(), "a"); }, std::chrono::seconds(20)));
  auto back = request(front.port(), "POST", "/v1/chat/completions", chat(4, false), kTeam);
  CHECK(back.status == 200);
}

TEST_CASE("cluster: the region drill by hand: drain and undrain a region, then kill it with kiln chaos --region") {
  const int pa = free_port(), pb = free_port(), pf = free_port();
  kiln_process a(region_node("a", pa, 1, 8));
  kiln_process b(region_node("b", pb, 1, 8));
  kiln_process front(front_node(pf, {pa, pb}, "[\"a\", \"b\"]"));
  REQUIRE(eventually([&] { return region_up(front.port(), "a") && region_up(front.port(), "b"); }, std::chrono::seconds(20)));
  const auto& admin = kAdmin;
  auto region_of = [&] { return served_by(front.port()); };
  CHECK(region_of() == "a");

  // Drained until undrained: new requests go to b; a stays reachable.
  auto drained = request(front.port(), "POST", "/admin/regions/a/drain", R"({"seconds":0})", admin);
  REQUIRE(drained.status == 200);
  CHECK(json::parse(drained.body)["router_nodes"] == json::array({"a-router"}));
  CHECK(region_of() == "b");
  CHECK(region_of() == "b");
  CHECK(eventually([&] { return metric(front.port(), "kiln_region_draining{region=\"a\"}") == 1; }, std::chrono::seconds(3)));
  const json view = regions_of(front.port());
  CHECK(view["regions"][0]["status"] == "draining");
  CHECK(request(front.port(), "DELETE", "/admin/regions/a/drain", "", admin).status == 200);
  CHECK(region_of() == "a");

  // A drain for a while ends by itself.
  REQUIRE(request(front.port(), "POST", "/admin/regions/a/drain", R"({"seconds":1})", admin).status == 200);
  CHECK(region_of() == "b");
  CHECK(eventually([&] { return region_of() == "a"; }, std::chrono::seconds(5)));

  // Bad drills: clear errors.
  CHECK(request(front.port(), "POST", "/admin/regions/a/drain", R"({"seconds":-1})", admin).status == 400);
  CHECK(request(front.port(), "POST", "/admin/regions/a/drain", R"({"minutes":1})", admin).status == 400);
  CHECK(request(front.port(), "POST", "/admin/regions/z/kill", "", admin).status == 400);
  CHECK(request(front.port(), "POST", "/admin/regions/a/kill", "", kTeam).status == 403);
  CHECK(request(a.port(), "POST", "/admin/regions/a/drain", "", admin).status == 404);  // no balancer there

  // kiln chaos --region kills every router node of the region, as a region lost.
  const std::string cmd = std::string(kiln_binary()) + " chaos --url http://127.0.0.1:" + std::to_string(front.port()) +
                          " --admin-key key-admin --region a --action kill 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = ::pclose(p);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(out.find("kill region a: router nodes a-router") != std::string::npos);
  CHECK(out.find("region a: down") != std::string::npos);
  CHECK(a.wait_exit(5000) == -1);  // it died of a signal
  CHECK(region_of() == "b");
}

TEST_CASE("cluster: a region whose pool is degraded is passed over while another serves, and taken back when it recovers") {
  const int pa = free_port(), pb = free_port(), pf = free_port();
  // Region a gives up restarting after one restart; degraded for 6 s.
  std::string ca = region_node("a", pa, 1, 8);
  ca.replace(ca.find("max_running = 8"), 15, "max_running = 8\nrestart_intensity = 1\nrestart_period_ms = 6000");
  kiln_process a(ca);
  kiln_process b(region_node("b", pb, 1, 8));
  kiln_process front(front_node(pf, {pa, pb}, "[\"a\", \"b\"]"));
  REQUIRE(eventually([&] { return region_up(front.port(), "a") && region_up(front.port(), "b"); }, std::chrono::seconds(20)));
  const auto& admin = kAdmin;
  auto region_of = [&] { return served_by(front.port()); };
  auto chaos = [&](const std::string& target) {
    return request(a.port(), "POST", "/admin/chaos",
                   R"({"target":")" + target + R"(","id":"chat-7b-v1-r0","action":"kill"})", admin)
        .status;
  };
  CHECK(region_of() == "a");
  const double sent_before = metric(front.port(), "kiln_region_requests_total{region=\"a\"}");

  // Two engine deaths (the replica gives up; its pool restarts it), then the replica's: past
  // the pool's intensity, so the pool turns degraded.
  REQUIRE(chaos("engine") == 200);
  REQUIRE(eventually([&] { return metric(a.port(), "kiln_replica_engine_restarts_total") >= 1; }, std::chrono::seconds(5)));
  REQUIRE(eventually([&] { return chaos("engine") == 200; }, std::chrono::seconds(5)));
  REQUIRE(eventually([&] { return metric(a.port(), "kiln_pool_restarts_total") >= 1; }, std::chrono::seconds(5)));
  REQUIRE(eventually([&] { return chaos("replica") == 200; }, std::chrono::seconds(5)));
  REQUIRE(eventually([&] { return metric(a.port(), "kiln_pool_degraded") == 1; }, std::chrono::seconds(5)));

  // The front hears of it within a second or two and sends chat-7b to b without trying a.
  REQUIRE(eventually([&] { return metric(front.port(), "kiln_region_degraded{region=\"a\"}") == 1; }, std::chrono::seconds(3)));
  const json view = regions_of(front.port());
  CHECK(view["regions"][0]["status"] == "degraded");
  CHECK(view["regions"][0]["unhealthy_models"] == json::array({"chat-7b"}));
  CHECK(metric(front.port(), "kiln_region_unhealthy_models{region=\"a\"}") == 1);
  const double retried_before = metric(front.port(), "kiln_region_retried_total{region=\"a\"}");
  const double a_sent = metric(front.port(), "kiln_region_requests_total{region=\"a\"}");
  for (int i = 0; i < 4; ++i) CHECK(region_of() == "b");
  CHECK(metric(front.port(), "kiln_region_requests_total{region=\"a\"}") == a_sent);  // not even tried
  CHECK(metric(front.port(), "kiln_region_retried_total{region=\"a\"}") == retried_before);

  // When a recovers (after its 6 s), the front prefers it again.
  REQUIRE(eventually([&] { return metric(a.port(), "kiln_pool_degraded") == 0 && metric(a.port(), "kiln_pool_serving") == 1; },
                     std::chrono::seconds(15)));
  CHECK(eventually([&] { return metric(front.port(), "kiln_region_degraded{region=\"a\"}") == 0; }, std::chrono::seconds(3)));
  CHECK(eventually([&] { return region_of() == "a"; }, std::chrono::seconds(3)));
  CHECK(metric(front.port(), "kiln_region_requests_total{region=\"a\"}") > sent_before);
}
