// The admin API and the model@version surface against the real binary, and `kiln chaos`.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::vector<std::string> kTeam = {"Authorization: Bearer key-search"};
const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin"};

std::string chat(const std::string& model, int max_tokens) {
  return "{\"model\":\"" + model + "\",\"max_tokens\":" + std::to_string(max_tokens) +
         ",\"seed\":3,\"messages\":[{\"role\":\"user\",\"content\":\"Hello admin\"}]}";
}

json state(int port, const std::string& model = "chat-7b") {
  const http_response r = request(port, "GET", "/admin/pools/" + model + "/state", "", kAdmin);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

json replica(const json& st, const std::string& id) {
  for (const auto& r : st["replicas"])
    if (r["replica_id"] == id) return r;
  return json();
}

std::string run(const std::string& args, int& exit_code) {
  auto [status, out] = run_command(std::string(kiln_binary()) + " " + args);
  exit_code = status;
  return out;
}

}  // namespace

TEST_CASE("admin: no key is 401, a team key 403, the admin key passes, on every admin route") {
  kiln_process p(test_config(2));
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/admin/pools/chat-7b/state"}, {"PUT", "/admin/replicas/chat-7b-v1-r9/drain"}, {"DELETE", "/admin/replicas/chat-7b-v1-r9/drain"},
      {"POST", "/admin/chaos"}};
  for (const auto& [method, path] : routes) {
    CAPTURE(path);
    CHECK(request(p.port(), method, path).status == 401);
    CHECK(request(p.port(), method, path, "", {"Authorization: Bearer nope"}).status == 401);
    const http_response team = request(p.port(), method, path, "{}", kTeam);
    CHECK(team.status == 403);
    CHECK(json::parse(team.body)["error"]["code"] == "forbidden");
    CHECK(request(p.port(), method, path, "{\"target\":\"nothing\"}", kAdmin).status != 401);
  }
  // The admin key is not a team key.
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kAdmin).status == 401);
}

TEST_CASE("admin: pool state has the seed's shape; an unknown model is 404") {
  kiln_process p(test_config(2));
  request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 5), kTeam);
  const json st = state(p.port());
  CHECK(st["model"] == "chat-7b");
  CHECK(st["queue_depth"].is_number_integer());
  CHECK(st["tokens_in_flight"].is_number_integer());
  CHECK(st["prefix_hit_rate"].is_number());
  REQUIRE(st["replicas"].size() == 2);
  for (const auto& r : st["replicas"]) {
    CHECK(r["replica_id"].is_string());
    CHECK(r["version"] == "v1");
    CHECK(r["state"] == "serving");
    CHECK(r["queue_depth"].is_number_integer());
    CHECK(r["tokens_in_flight"].is_number_integer());
    CHECK(r["last_heartbeat"].is_number_integer());
    CHECK(r["in_ranking"] == true);
  }
  const http_response missing = request(p.port(), "GET", "/admin/pools/gpt-9/state", "", kAdmin);
  CHECK(missing.status == 404);
  CHECK(json::parse(missing.body)["error"]["message"].get<std::string>().find("gpt-9") != std::string::npos);
}

