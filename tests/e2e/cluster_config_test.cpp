// Configuration across nodes: a front-only node follows its control node's snapshots, keeps
// the latest as its last-known-good file, and serves known teams from it while the control
// node is away.
#include <doctest/doctest.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <stdexcept>
#include <tuple>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;

namespace {

const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin", "Content-Type: application/json"};

std::string region_node(int cluster_port) {
  std::string c = test_config(1, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"a\"");
  return c + "[cluster]\nnode = \"a-control\"\nroles = [\"router\", \"worker\", \"control\"]\nlisten = \"127.0.0.1:" +
         std::to_string(cluster_port) + "\"\n";
}

std::string front_node(int cluster_port, int seed) {
  std::string c = test_config(1, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"a\"");
  return c + "[cluster]\nnode = \"front\"\nroles = [\"front\"]\nlisten = \"127.0.0.1:" + std::to_string(cluster_port) +
         "\"\nseeds = [\"127.0.0.1:" + std::to_string(seed) + "\"]\nheartbeat_ms = 300\nconnection_timeout_ms = 1000\n";
}

json config_of(int port) {
  auto r = request(port, "GET", "/admin/config", "", kAdmin);
  return r.status == 200 ? json::parse(r.body, nullptr, false) : json::object();
}

int chat_status(int port, const std::string& key) {
  const std::string body = R"({"model":"chat-7b","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})";
  return request(port, "POST", "/v1/chat/completions", body, {"Authorization: Bearer " + key, "Content-Type: application/json"}).status;
}

json new_team(int port, const std::string& team) {
  auto r = request(port, "POST", "/admin/teams", json{{"team", team}, {"name", team}}.dump(), kAdmin);
  REQUIRE(r.status == 201);
  return json::parse(r.body);
}

}  // namespace

