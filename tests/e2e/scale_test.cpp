// A pool's bounds from the store through `kiln ops scale`, against a running kiln: the
// autoscaler grows the pool to the stored minimum and keeps a warm replica out of routing;
// killed, its pool starts another that reads the store again; the store writer killed,
// the node starts another and the rows are still there. Bad bounds are refused.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;

namespace {

ops_result ops(int port, const std::string& args) { return run_ops(port, args); }

struct counts {
  int serving = 0;  ///< serving and in the router's ranking
  int warm = 0;     ///< loaded and held back
  int total = 0;
};

counts pool_counts(int port) {
  counts c;
  const json j = json::parse(ops(port, "--json pool chat-7b").out, nullptr, false);
  if (!j.is_object() || !j.contains("versions")) return c;
  for (const auto& v : j["versions"])
    for (const auto& r : v["replicas"]) {
      ++c.total;
      if (r.value("warm", false)) ++c.warm;
      else if (r.value("state", std::string()) == "serving" && r.value("in_ranking", false)) ++c.serving;
    }
  return c;
}

bool wait_counts(int port, int serving, int warm) {
  for (int i = 0; i < 200; ++i) {
    const counts c = pool_counts(port);
    if (c.serving == serving && c.warm == warm) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const counts c = pool_counts(port);
  MESSAGE("serving " << c.serving << ", warm " << c.warm << ", all " << c.total);
  return false;
}

}  // namespace

TEST_CASE("scale e2e: stored bounds and warm replicas drive the autoscaler; it and the store writer survive being killed") {
  kiln_process p(test_config(1) + "[pools.autoscale]\nmin_replicas = 1\nmax_replicas = 4\ninterval_s = 0.2\ndown_every_s = 3600\n");
  const int port = p.port();
  REQUIRE(wait_counts(port, 1, 0));

  auto r = ops(port, "scale");
  CHECK(r.status == 0);
  CHECK(r.out.find("chat-7b") == std::string::npos);  // no stored bounds yet

  r = ops(port, "scale chat-7b v1 3 4 1");
  CHECK(r.status == 0);
  CHECK(r.out.find("chat-7b@v1 in local: 3 to 4 replicas, 1 warm") != std::string::npos);
  REQUIRE(wait_counts(port, 3, 1));
  // The warm replica is shown as such (once its own gauge says it has loaded: the pool may
  // count it warm a moment before), and the cold starts are measured.
  auto m = request(port, "GET", "/metrics");
  for (int i = 0; i < 100 && m.body.find("state=\"warm\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    m = request(port, "GET", "/metrics");
  }
  CHECK(m.body.find("state=\"warm\"") != std::string::npos);
  CHECK(m.body.find("kiln_replica_ready_seconds{") != std::string::npos);

  // Killed, the autoscaler is started again by its pool and follows the next change.
  r = ops(port, "chaos autoscaler chat-7b@v1 kill");
  CHECK(r.status == 0);
  r = ops(port, "scale chat-7b v1 4 4 0");
  CHECK(r.status == 0);
  REQUIRE(wait_counts(port, 4, 0));  // the warm one promoted, none kept

  // Killed, the store writer is started again by the node; what it stored is still there.
  r = ops(port, "chaos store store kill");
  CHECK(r.status == 0);
  bool listed = false;
  for (int i = 0; i < 100 && !listed; ++i) {
    r = ops(port, "--json scale");
    const json j = json::parse(r.out, nullptr, false);
    listed = r.status == 0 && j.is_object() && j["data"].size() == 1 && j["data"][0]["min_replicas"] == 4;
    if (!listed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(listed);
  CHECK(ops(port, "scale chat-7b v1 2 4 0").status == 0);

  // Bad bounds: refused by the server (1) or by the command line (2); nothing changes.
  r = ops(port, "scale chat-7b v1 5 4");
  CHECK(r.status == 1);
  CHECK(r.out.find("min_replicas must not exceed max_replicas") != std::string::npos);
  r = ops(port, "scale chat-7b v1 x 4");
  CHECK(r.status == 2);
  CHECK(r.out.find("min_replicas must be a whole number") != std::string::npos);
  r = ops(port, "chaos autoscaler chat-7b@v1 freeze");
  CHECK(r.status == 1);
  CHECK(r.out.find("an autoscaler can be killed, not freeze") != std::string::npos);
  const json j = json::parse(ops(port, "--json scale").out, nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["data"][0]["min_replicas"] == 2);
  CHECK(pool_counts(port).serving == 4);  // a lower minimum removes nothing before its period
}
