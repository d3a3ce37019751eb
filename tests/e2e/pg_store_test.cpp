// Two kiln nodes on one PostgreSQL store (a real server of the test's own; skipped, with the
// reason, without Debian's postgresql package): what one node changes the other serves, and
// usage from both lands in one table without either node's watermark hiding the other's.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <csignal>
#include <chrono>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/pg_server.hpp"

using namespace kiln::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string node_config(const std::string& region, const std::string& log_dir) {
  std::string c = test_config(1, 2000, 400);
  c.replace(c.find("region = \"local\""), 16,
            "region = \"" + region + "\"\nusage_log = \"" + log_dir + "/" + region + ".usage\"");
  return c;
}

int chat(int port, const std::string& key, std::int64_t& output_tokens) {
  const auto r = request(port, "POST", "/v1/chat/completions",
                         R"({"model":"chat-7b","max_tokens":5,"messages":[{"role":"user","content":"shared store"}]})",
                         {"Authorization: Bearer " + key, "Content-Type: application/json"});
  if (r.status == 200) output_tokens += json::parse(r.body)["usage"]["completion_tokens"].get<std::int64_t>();
  return r.status;
}

}  // namespace

TEST_CASE("pg store e2e: two nodes share one PostgreSQL store: a team made on one serves on the other; usage from both adds up") {
  if (auto why = pg_server::unavailable(); !why.empty()) {
    MESSAGE("skipped: " << why);
    return;
  }
  pg_server pg;
  REQUIRE_MESSAGE(pg.error().empty(), pg.error());
  const std::string uri = pg.create_database("kiln_e2e");
  REQUIRE_MESSAGE(uri.rfind("postgresql://", 0) == 0, uri);
  char tmpl[] = "/tmp/kiln-e2e-pg-XXXXXX";
  const std::string logs = ::mkdtemp(tmpl);
  const process_options on_pg{"", 0, 0, uri, ""};
  std::int64_t output = 0;
  int requests = 0;
  {
    kiln_process a(node_config("a", logs), on_pg);  // seeds the new store from its config
    kiln_process b(node_config("b", logs), on_pg);  // finds it seeded
    CHECK(chat(a.port(), "key-search", output) == 200);
    CHECK(chat(b.port(), "key-search", output) == 200);
    requests += 2;

    // A team made through a: b reads the store again within a few seconds and serves its key.
    const auto made = request(a.port(), "POST", "/admin/teams", R"({"team":"gamma"})",
                              {"Authorization: Bearer key-admin", "Content-Type: application/json"});
    REQUIRE(made.status == 201);
    const std::string key = json::parse(made.body)["key"];
    std::int64_t gamma_output = 0;
    CHECK(chat(b.port(), key, gamma_output) == 401);  // not yet: b read the store at its start
    CHECK(eventually([&] { return chat(b.port(), key, gamma_output) == 200; }, std::chrono::seconds(8)));

    // More requests on a than on b: a's usage records run ahead of b's.
    for (int i = 0; i < 5; ++i) requests += chat(a.port(), "key-search", output) == 200;
    for (int i = 0; i < 2; ++i) requests += chat(b.port(), "key-search", output) == 200;
    // Each node's usage log is under its configured prefix (local disk), written within 100 ms.
    auto has_log = [&](const std::string& node) {
      for (const auto& e : fs::directory_iterator(logs))
        if (e.path().filename().string().rfind(node + ".usage", 0) == 0) return true;
      return false;
    };
    CHECK(eventually([&] { return has_log("a") && has_log("b"); }, std::chrono::seconds(3)));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    a.signal(SIGKILL);
    b.signal(SIGKILL);
    a.wait_exit(5000);
    b.wait_exit(5000);
  }
  // Both start again and fold their usage logs into the one store, each under its own
  // watermark: every request counted once.
  kiln_process a(node_config("a", logs), on_pg);
  kiln_process b(node_config("b", logs), on_pg);
  json rows;
  std::int64_t got_requests = 0, got_output = 0;
  const bool all = eventually(
      [&] {
        const auto r = request(a.port(), "GET", "/admin/teams/search/usage", "", {"Authorization: Bearer key-admin"});
        rows = json::parse(r.body, nullptr, false)["usage"];
        got_requests = got_output = 0;
        if (!rows.is_array()) return false;
        for (const auto& row : rows) {
          got_requests += row["requests"].get<std::int64_t>();
          got_output += row["output_tokens"].get<std::int64_t>();
        }
        return got_requests >= requests;
      },
      std::chrono::seconds(15));
  CHECK(all);
  CHECK(got_requests == requests);
  CHECK(got_output == output);
  fs::remove_all(logs);
}

