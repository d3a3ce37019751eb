// A router node whose replicas run on worker nodes of its region (real processes on
// 127.0.0.1): requests served across the nodes; a worker killed under load: its streams that
// had tokens end with one error event, the others complete, and its replicas start again on
// the surviving worker.
#include <doctest/doctest.h>

#include <unistd.h>

#include <csignal>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The status of a version's pool as `kiln ops pool` shows it ("absent" when it has none).
std::string pool_status(int port, const std::string& model, const std::string& version) {
  const json j = json::parse(run_ops(port, "--json pool " + model).out, nullptr, false);
  if (!j.is_object() || !j.contains("versions")) return "";
  for (const auto& v : j["versions"])
    if (v["version"] == version) {
      if (v["status"] != "serving") return v["status"];
      for (const auto& r : v["replicas"])
        if (r["state"] != "serving") return "replicas " + r["state"].get<std::string>();
      return "serving";
    }
  return "absent";
}

std::string node_config(int replicas, const std::string& cluster) {
  std::string c = test_config(replicas, 2000, 400);
  c.replace(c.find("region = \"local\""), 16, "region = \"a\"");
  c.replace(c.find("max_running = 128"), 17, "max_running = 3");
  // Answers run to max_tokens: a stream lasts as long as the test needs it to.
  c.replace(c.find("min_output_tokens = 200"), 23, "min_output_tokens = 9000");
  c.replace(c.find("max_output_tokens = 400"), 23, "max_output_tokens = 9000");
  return c + "[cluster]\n" + cluster + "heartbeat_ms = 300\nconnection_timeout_ms = 1000\n";
}

// The router node dials its workers too: both are members before its replicas are placed.
std::string router_node(int port, int replicas, int w1, int w2) {
  return node_config(replicas, "node = \"a-router\"\nroles = [\"router\", \"control\"]\nlisten = \"127.0.0.1:" +
                                   std::to_string(port) + "\"\nseeds = [\"127.0.0.1:" + std::to_string(w1) +
                                   "\", \"127.0.0.1:" + std::to_string(w2) + "\"]\n");
}

std::string worker_node(const std::string& name, int port, int router_port) {
  return node_config(1, "node = \"" + name + "\"\nroles = [\"worker\"]\nlisten = \"127.0.0.1:" + std::to_string(port) +
                            "\"\nseeds = [\"127.0.0.1:" + std::to_string(router_port) + "\"]\n");
}

const std::vector<std::string> kTeam = {"Authorization: Bearer key-search", "Content-Type: application/json"};
const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin"};

std::string chat(int max_tokens, bool stream, const std::string& text) {
  return json{{"model", "chat-7b"}, {"stream", stream}, {"max_tokens", max_tokens},
              {"messages", {{{"role", "user"}, {"content", text}}}}}
      .dump();
}

// The replica ids a worker's log says it hosts (each start once).
std::multiset<std::string> hosted(const std::string& log_path) {
  std::ifstream in(log_path);
  std::multiset<std::string> ids;
  const std::regex line("kiln: worker: hosting replica (\\S+)");
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) ids.insert(m[1]);
  }
  return ids;
}

bool all_serving(int port, std::size_t replicas) {
  auto r = request(port, "GET", "/admin/pools/chat-7b/state", "", kAdmin);
  if (r.status != 200) return false;
  const json st = json::parse(r.body, nullptr, false);
  if (!st.contains("replicas") || st["replicas"].size() != replicas) return false;
  for (const auto& x : st["replicas"])
    if (x["state"] != "serving" || x["in_ranking"] != true) return false;
  return true;
}

}  // namespace

