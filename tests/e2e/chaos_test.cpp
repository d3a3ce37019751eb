// The chaos drill against the real binary: 500 concurrent streams over 8 sim replicas while
// 3 replicas are killed and 1 is frozen. Nothing may be lost or duplicated.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin"};

// 8 replicas of 16 batch slots each: most of the 500 requests queue for their first token,
// long enough for a kill to catch them there.
std::string drill_config() {
  std::string c = test_config(8);
  const std::string step = "max_tokens_per_step = 2048\nmax_running = 128";
  c.replace(c.find(step), step.size(), "max_tokens_per_step = 256\nmax_running = 16");
  const std::string text = "min_output_tokens = 200\nmax_output_tokens = 400\n";
  c.replace(c.find(text), text.size(), "min_output_tokens = 60\nmax_output_tokens = 160\n");
  return c;
}

std::vector<stream_spec> drill_requests(int n, const std::string& key) {
  std::vector<stream_spec> specs;
  for (int i = 0; i < n; ++i) {
    std::string words;
    for (int w = 0; w < 150; ++w) words += " word" + std::to_string((i * 7 + w) % 97);
    specs.push_back({"{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":200,\"temperature\":0.8,\"seed\":" +
                         std::to_string(1000 + i) + ",\"messages\":[{\"role\":\"user\",\"content\":\"drill " +
                         std::to_string(i) + words + "\"}]}",
                     {"Authorization: Bearer " + key}});
  }
  return specs;
}

void chaos(int port, const std::string& id, const std::string& action) {
  const http_response r = request(port, "POST", "/admin/chaos",
                                  "{\"target\":\"replica\",\"id\":\"" + id + "\",\"action\":\"" + action + "\",\"seconds\":5}",
                                  kAdmin);
  CHECK(r.status == 200);
}

}  // namespace

TEST_CASE("chaos e2e: 500 streams over 8 replicas, 3 replicas killed and 1 frozen: nothing lost, nothing duplicated") {
  kiln_process p(drill_config());
  // The undisturbed run gives every request's answer (the sim's answer is of prompt and seed).
  // The drill runs as another team, whose prefix cache is cold: prefill queues again.
  const auto reference = run_streams(p.port(), drill_requests(500, "key-search"), 120);
  const auto specs = drill_requests(500, "key-assistant");
  for (std::size_t i = 0; i < reference.size(); ++i) {
    CAPTURE(i);
    REQUIRE(reference[i].status == 200);
    REQUIRE(reference[i].finished);
    REQUIRE(reference[i].done);
  }
  std::thread drill([&] {
    // The first kill waits until r1 has requests queued for their first token.
    eventually([&] { return metric(p.port(), "kiln_engine_waiting_sequences{replica=\"chat-7b-v1-r1\"") >= 10; }, 30s);
    chaos(p.port(), "chat-7b-v1-r1", "kill");
    std::this_thread::sleep_for(100ms);
    chaos(p.port(), "chat-7b-v1-r6", "freeze");
    std::this_thread::sleep_for(200ms);
    chaos(p.port(), "chat-7b-v1-r3", "kill");
    std::this_thread::sleep_for(500ms);
    chaos(p.port(), "chat-7b-v1-r5", "kill");  // streams under way, and retried ones queued
  });
  const auto got = run_streams(p.port(), specs, 120);
  drill.join();

  int completed = 0, retried = 0, errored_mid_stream = 0, errored_before = 0, lost = 0, duplicated = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    const auto& g = got[i];
    const auto& ref = reference[i];
    CHECK(g.after_done == 0);
    if (g.terminals != 1 || (g.status == 200 && !g.done)) {
      ++lost;
      continue;
    }
    if (g.finished) {
      ++completed;
      if (g.attempts >= 2) ++retried;
      if (g.content != ref.content || g.completion_tokens != ref.completion_tokens) ++duplicated;
      continue;
    }
    // An error event mid-stream: what came before it is exactly the start of the answer.
    if (g.error_mid_stream) {
      ++errored_mid_stream;
      CHECK(g.error_code == "replica_lost");
      if (ref.content.compare(0, g.content.size(), g.content) != 0) ++duplicated;
    } else {
      ++errored_before;  // 503 before any token: only when the retry budget or every attempt ran out
      CHECK((g.error_code == "retry_budget_exhausted" || g.error_code == "replica_lost"));
    }
  }
  std::printf("chaos drill: requests=%zu completed=%d retried=%d errored_mid_stream=%d errored_before_first_token=%d "
              "lost=%d duplicated=%d\n",
              got.size(), completed, retried, errored_mid_stream, errored_before, lost, duplicated);
  CHECK(lost == 0);
  CHECK(duplicated == 0);
  CHECK(completed + errored_mid_stream + errored_before == 500);
  CHECK(retried > 0);             // the first kill caught requests before their first token
  CHECK(errored_mid_stream > 0);  // the last one caught streams under way

  // Afterwards: the killed replicas were started again and rejoined, the frozen one returned,
  // and nothing leaked.
  CHECK(eventually([&] {
    const json st = json::parse(request(p.port(), "GET", "/admin/pools/chat-7b/state", "", kAdmin).body);
    for (const auto& r : st["replicas"])
      if (r["state"] != "serving" || r["in_ranking"] != true) return false;
    return true;
  }, 15s));
  CHECK(metric(p.port(), "kiln_pool_restarts_total") == 3);
  CHECK(metric(p.port(), "kiln_replica_starts_total") == 8 + 3);
  CHECK(metric(p.port(), "kiln_open_streams") == 0);
  CHECK(metric(p.port(), "kiln_engine_running_sequences") == 0);
  CHECK(metric(p.port(), "kiln_engine_waiting_sequences") == 0);
  CHECK(metric(p.port(), "kiln_engine_tokens_in_flight") == 0);
  CHECK(metric(p.port(), "kiln_engine_kv_blocks_free") == metric(p.port(), "kiln_engine_kv_blocks"));
  const json st = json::parse(request(p.port(), "GET", "/admin/pools/chat-7b/state", "", kAdmin).body);
  CHECK(st["versions"][0]["active_requests"] == 0);
}
