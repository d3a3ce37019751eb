// A control node apart from the router node it configures: admin calls made at the router
// node reach the control node's store, its snapshots reach the router node's admission, and
// the router node's usage log folds into the control node's store under its own ledger. With
// the control node away the router node serves known teams from its last-known-good (across
// its own restart), limit changes wait with a 503, and the usage it logged meanwhile reaches
// the store once when the control node returns.
#include <doctest/doctest.h>

#include <unistd.h>

#include <csignal>
#include <chrono>
#include <filesystem>
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

const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin", "Content-Type: application/json"};

std::string node_config(const std::string& name, const std::string& roles, int port, int seed) {
  std::string c = test_config(1, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"b\"");
  c += "[cluster]\nnode = \"" + name + "\"\nroles = " + roles + "\nlisten = \"127.0.0.1:" + std::to_string(port) +
       "\"\nregions = [\"b\"]\nheartbeat_ms = 300\nconnection_timeout_ms = 1000\n";
  if (seed > 0) c += "seeds = [\"127.0.0.1:" + std::to_string(seed) + "\"]\n";
  return c;
}

json config_of(int port) {
  auto r = request(port, "GET", "/admin/config", "", kAdmin);
  return r.status == 200 ? json::parse(r.body, nullptr, false) : json::object();
}

// One chat; its completion tokens, or -1 when it was not answered 200.
int chat(int port, const std::string& key, int max_tokens) {
  const std::string body = json{{"model", "chat-7b"}, {"max_tokens", max_tokens},
                                {"messages", {{{"role", "user"}, {"content", "count " + std::to_string(max_tokens)}}}}}
                               .dump();
  auto r = request(port, "POST", "/v1/chat/completions", body, {"Authorization: Bearer " + key, "Content-Type: application/json"});
  if (r.status != 200) return -1;
  return json::parse(r.body, nullptr, false)["usage"]["completion_tokens"].get<int>();
}

// Chats for both teams; adds what they received to `delivered`; how many were not served.
int chats(int port, const std::string& other_key, int n, std::int64_t& delivered) {
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    const int got = chat(port, i % 2 ? other_key : "key-search", 2 + i % 5);
    if (got < 0) ++failed;
    else delivered += got;
  }
  return failed;
}

std::int64_t metered_output(int port, const std::string& team) {
  auto r = request(port, "GET", "/admin/teams/" + team + "/usage", "", kAdmin);
  const json rows = json::parse(r.body, nullptr, false)["usage"];
  std::int64_t out = 0;
  if (rows.is_array())
    for (const auto& row : rows) out += row["output_tokens"].get<std::int64_t>();
  return out;
}

}  // namespace

TEST_CASE("control apart: a router node follows, meters into and outlives its control node") {
  const int pc = free_port(), pr = free_port();
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string ctl_store = (tmp / ("kiln-ctl-" + std::to_string(::getpid()) + ".db")).string();
  const std::string edge_store = (tmp / ("kiln-edge-" + std::to_string(::getpid()) + ".db")).string();
  remove_store(ctl_store);
  remove_store(edge_store);
  const std::string ctl_cfg = node_config("ctl", "[\"control\"]", pc, 0);
  const std::string edge_cfg = node_config("b-router", "[\"router\", \"worker\"]", pr, pc);
  auto ctl = std::make_unique<kiln_process>(ctl_cfg, process_options{"", 0, 0, ctl_store, ""});
  auto edge = std::make_unique<kiln_process>(edge_cfg, process_options{"", 0, 0, edge_store, ""});
  REQUIRE(eventually([&] { return config_of(edge->port()).value("source", "") == "control"; }, 20s));
  CHECK(config_of(edge->port())["origin"] == "ctl");
  CHECK_FALSE(std::filesystem::exists(edge_store));  // the router node opens no store of its own

  // Admin calls at the router node are made on the control node's store; the team it made
  // serves at the router node once the snapshot with it arrives.
  auto made = request(edge->port(), "POST", "/admin/teams", R"({"team":"ops"})", kAdmin);
  INFO(made.body);
  REQUIRE(made.status == 201);
  const std::string ops_key = json::parse(made.body)["key"];
  REQUIRE(eventually([&] { return chat(edge->port(), ops_key, 2) > 0; }, 5s));
  std::int64_t delivered = 2;
  auto put = request(edge->port(), "PUT", "/admin/teams/ops/limits", R"({"model":"chat-7b","tokens_per_minute":60000})", kAdmin);
  CHECK(put.status == 200);
  auto stored = request(ctl->port(), "GET", "/admin/teams/ops/limits", "", kAdmin);
  CHECK(stored.body.find("60000") != std::string::npos);
  // A control node has no pools, and says so.
  CHECK(request(ctl->port(), "GET", "/admin/pools/chat-7b/state", "", kAdmin).body.find("is a control node") != std::string::npos);
  CHECK(chats(edge->port(), ops_key, 10, delivered) == 0);

  // The control node goes away: requests go on; what needs the store waits, and says so.
  ctl->signal(SIGKILL);
  ctl->wait_exit(5000);
  ctl.reset();
  const auto refused = request(edge->port(), "PUT", "/admin/teams/ops/limits", R"({"model":"chat-7b","tokens_per_minute":1})", kAdmin);
  CHECK(refused.status == 503);
  CHECK(refused.body.find("No control node is reachable") != std::string::npos);
  CHECK(chats(edge->port(), ops_key, 10, delivered) == 0);
  // The router node restarted meanwhile serves every known team from its last-known-good,
  // the team made at run time included.
  edge->signal(SIGTERM);
  CHECK(edge->wait_exit(15000) == 0);
  edge = std::make_unique<kiln_process>(edge_cfg, process_options{"", 0, 0, edge_store, ""});
  CHECK(config_of(edge->port())["source"] == "last-known-good");
  CHECK(chats(edge->port(), ops_key, 20, delivered) == 0);

  // The control node returns: the router node follows it again and its usage log (three
  // runs of it, two while the control node was away) is folded into the store once.
  ctl = std::make_unique<kiln_process>(ctl_cfg, process_options{"", 0, 0, ctl_store, ""});
  REQUIRE(eventually([&] { return config_of(edge->port()).value("source", "") == "control"; }, 20s));
  const bool folded = eventually(
      [&] { return metered_output(ctl->port(), "search") + metered_output(ctl->port(), "ops") == delivered; }, 20s);
  MESSAGE("delivered " << delivered << " tokens; the control node's store metered "
                       << metered_output(ctl->port(), "search") + metered_output(ctl->port(), "ops"));
  CHECK(folded);
  // Folded once: not again after the router node restarts and replays its log.
  edge->signal(SIGTERM);
  CHECK(edge->wait_exit(15000) == 0);
  edge = std::make_unique<kiln_process>(edge_cfg, process_options{"", 0, 0, edge_store, ""});
  std::this_thread::sleep_for(3s);
  CHECK(metered_output(ctl->port(), "search") + metered_output(ctl->port(), "ops") == delivered);
  edge.reset();
  ctl.reset();
  remove_store(ctl_store);
  remove_store(edge_store);
}