TEST_CASE("worker nodes: a router node's replicas run on its region's workers; a lost worker's start again on another") {
  const int pr = free_port(), p1 = free_port(), p2 = free_port();
  const std::string log1 = "/tmp/kiln_worker_test_" + std::to_string(::getpid()) + "_w1.log";
  const std::string log2 = "/tmp/kiln_worker_test_" + std::to_string(::getpid()) + "_w2.log";
  // Workers first: they dial the router node until it listens; it is ready once its replicas,
  // hosted on them, serve.
  auto w1 = std::make_unique<kiln_process>(worker_node("a-w1", p1, pr), process_options{log1, 0, 0, "", ""});
  auto w2 = std::make_unique<kiln_process>(worker_node("a-w2", p2, pr), process_options{log2, 0, 0, "", ""});
  kiln_process router(router_node(pr, 4, p1, p2));
  REQUIRE(eventually([&] { return all_serving(router.port(), 4); }, 20s));
  CHECK(eventually([&] { return metric(router.port(), "kiln_pool_ranked_replicas{model=\"chat-7b\",version=\"v1\"}") == 4; }, 3s));
  const auto on1 = hosted(log1), on2 = hosted(log2);
  MESSAGE("worker a-w1 hosts " << on1.size() << ", a-w2 hosts " << on2.size() << " of 4 replicas");
  CHECK(on1.size() + on2.size() == 4);

  // A worker node serves no requests itself: a clear 503 says where they go.
  auto at_worker = request(w1->port(), "POST", "/v1/chat/completions", chat(4, false, "to a worker"), kTeam);
  CHECK(at_worker.status == 503);
  CHECK(at_worker.body.find("is a worker node") != std::string::npos);
  CHECK(request(w1->port(), "GET", "/healthz", "", {}).status == 200);

  // A whole answer through the router node from a replica on a worker node.
  auto first = request(router.port(), "POST", "/v1/chat/completions", chat(8, false, "Hello from a worker"), kTeam);
  REQUIRE(first.status == 200);
  CHECK(json::parse(first.body)["usage"]["completion_tokens"] == 8);

  // Streams (distinct prompts: they spread over the replicas); the busier worker is killed
  // while some stream and some wait.
  const bool kill_first = on1.size() >= on2.size();
  std::vector<stream_spec> specs;
  for (int i = 0; i < 16; ++i) specs.push_back({chat(300, true, "stream " + std::to_string(i) + " of the worker test"), kTeam, i * 20});
  std::thread killer([&] {
    std::this_thread::sleep_for(1200ms);
    (kill_first ? w1 : w2)->signal(SIGKILL);
  });
  auto results = run_streams(router.port(), specs, 60);
  killer.join();
  int completed = 0, failed_mid_stream = 0, failed_before = 0;
  for (const auto& r : results) {
    CHECK(r.terminals == 1);  // exactly one end: a finish, one error event or one error answer
    CHECK(r.after_done == 0);
    if (r.status != 200) {
      // Waiting when its replica was lost, and no other could take it at once (the others full
      // or the retry budget spent): an error answer before any token, to retry.
      ++failed_before;
      CHECK(r.status == 503);
      CHECK(r.content.empty());
      CHECK(r.retry_after >= 1);
    } else if (r.error_mid_stream) {
      ++failed_mid_stream;
      CHECK(r.error_code == "replica_lost");
      CHECK_FALSE(r.content.empty());
    } else {
      CHECK(r.finished);
      CHECK(r.completion_tokens == 300);
      ++completed;
    }
  }
  MESSAGE("of 16 streams: " << failed_mid_stream << " lost mid-stream with the worker, " << failed_before
                            << " refused before a token, " << completed << " completed");
  CHECK(failed_mid_stream >= 1);
  if (!on1.empty() && !on2.empty()) CHECK(completed >= 1);  // the other worker's replicas served on
  CHECK(completed + failed_mid_stream + failed_before == 16);

  // The lost worker's replicas start again on the other; the pool serves with 4 again.
  CHECK(eventually([&] { return all_serving(router.port(), 4); }, 20s));
  const auto survivor = hosted(kill_first ? log2 : log1);
  const auto lost = kill_first ? on1 : on2;
  for (const auto& id : lost) CHECK(survivor.count(id) == 1);
  auto after = request(router.port(), "POST", "/v1/chat/completions", chat(5, false, "after the loss"), kTeam);
  REQUIRE(after.status == 200);
  CHECK(json::parse(after.body)["usage"]["completion_tokens"] == 5);
  CHECK(eventually([&] { return metric(router.port(), "kiln_open_streams") == 0; }, 5s));
  // A worker node stops on SIGTERM with its replicas; its stand-ins on the router node wait
  // for a worker again (the pool's replicas leave the ranking).
  auto& last = kill_first ? w2 : w1;
  last->signal(SIGTERM);
  CHECK(last->wait_exit(10000) == 0);
  CHECK(eventually([&] {
    auto r = request(router.port(), "GET", "/admin/pools/chat-7b/state", "", kAdmin);
    const json st = json::parse(r.body, nullptr, false);
    if (!st.contains("replicas")) return false;
    for (const auto& x : st["replicas"])
      if (x["in_ranking"] == true) return false;
    return true;
  }, 10s));
  auto none = request(router.port(), "POST", "/v1/chat/completions", chat(5, false, "no worker left"), kTeam);
  CHECK(none.status == 503);
  // The pool ranks none (serving or, past its restart intensity, degraded): the node reports
  // the model unhealthy, and a front passes its region over.
  const bool unranked = eventually([&] { return metric(router.port(), "kiln_pool_ranked_replicas{model=\"chat-7b\",version=\"v1\"}") == 0; }, 5s);
  if (!unranked) {
    const auto m = request(router.port(), "GET", "/metrics");
    for (std::size_t at = m.body.find("kiln_pool_"); at != std::string::npos; at = m.body.find("kiln_pool_", at + 1))
      if (m.body.compare(at - 1, 1, "\n") == 0) MESSAGE(m.body.substr(at, m.body.find('\n', at) - at));
    MESSAGE(request(router.port(), "GET", "/admin/pools/chat-7b/state", "", kAdmin).body);
  }
  CHECK(unranked);
  std::remove(log1.c_str());
  std::remove(log2.c_str());
}

