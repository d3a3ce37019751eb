#include <doctest/doctest.h>

#include <string>

#include "config/config.hpp"

using namespace kiln::config;

namespace {

const std::string kBase = R"(
region = "a"
[[teams]]
name = "t"
api_key = "k"
[[pools]]
model = "m"
version = "v"
)";

std::string error_of(const std::string& cluster) {
  auto r = parse_config(kBase + cluster, "n.toml");
  auto* e = std::get_if<config_error>(&r);
  return e ? e->message : std::string();
}

kiln_config parsed(const std::string& cluster) {
  auto r = parse_config(kBase + cluster, "n.toml");
  if (auto* e = std::get_if<config_error>(&r)) FAIL(e->message);
  return std::get<kiln_config>(r);
}

}  // namespace

TEST_CASE("cluster config: absent, the node is alone with every role and its own region first") {
  auto c = parsed("");
  CHECK_FALSE(c.cluster.clustered());
  CHECK(c.cluster.roles == all_roles);
  CHECK(c.cluster.node == "a");
  CHECK(c.cluster.regions == std::vector<std::string>{"a"});
}

TEST_CASE("cluster config: a front node with seeds and a region preference; a region node") {
  auto f = parsed(R"(
[cluster]
node = "front-1"
roles = ["front"]
listen = "127.0.0.1:7401"
seeds = ["127.0.0.1:7402", "localhost:65535"]
regions = ["b", "a"]
heartbeat_ms = 200
connection_timeout_ms = 700
)");
  CHECK(f.cluster.clustered());
  CHECK(f.cluster.node == "front-1");
  CHECK(f.cluster.has(node_role::front));
  CHECK_FALSE(f.cluster.has(node_role::router));
  CHECK(f.cluster.listen.str() == "127.0.0.1:7401");
  REQUIRE(f.cluster.seeds.size() == 2);
  CHECK(f.cluster.seeds[1].host == "localhost");
  CHECK(f.cluster.seeds[1].port == 65535);
  // Its own region is listed, so the order stays as written.
  CHECK(f.cluster.regions == std::vector<std::string>{"b", "a"});
  CHECK(f.cluster.heartbeat_ms == 200);
  CHECK(f.cluster.connection_timeout_ms == 700);

  auto r = parsed("[cluster]\nroles = [\"router\", \"worker\", \"control\"]\nlisten = \"127.0.0.1:1\"\nregions = [\"b\"]\n");
  CHECK_FALSE(r.cluster.has(node_role::front));
  CHECK(r.cluster.has(node_role::control));
  CHECK(r.cluster.regions == std::vector<std::string>{"a", "b"});
  CHECK(r.cluster.seeds.empty());
}

TEST_CASE("cluster config: bad entries give one line naming the key") {
  CHECK(error_of("[cluster]\nroles = [\"front\", \"gpu\"]\nlisten = \"h:1\"\nseeds = [\"h:2\"]\n") ==
        "n.toml: cluster.roles has an unknown role \"gpu\" (front, router, worker, control)");
  CHECK(error_of("[cluster]\nroles = []\nlisten = \"h:1\"\n") == "n.toml: cluster.roles must name at least one role");
  CHECK(error_of("[cluster]\nroles = \"front\"\n") == "n.toml: cluster.roles must be an array of strings");
  CHECK(error_of("[cluster]\nseeds = [1]\nlisten = \"h:1\"\n") == "n.toml: cluster.seeds must be an array of strings");
  // Ports: 1 and 65535 are ports, 0 and 65536 are not; a host is required.
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\n").empty());
  CHECK(error_of("[cluster]\nlisten = \"h:65535\"\n").empty());
  CHECK(error_of("[cluster]\nlisten = \"h:0\"\n") ==
        "n.toml: cluster.listen must be host:port with a port from 1 to 65535 (got \"h:0\")");
  CHECK(error_of("[cluster]\nlisten = \"h:65536\"\n").find("cluster.listen must be host:port") != std::string::npos);
  CHECK(error_of("[cluster]\nlisten = \":80\"\n").find("cluster.listen must be host:port") != std::string::npos);
  CHECK(error_of("[cluster]\nlisten = \"h:8x\"\n").find("cluster.listen must be host:port") != std::string::npos);
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\nseeds = [\"nope\"]\n") == "n.toml: cluster.seeds must hold host:port entries (got \"nope\")");
  CHECK(error_of("[cluster]\nseeds = [\"h:2\"]\n") == "n.toml: cluster.seeds needs cluster.listen");
  CHECK(error_of("[cluster]\nroles = [\"front\"]\n") ==
        "n.toml: cluster.roles needs cluster.listen (a node alone has every role)");
  CHECK(error_of("[cluster]\nroles = [\"front\"]\nlisten = \"h:1\"\n") ==
        "n.toml: cluster.seeds: a front-only node needs seeds to find its regions");
  // A router node apart from its control node finds it through seeds; a control node alone
  // is dialled by the others.
  CHECK(error_of("[cluster]\nroles = [\"router\"]\nlisten = \"h:1\"\n") ==
        "n.toml: cluster.seeds: a router node without the control role needs seeds to find its control node");
  CHECK(error_of("[cluster]\nroles = [\"front\", \"router\"]\nlisten = \"h:1\"\nseeds = [\"h:2\"]\n").empty());
  CHECK(error_of("[cluster]\nroles = [\"control\"]\nlisten = \"h:1\"\n").empty());
  CHECK(error_of("[cluster]\nroles = [\"control\", \"worker\"]\nlisten = \"h:1\"\nseeds = [\"h:2\"]\n").empty());
  // A router node whose replicas run on worker nodes; a worker node alone (with seeds).
  CHECK(error_of("[cluster]\nroles = [\"front\", \"router\", \"control\"]\nlisten = \"h:1\"\n").empty());
  CHECK(error_of("[cluster]\nroles = [\"worker\"]\nlisten = \"h:1\"\nseeds = [\"h:2\"]\n").empty());
  CHECK(error_of("[cluster]\nroles = [\"worker\"]\nlisten = \"h:1\"\n") ==
        "n.toml: cluster.seeds: a worker-only node needs seeds to find its region's router node");
  CHECK(error_of("[cluster]\nroles = [\"front\", \"worker\"]\nlisten = \"h:1\"\nseeds = [\"h:2\"]\n").find("runs no front") !=
        std::string::npos);
  // Heartbeats: the timeout must be longer than the interval (at the edge: equal fails).
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\nheartbeat_ms = 500\nconnection_timeout_ms = 500\n") ==
        "n.toml: cluster.connection_timeout_ms must be longer than cluster.heartbeat_ms");
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\nheartbeat_ms = 500\nconnection_timeout_ms = 501\n").empty());
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\nheartbeat_ms = 49\n").find("cluster.heartbeat_ms must be between 50") !=
        std::string::npos);
  CHECK(error_of("[cluster]\nlisten = \"h:1\"\nbogus = 1\n") == "n.toml: cluster.bogus: unknown key");
}