TEST_CASE("admin: drain: in-flight work finishes, new requests go elsewhere, the replica stops") {
  kiln_process p(test_config(2));
  http_conn long_stream(p.port());
  long_stream.send_raw(make_request("POST", "/v1/chat/completions",
                                    "{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":150,\"messages\":[{\"role\":\"user\",\"content\":\"long\"}]}",
                                    kTeam));
  REQUIRE(long_stream.read_head().status == 200);
  const http_response d = request(p.port(), "PUT", "/admin/replicas/chat-7b-v1-r0/drain", "", kAdmin);
  REQUIRE(d.status == 200);
  CHECK(json::parse(d.body)["state"] == "draining");
  for (int i = 0; i < 6; ++i) {
    const http_response r = request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam);
    REQUIRE(r.status == 200);
    CHECK(json::parse(r.body)["replica_id"] == "chat-7b-v1-r1");
  }
  std::string body;
  for (std::string s = long_stream.read_some(); !s.empty(); s = long_stream.read_some()) body += s;
  CHECK(body.find("\"completion_tokens\":150") != std::string::npos);
  CHECK(eventually([&] { return replica(state(p.port()), "chat-7b-v1-r0")["state"] == "stopped"; }, 5s));
  CHECK(request(p.port(), "PUT", "/admin/replicas/nope/drain", "", kAdmin).status == 404);
  // DELETE undoes it: the stopped replica's engine starts again and it serves once more.
  const http_response back = request(p.port(), "DELETE", "/admin/replicas/chat-7b-v1-r0/drain", "", kAdmin);
  REQUIRE(back.status == 200);
  CHECK(json::parse(back.body)["state"] == "loading");
  CHECK(eventually([&] { return replica(state(p.port()), "chat-7b-v1-r0")["state"] == "serving"; }, 5s));
  // With r1 drained in its turn, r0 serves every request; r1 resumed while draining serves on.
  REQUIRE(request(p.port(), "PUT", "/admin/replicas/chat-7b-v1-r1/drain", "", kAdmin).status == 200);
  for (int i = 0; i < 4; ++i) {
    const http_response r = request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam);
    REQUIRE(r.status == 200);
    CHECK(json::parse(r.body)["replica_id"] == "chat-7b-v1-r0");
  }
  // The same through `kiln ops`: r1 back, then drained and back again.
  // (An idle replica stops at its next beat: resumed, it serves on, or loads again.)
  const auto resumed = [&] {
    const ops_result r = run_ops(p.port(), "undrain chat-7b-v1-r1");
    CHECK(r.status == 0);
    CHECK((r.out == "chat-7b-v1-r1: serving\n" || r.out == "chat-7b-v1-r1: loading\n"));
    CHECK(eventually([&] { return replica(state(p.port()), "chat-7b-v1-r1")["state"] == "serving"; }, 5s));
  };
  resumed();
  CHECK(run_ops(p.port(), "drain chat-7b-v1-r1").out == "chat-7b-v1-r1: draining\n");
  resumed();
  const ops_result unknown = run_ops(p.port(), "undrain nope");
  CHECK(unknown.status != 0);
  CHECK(unknown.out.find("no replica named nope") != std::string::npos);
  CHECK(request(p.port(), "DELETE", "/admin/replicas/nope/drain", "", kAdmin).status == 404);
}

TEST_CASE("admin: chaos validates its order, kills what it names, and the pool restarts it") {
  kiln_process p(test_config(2));
  auto post = [&](const std::string& body) { return request(p.port(), "POST", "/admin/chaos", body, kAdmin); };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", ""},
      {R"({"target":"gpu"})", "target"},
      {R"({"action":"explode"})", "action"},
      {R"({"action":"freeze","seconds":0})", "seconds"},
      {R"({"action":"slow","factor":0.5})", "factor"},
      {R"({"id":""})", "id"},
      {R"({"verb":"kill"})", "verb"}};
  for (const auto& [body, param] : bad) {
    CAPTURE(body);
    const http_response r = post(body);
    CHECK(r.status == 400);
    const json e = json::parse(r.body);
    if (param.empty()) CHECK(e["error"]["param"].is_null());
    else CHECK(e["error"]["param"] == param);
  }
  CHECK(post(R"({"target":"replica","id":"chat-7b-v1-r7"})").status == 404);
  const http_response hit = post(R"({"target":"replica","id":"chat-7b-v1-r1","action":"kill"})");
  REQUIRE(hit.status == 200);
  const json h = json::parse(hit.body);
  CHECK(h["id"] == "chat-7b-v1-r1");
  CHECK(h["model"] == "chat-7b");
  CHECK(h["version"] == "v1");
  CHECK(eventually([&] {
    const json r1 = replica(state(p.port()), "chat-7b-v1-r1");
    return r1["state"] == "serving" && r1["in_ranking"] == true;
  }, 5s));
  const std::string metrics = request(p.port(), "GET", "/metrics").body;
  CHECK(metrics.find("kiln_replica_starts_total{replica=\"chat-7b-v1-r1\",model=\"chat-7b\",version=\"v1\"} 2") != std::string::npos);
  CHECK(metrics.find("kiln_pool_restarts_total{model=\"chat-7b\",version=\"v1\"} 1") != std::string::npos);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam).status == 200);
}