TEST_CASE("control apart: a version promoted at the router node serves from last-known-good after a restart while the control node is away") {
  char tmpl[] = "/tmp/kiln-e2e-ctl-route-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const int pc = free_port(), pr = free_port();
  auto cfg = [&](const std::string& name, const std::string& roles, int port, int seed) {
    return node_config(name, roles, port, seed) + cpu_pool("tiny-chat", root + "/v1");
  };
  auto ctl = std::make_unique<kiln_process>(cfg("ctl", "[\"control\"]", pc, 0));
  const std::string edge_store = root + "/edge.db";
  const std::string edge_cfg = cfg("b-router", "[\"router\", \"worker\"]", pr, pc);
  auto edge = std::make_unique<kiln_process>(edge_cfg, process_options{"", 0, 0, edge_store, ""});
  REQUIRE(eventually([&] { return config_of(edge->port()).value("source", "") == "control"; }, 20s));
  std::filesystem::copy(root + "/v1", root + "/v2");

  // Registered and promoted through the router node: stored on the control node, whose
  // snapshot carries the route and the registration back.
  auto r = run_ops(edge->port(), "register tiny-chat v2 " + root + "/v2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json before = config_of(ctl->port())["version"];
  // The alias moves once v2's pool serves (it loads on the first order).
  REQUIRE(eventually([&] { return (r = run_ops(edge->port(), "alias tiny-chat v2")).status == 0; }, 20s));
  CHECK(r.out.find("live v2, previous v1 kept loaded") != std::string::npos);
  auto served_version = [&] {
    auto got = run_streams(edge->port(),
                           {{R"({"model":"tiny-chat","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]})",
                             {"Authorization: Bearer key-search"}, 0}},
                           30);
    return got[0].status == 200 ? got[0].replica_id : "status " + std::to_string(got[0].status);
  };
  CHECK(served_version().find("-v2-") != std::string::npos);
  // The snapshot with the new route reached the router node (and its last-known-good file).
  REQUIRE(eventually(
      [&] {
        const json v = config_of(edge->port())["version"];
        return v != before && v == config_of(ctl->port())["version"];
      },
      5s));
  std::this_thread::sleep_for(500ms);

  // The control node away and the router node restarted: the route and the registration come
  // from its last-known-good, and v2 loads and serves.
  ctl->signal(SIGKILL);
  ctl->wait_exit(5000);
  edge->signal(SIGTERM);
  CHECK(edge->wait_exit(15000) == 0);
  edge = std::make_unique<kiln_process>(edge_cfg, process_options{"", 0, 0, edge_store, ""});
  CHECK(config_of(edge->port())["source"] == "last-known-good");
  CHECK(eventually([&] { return served_version().find("-v2-") != std::string::npos; }, 20s));
  // A rollout waits for the control node (the registration of another version is there).
  CHECK(run_ops(edge->port(), "alias tiny-chat v1").status != 0);
  edge.reset();
  ctl.reset();
  remove_store(edge_store);
  std::filesystem::remove_all(root);
}