TEST_CASE("worker nodes: a version registered at run time is pulled from the artifact endpoint and checked by the worker") {
  char tmpl[] = "/tmp/kiln-e2e-worker-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const int pr = free_port(), p1 = free_port();
  const std::string router_log = root + "/router.log";
  const std::string artifacts = "[artifacts]\ndir = \"" + root + "/art\"\ncache_dir = \"" + root + "/router-cache\"\n";
  // The router node makes the tiny model (its pool loads the tokenizer); the worker reads it.
  std::string rc = node_config(1, "node = \"a-router\"\nroles = [\"router\", \"control\"]\nlisten = \"127.0.0.1:" +
                                      std::to_string(pr) + "\"\nseeds = [\"127.0.0.1:" + std::to_string(p1) + "\"]\n");
  rc = rc.substr(0, rc.find("[cluster]")) + cpu_pool("tiny-chat", root + "/v1") + artifacts + rc.substr(rc.find("[cluster]"));
  const int http = free_port();
  kiln_process router(rc, process_options{router_log, 0, http, "", ""});
  REQUIRE(eventually([&] {
    return slurp(router_log).find("pool tiny-chat@v1: tokenizer and chat template loaded; replicas on worker nodes") !=
           std::string::npos;
  }, 30s));
  std::string wc = worker_node("a-w1", p1, pr);
  wc = wc.substr(0, wc.find("[cluster]")) + cpu_pool("tiny-chat", root + "/v1", false) + "[artifacts]\ncache_dir = \"" +
       root + "/worker-cache\"\n" + wc.substr(wc.find("[cluster]"));
  kiln_process worker(wc);
  REQUIRE(eventually([&] { return pool_status(http, "tiny-chat", "v1") == "serving"; }, 30s));
  // The weights are loaded where the engines run: on the worker, not on the router node.
  CHECK(request(http, "GET", "/metrics").body.find("kiln_cpu_kernels_info{model=\"tiny-chat\"") == std::string::npos);
  CHECK(request(worker.port(), "GET", "/metrics").body.find("kiln_replica_state{replica=\"tiny-chat-v1-r0\"") !=
        std::string::npos);

  // v2: the same weights under another name on the router node's artifact endpoint.
  fs::create_directories(root + "/art");
  fs::copy(root + "/v1", root + "/art/tiny-v2");
  auto reg = run_ops(http, "register tiny-chat v2 http://127.0.0.1:" + std::to_string(http) + "/artifacts/tiny-v2");
  REQUIRE_MESSAGE(reg.status == 0, reg.out);
  REQUIRE(run_ops(http, "rollout tiny-chat v2 canary 10").status == 0);
  REQUIRE(eventually([&] { return pool_status(http, "tiny-chat", "v2") == "serving"; }, 30s));
  // Served by a replica on the worker, from the worker's own pulled copy, checked there.
  auto pinned = request(http, "POST", "/v1/chat/completions",
                        "{\"model\":\"tiny-chat@v2\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                        {"Authorization: Bearer key-search"});
  REQUIRE(pinned.status == 200);
  CHECK(json::parse(pinned.body)["replica_id"] == "tiny-chat-v2-r0");
  const std::string pulled = root + "/worker-cache/tiny-chat/v2/model.safetensors";
  REQUIRE(fs::exists(pulled));
  CHECK(slurp(pulled) == slurp(root + "/v1/model.safetensors"));

  // The endpoint's file altered after registration, then the worker lost: the worker that
  // takes its replicas pulls v2 afresh and refuses it, naming the file; v1 moves and serves.
  {
    std::fstream f(root + "/art/tiny-v2/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  std::string w2c = worker_node("a-w2", free_port(), pr);
  w2c = w2c.substr(0, w2c.find("[cluster]")) + cpu_pool("tiny-chat", root + "/v1", false) + "[artifacts]\ncache_dir = \"" +
        root + "/worker2-cache\"\n" + w2c.substr(w2c.find("[cluster]"));
  kiln_process worker2(w2c);
  worker.signal(SIGKILL);
  CHECK(eventually([&] {
    const std::string log = slurp(router_log);
    return log.find("replica tiny-chat-v2-r0: not placed on a worker") != std::string::npos &&
           log.find("model.safetensors", log.find("replica tiny-chat-v2-r0: not placed")) != std::string::npos;
  }, 30s));
  CHECK(eventually([&] { return pool_status(http, "tiny-chat", "v1") == "serving"; }, 30s));
  CHECK_FALSE(fs::exists(root + "/worker2-cache/tiny-chat/v2/model.safetensors"));
  auto refused = request(http, "POST", "/v1/chat/completions",
                         "{\"model\":\"tiny-chat@v2\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                         {"Authorization: Bearer key-search"});
  CHECK(refused.status == 503);
  // The endpoint put right: the worker prepares v2 afresh when next asked, and it serves.
  {
    std::fstream f(root + "/art/tiny-v2/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put(slurp(root + "/v1/model.safetensors").back());
  }
  CHECK(eventually([&] { return pool_status(http, "tiny-chat", "v2") == "serving"; }, 30s));
  CHECK(slurp(root + "/worker2-cache/tiny-chat/v2/model.safetensors") == slurp(root + "/v1/model.safetensors"));
  auto live = request(http, "POST", "/v1/chat/completions",
                      "{\"model\":\"tiny-chat@v1\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                      {"Authorization: Bearer key-search"});
  CHECK(live.status == 200);
  // The router node stops cleanly (its loader's threads end before its actor system).
  router.signal(SIGTERM);
  CHECK(router.wait_exit(15000) == 0);
  fs::remove_all(root);
}