TEST_CASE("models: several versions at once; the alias is the live one, model@version pins, an unknown version is 404") {
  std::string cfg = test_config(1);
  const auto pool_at = cfg.find("[[pools]]");
  cfg += cfg.substr(pool_at);  // the same pool again ...
  const auto second = cfg.rfind("version = \"v1\"");
  cfg.replace(second, 14, "version = \"v2\"");  // ... as version v2
  cfg += "[[models]]\nname = \"chat-7b\"\nlive_version = \"v2\"\n";
  kiln_process p(cfg);
  const json models = json::parse(request(p.port(), "GET", "/v1/models", "", kTeam).body);
  REQUIRE(models["data"].size() == 1);
  CHECK(models["data"][0]["id"] == "chat-7b");
  CHECK(models["data"][0]["live_version"] == "v2");
  CHECK(models["data"][0]["versions"].size() == 2);
  const json live = json::parse(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam).body);
  CHECK(live["model_version"] == "v2");
  const json pinned = json::parse(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b@v1", 3), kTeam).body);
  CHECK(pinned["model_version"] == "v1");
  CHECK(pinned["model"] == "chat-7b@v1");
  const http_response unknown = request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b@v9", 3), kTeam);
  CHECK(unknown.status == 404);
  const json e = json::parse(unknown.body)["error"];
  CHECK(e["code"] == "model_not_found");
  CHECK(e["param"] == "model");
  CHECK(e["message"].get<std::string>().find("chat-7b@v9") != std::string::npos);
  CHECK(state(p.port())["versions"].size() == 2);
}

TEST_CASE("kiln chaos: a drill against kiln serve prints what it killed and the pool after each kill") {
  kiln_process p(test_config(3));
  const std::string url = "http://127.0.0.1:" + std::to_string(p.port());
  int rc = -1;
  const std::string out = run("chaos --url " + url + " --admin-key key-admin --every 300ms --for 1s", rc);
  CAPTURE(out);
  CHECK(rc == 0);
  std::size_t kills = 0;
  for (std::size_t at = out.find("kill replica chat-7b-v1-r"); at != std::string::npos;
       at = out.find("kill replica chat-7b-v1-r", at + 1))
    ++kills;
  CHECK(kills == 4);  // at 0, 0.3, 0.6 and 0.9 s
  CHECK(out.find("restarts=") != std::string::npos);
  CHECK(out.find("kiln chaos: 4 kills done, 0 refused") != std::string::npos);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam).status == 200);
  run("chaos --url " + url + " --admin-key key-search --every 1s --for 1s", rc);
  CHECK(rc == 1);
  run("chaos --url nowhere --admin-key k", rc);
  CHECK(rc == 2);
  run("chaos --url " + url + " --admin-key key-admin --target gpu", rc);
  CHECK(rc == 2);
}

TEST_CASE("loading runs off the actor threads: the sim pool serves while a CPU pool's model is still being made and read") {
  char tmpl[] = "/tmp/kiln-e2e-load-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  std::string big = cpu_pool("big-chat", root + "/big");
  big.replace(big.find("make_if_absent = \"tiny\""), 23, "make_if_absent = \"100m\"");
  const int port = free_port();
  kiln_process p(test_config(1) + big, {"", 0, port, "", ""});
  // The front answers at once: /healthz says loading, the loading pool 503 with Retry-After.
  REQUIRE(eventually([&] { return request(port, "GET", "/healthz").status != 0; }, 5s));
  const http_response health = request(port, "GET", "/healthz");
  CHECK(health.status == 503);
  CHECK(health.body.find("loading") != std::string::npos);
  const http_response loading = request(port, "POST", "/v1/chat/completions", chat("big-chat", 3), kTeam);
  CHECK(loading.status == 503);
  CHECK(loading.headers.count("retry-after") == 1);
  CHECK_MESSAGE(json::parse(loading.body)["error"]["message"].get<std::string>().find("loading") != std::string::npos,
                loading.body);
  // Meanwhile the sim pool serves: no actor thread is held by the load.
  CHECK(eventually([&] { return request(port, "POST", "/v1/chat/completions", chat("chat-7b", 3), kTeam).status == 200; }, 5s));
  CHECK(request(port, "GET", "/healthz").status == 503);  // still loading the big one
  CHECK(eventually([&] { return request(port, "GET", "/healthz").status == 200; }, 60s));
  CHECK(request(port, "POST", "/v1/chat/completions", chat("big-chat", 3), kTeam).status == 200);
  std::filesystem::remove_all(root);
}