TEST_CASE("pg store e2e: a team's tokens per minute hold across regions: the share follows where it is asked") {
  if (auto why = pg_server::unavailable(); !why.empty()) {
    MESSAGE("skipped: " << why);
    return;
  }
  pg_server pg;
  REQUIRE_MESSAGE(pg.error().empty(), pg.error());
  const std::string uri = pg.create_database("kiln_limits");
  REQUIRE_MESSAGE(uri.rfind("postgresql://", 0) == 0, uri);
  char tmpl[] = "/tmp/kiln-e2e-pg-XXXXXX";
  const std::string logs = ::mkdtemp(tmpl);
  const process_options on_pg{"", 0, 0, uri, ""};
  kiln_process a(node_config("a", logs), on_pg);
  kiln_process b(node_config("b", logs), on_pg);
  const double limit = 60000;
  REQUIRE(request(a.port(), "PUT", "/admin/teams/search/limits", R"({"model":"chat-7b","tokens_per_minute":60000})",
                  {"Authorization: Bearer key-admin", "Content-Type: application/json"})
              .status == 200);
  // The limit as each region applies it, from a request's x-ratelimit-limit-tokens.
  auto applied = [&](int port) {
    const auto r = request(port, "POST", "/v1/chat/completions",
                           R"({"model":"chat-7b","max_tokens":5,"messages":[{"role":"user","content":"share"}]})",
                           {"Authorization: Bearer key-search", "Content-Type: application/json"});
    if (r.status != 200 || !r.headers.count("x-ratelimit-limit-tokens")) return -static_cast<double>(r.status);
    return std::atof(r.headers.at("x-ratelimit-limit-tokens").c_str());
  };
  // Both regions hold the limit (b reads it from the store within seconds); both live and
  // asked alike (these requests only): each holds a part near half. What each region was asked
  // is measured over its own 5 s windows, which do not line up: a part may stray a fifth
  // from half, and the two parts, read moments apart, add up to the limit within a tenth.
  REQUIRE(eventually([&] { return applied(b.port()) > 0; }, std::chrono::seconds(8)));
  double part_a = 0, part_b = 0;
  CHECK(eventually(
      [&] {
        part_a = applied(a.port());
        part_b = applied(b.port());
        return std::abs(part_a - limit / 2) < 0.2 * limit && std::abs(part_b - limit / 2) < 0.2 * limit &&
               std::abs(part_a + part_b - limit) < 0.1 * limit;
      },
      std::chrono::seconds(15)));
  MESSAGE("asked alike: a applies " << part_a << ", b " << part_b << " tokens per minute of " << limit);
  // Demand in a only: a's share grows, b keeps its floor; together they stay the limit.
  std::atomic<bool> stop{false};
  std::thread load([&] {  // about 50 asks a second of 100+ tokens each: each stream is left at its head
    while (!stop) {
      http_conn c(a.port());
      c.send_raw(make_request("POST", "/v1/chat/completions",
                              R"({"model":"chat-7b","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"load"}]})",
                              {"Authorization: Bearer key-search", "Content-Type: application/json"}));
      c.read_head();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  double in_a = 0, in_b = 0;
  const bool moved = eventually(
      [&] {
        in_a = applied(a.port());
        in_b = applied(b.port());
        return in_a > 0.8 * limit && in_b > 0 && in_b < 0.2 * limit;
      },
      std::chrono::seconds(25));
  stop = true;
  load.join();
  MESSAGE("with demand in region a only: a applies " << in_a << ", b " << in_b << " tokens per minute of " << limit);
  CHECK(moved);
  CHECK(in_a + in_b == doctest::Approx(limit).epsilon(0.1));
  fs::remove_all(logs);
}
