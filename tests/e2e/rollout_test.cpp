// A version's life through `kiln ops` against a running kiln, while clients stream: register
// tiny-chat@v2 (hashed here, checked there), shadow it, canary it at 50%, promote it, roll it
// back. No client sees an error; both versions serve; a tampered file is refused at
// registration and, after it, at load.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

ops_result ops(int port, const std::string& args) { return run_ops(port, args); }

std::string pool_status(int port, const std::string& version) {
  const auto r = ops(port, "--json pool tiny-chat");
  const json j = json::parse(r.out, nullptr, false);
  if (!j.is_object()) return "";
  for (const auto& v : j["versions"])
    if (v["version"] == version) return v["status"];
  return "absent";
}

bool wait_status(int port, const std::string& version, const std::string& want) {
  for (int i = 0; i < 200; ++i) {
    if (pool_status(port, version) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string chat(int conversation) {
  return "{\"model\":\"tiny-chat\",\"stream\":true,\"max_tokens\":6,\"messages\":[{\"role\":\"user\",\"content\":\"turn of " +
         std::to_string(conversation) + "\"}]}";
}

std::string version_of_replica(const std::string& replica) {  // "tiny-chat-v2-r0" -> "v2"
  const auto end = replica.rfind("-r");
  const auto start = replica.rfind('-', end - 1);
  return replica.substr(start + 1, end - start - 1);
}

}  // namespace

TEST_CASE("rollout e2e: register, canary 50%, promote and roll back through kiln ops while clients stream") {
  char tmpl[] = "/tmp/kiln-e2e-rollout-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  kiln_process p(test_config(1) + cpu_pool("tiny-chat", root + "/v1") +
                 "\n[rollout]\nguard_min_requests = 100000\nkeep_previous_hours = 24\n");
  const int port = p.port();
  fs::copy(root + "/v1", root + "/v2");  // the same weights as a new version: quality is not the test

  // Clients stream through everything below: 30 conversations, 6 turns each, spread out.
  std::vector<stream_spec> specs;
  for (int turn = 0; turn < 6; ++turn)
    for (int c = 0; c < 30; ++c)
      specs.push_back({chat(c), {"Authorization: Bearer key-search", "x-conversation-id: conv-" + std::to_string(c)},
                       turn * 1500 + c * 40});
  std::vector<stream_result> results;
  std::thread clients([&] { results = run_streams(port, specs, 60); });

  // Register: hashed here, checked there; the same content again is idempotent.
  auto r = ops(port, "register tiny-chat v2 " + root + "/v2");
  CHECK(r.status == 0);
  CHECK(r.out.find("registered tiny-chat@v2") != std::string::npos);
  CHECK(ops(port, "register tiny-chat v2 " + root + "/v2").status == 0);
  // Other content under the same version: refused, a version never changes.
  fs::copy(root + "/v2", root + "/v2b");
  std::ofstream(root + "/v2b/config.json", std::ios::app) << " ";
  r = ops(port, "register tiny-chat v2 " + root + "/v2b");
  CHECK(r.status == 1);
  CHECK(r.out.find("409") != std::string::npos);

  // A cpu pool's gate is a short load test on one real engine; its figures are stored and
  // the version becomes gated.
  r = ops(port, "gate tiny-chat v2");
  CHECK(r.status == 0);
  CHECK(r.out.find("tiny-chat@v2 gated") != std::string::npos);
  CHECK(r.out.find("load test on one cpu engine") != std::string::npos);
  {
    const json vs = json::parse(ops(port, "--json versions tiny-chat").out, nullptr, false);
    REQUIRE(vs.is_object());
    for (const auto& v : vs["versions"])
      if (v["version"] == "v2") {
        CHECK(v["status"] == "gated");
        CHECK(v["load_test_tokens_per_s"].get<double>() > 0);
        CHECK(v["load_test_tokens_in_flight"].get<double>() > 0);
      }
  }

  // Shadow at 50%: v2's pool starts and gets copies; clients hear only v1.
  r = ops(port, "rollout tiny-chat v2 shadow 50");
  CHECK(r.status == 0);
  CHECK(r.out.find("shadow v2 at 50%") != std::string::npos);
  REQUIRE(wait_status(port, "v2", "serving"));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  r = ops(port, "--json rollout tiny-chat");
  CHECK(json::parse(r.out)["window"]["shadow"]["requests"].get<int>() > 0);
  CHECK(ops(port, "rollout tiny-chat v2 shadow 0").status == 0);

  // Canary at 50%: conversations split by id.
  r = ops(port, "rollout tiny-chat v2 canary 50");
  CHECK(r.status == 0);
  CHECK(r.out.find("canary v2 at 50%") != std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the second turn runs on the split

  // Promote: one alias change; v1 stays loaded.
  r = ops(port, "alias tiny-chat v2");
  CHECK(r.status == 0);
  CHECK(r.out.find("live v2, previous v1 kept loaded") != std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // Roll back by hand: the old version is still there, so it is one alias change again.
  r = ops(port, "alias tiny-chat v1");
  CHECK(r.status == 0);
  CHECK(r.out.find("live v1, previous v2 kept loaded") != std::string::npos);
  clients.join();

  // Nobody saw an error, and both versions served.
  std::set<std::string> versions;
  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].status == 200);
    CHECK(results[i].finished);
    CHECK(results[i].done);
    CHECK(results[i].error_code.empty());
    versions.insert(version_of_replica(results[i].replica_id));
  }
  CHECK(versions.count("v1") == 1);
  CHECK(versions.count("v2") == 1);
  // Every decision is a stored row, in order.
  r = ops(port, "--json decisions tiny-chat");
  const json rows = json::parse(r.out)["rollouts"];
  REQUIRE(rows.size() == 5);
  CHECK(rows[0]["decision"] == "start");
  CHECK(rows[0]["stage"] == "shadow");
  CHECK(rows[1]["decision"] == "end");
  CHECK(rows[2]["decision"] == "start");
  CHECK(rows[2]["stage"] == "canary");
  CHECK(rows[3]["decision"] == "promote");
  CHECK(rows[4]["decision"] == "rollback");
  r = ops(port, "--json versions tiny-chat");
  CHECK(json::parse(r.out)["versions"][0]["status"] == "live");  // it was live once; v1 is the alias again

  // A registered version whose file changed after registration is refused at load, named.
  fs::copy(root + "/v1", root + "/v3");
  CHECK(ops(port, "register tiny-chat v3 " + root + "/v3").status == 0);
  {
    std::fstream f(root + "/v3/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  CHECK(ops(port, "rollout tiny-chat v3 canary 10").status == 0);
  REQUIRE(wait_status(port, "v3", "failed"));
  // Its share stays on the live version.
  const http_response served = request(port, "POST", "/v1/chat/completions",
                                       "{\"model\":\"tiny-chat\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                                       {"Authorization: Bearer key-search"});
  CHECK(served.status == 200);
  const http_response pinned = request(port, "POST", "/v1/chat/completions",
                                       "{\"model\":\"tiny-chat@v3\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                                       {"Authorization: Bearer key-search"});
  CHECK(pinned.status == 503);
  CHECK(pinned.body.find("model.safetensors") != std::string::npos);
  fs::remove_all(root);
}