TEST_CASE("cluster config: a front follows its control node, keeps the last-known-good and serves from it") {
  const int pa = free_port(), pf = free_port();
  const std::string front_store =
      (std::filesystem::temp_directory_path() / ("kiln-front-" + std::to_string(::getpid()) + ".db")).string();
  const std::string lkg = front_store + ".snapshot";
  std::filesystem::remove(lkg);
  process_options fopts;
  fopts.store = front_store;
  auto a = std::make_unique<kiln_process>(region_node(pa));
  auto front = std::make_unique<kiln_process>(front_node(pf, pa), fopts);

  // The front takes the control node's snapshot: the same version on both.
  REQUIRE(eventually([&] { return config_of(front->port()).value("source", "") == "control"; }, std::chrono::seconds(20)));
  const json ca = config_of(a->port());
  CHECK(ca["source"] == "store");
  CHECK(config_of(front->port())["version"] == ca["version"]);
  CHECK(config_of(front->port())["origin"] == "a-control");
  // Written off the actor threads once taken: on a busy machine a moment after.
  CHECK(eventually([&] { return std::filesystem::exists(lkg); }, std::chrono::seconds(5)));

  // A team made at the control node is known at the front within moments; a revoked key is not.
  const json t1 = new_team(a->port(), "ops-one");
  const json t2 = new_team(a->port(), "ops-two");
  CHECK(chat_status(front->port(), "kiln-unknown-key") == 401);
  REQUIRE(eventually([&] { return chat_status(front->port(), t1["key"]) == 200; }, std::chrono::seconds(5)));
  // Each store change is its own snapshot: ops-two may arrive a moment after ops-one.
  CHECK(eventually([&] { return chat_status(front->port(), t2["key"]) == 200; }, std::chrono::seconds(5)));
  auto revoked = request(a->port(), "DELETE", "/admin/teams/ops-one/keys/" + t1["key_id"].get<std::string>(), "", kAdmin);
  REQUIRE(revoked.status == 200);
  CHECK(eventually([&] { return chat_status(front->port(), t1["key"]) == 401; }, std::chrono::seconds(5)));
  const std::string version = config_of(a->port())["version"];
  REQUIRE(eventually([&] { return config_of(front->port())["version"] == version; }, std::chrono::seconds(5)));
  CHECK(config_of(front->port())["snapshots_received"].get<int>() >= 3);
  // The front lists each router node's configuration as its balancer last heard it.
  CHECK(eventually(
      [&] {
        const json c = config_of(front->port());
        return c["nodes"].size() == 1 && c["nodes"][0]["node"] == "a-control" && c["nodes"][0]["version"] == version &&
               c["nodes"][0]["source"] == "store" && c["converged"] == true;
      },
      std::chrono::seconds(3)));
  CHECK(config_of(front->port())["snapshots_refused"] == 0);

  // The control node goes away and the front restarts: it serves from its last-known-good
  // (ops-two is known: no region answers, 503; ops-one stays revoked: 401).
  front->signal(SIGTERM);
  CHECK(front->wait_exit(10000) == 0);
  a->signal(SIGKILL);
  a->wait_exit(5000);
  // With no region to reach it never turns ready: a fixed port, and it answers meanwhile.
  const int http = free_port();
  front = std::make_unique<kiln_process>(front_node(pf, pa), process_options{"", 0, http, front_store, ""});
  REQUIRE(eventually([&] { return !config_of(http).empty(); }, std::chrono::seconds(10)));
  {
    const json c = config_of(front->port());
    CHECK(c["source"] == "last-known-good");
    CHECK(c["version"] == version);
    CHECK(c["origin"] == "a-control");
  }
  CHECK(chat_status(front->port(), t2["key"]) == 503);
  CHECK(chat_status(front->port(), t1["key"]) == 401);
  // What needs the store waits for a control node, and says so.
  for (const auto& [method, path, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"PUT", "/admin/teams/ops-two/limits", R"({"model":"chat-7b","tokens_per_minute":100})"},
           {"POST", "/admin/teams", R"({"team":"later"})"}}) {
    CAPTURE(path);
    const auto r = request(front->port(), method, path, body, kAdmin);
    CHECK(r.status == 503);
    CHECK(r.body.find("changed on a control node, and wait while none is reachable") != std::string::npos);
  }

  // A corrupt last-known-good is not used: the config file's teams, and the reason.
  front->signal(SIGTERM);
  CHECK(front->wait_exit(10000) == 0);
  {
    std::fstream f(lkg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x01');
  }
  front = std::make_unique<kiln_process>(front_node(pf, pa), process_options{"", 0, http, front_store, ""});
  REQUIRE(eventually([&] { return !config_of(http).empty(); }, std::chrono::seconds(10)));
  {
    const json c = config_of(front->port());
    CHECK(c["source"] == "config");
    CHECK(c["last_error"].get<std::string>().find("checksum mismatch") != std::string::npos);
  }
  CHECK(chat_status(front->port(), t2["key"]) == 401);
  CHECK(chat_status(front->port(), "key-search") == 503);

  // The control node returns: the front follows it again (ops-two known once more).
  a = std::make_unique<kiln_process>(region_node(pa));
  CHECK(eventually([&] { return config_of(front->port()).value("source", "") == "control"; }, std::chrono::seconds(20)));
  front.reset();
  remove_store(front_store);
  std::filesystem::remove(lkg);
}

TEST_CASE("cluster config: a node whose cluster port is taken does not start, and says why") {
  const int port = free_port();
  CHECK(port < 32768);  // below the kernel's range for outgoing connections' own ports
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  std::string error;
  try {
    kiln_process k(region_node(port));
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  ::close(fd);
  MESSAGE(error);
  CHECK(error.find("kiln did not start") != std::string::npos);
  CHECK(error.find("cannot listen for nodes on 127.0.0.1:" + std::to_string(port)) != std::string::npos);
  // The port free again, the same node starts.
  kiln_process k(region_node(port));
  CHECK(k.port() > 0);
}
