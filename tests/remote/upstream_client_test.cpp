// The remote executor's upstream client against a vLLM-speaking test server over loopback:
// streams and their usage, keep-alive reuse and its bound, cancels, error statuses, an
// upstream dying mid-stream or going silent, and health polls with vLLM's metrics.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "engine/upstream_client.hpp"
#include "tests/support/fake_upstream.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

namespace up = kiln::engine::upstream;
using kiln::test::eventually;
using kiln::test::fake_upstream;
using namespace std::chrono_literals;

namespace {

// What the client handed out, per stream.
struct collected {
  std::mutex mu;
  std::map<std::uint64_t, std::vector<up::stream_event>> by_id;
  int calls = 0;

  up::client::events_fn sink() {
    return [this](std::vector<up::stream_event>&& ev) {
      std::lock_guard lock(mu);
      ++calls;
      for (auto& e : ev) by_id[e.id].push_back(std::move(e));
    };
  }
  std::vector<up::stream_event> of(std::uint64_t id) {
    std::lock_guard lock(mu);
    return by_id[id];
  }
  bool ended(std::uint64_t id) {
    std::lock_guard lock(mu);
    const auto& v = by_id[id];
    return !v.empty() && (v.back().failed || v.back().data.done);
  }
  std::string text(std::uint64_t id) {
    std::string s;
    for (const auto& e : of(id)) s += e.data.content;
    return s;
  }
};

up::client_options options_for(const std::string& url, int max_connections = 8) {
  up::client_options o;
  o.where = *up::parse_endpoint(url);
  o.api_key = "upstream-key";
  o.max_connections = max_connections;
  o.connect_timeout_ms = 1000;
  o.stall_timeout_ms = 5000;
  return o;
}

const std::string kChat = R"({"model":"fake","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]})";

}  // namespace

TEST_CASE("base URLs part into host, port and base path") {
  auto e = up::parse_endpoint("http://10.0.0.5:8000/v1/");
  REQUIRE(e);
  CHECK(e->host == "10.0.0.5");
  CHECK(e->port == 8000);
  CHECK(e->base == "/v1");
  auto bare = up::parse_endpoint("http://upstream");
  REQUIRE(bare);
  CHECK(bare->port == 80);
  CHECK(bare->base.empty());
  CHECK_FALSE(up::parse_endpoint("https://x:1/v1"));
  CHECK_FALSE(up::parse_endpoint("http://:80/v1"));
  CHECK_FALSE(up::parse_endpoint("http://x:99999/v1"));
  CHECK_FALSE(up::parse_endpoint("http://x:8a/v1"));
}

TEST_CASE("streams arrive whole with their usage, one after another on one kept-alive connection") {
  fake_upstream fake;
  collected got;
  {
    up::client c(options_for(fake.base_url()), got.sink());
    for (std::uint64_t id = 1; id <= 3; ++id) {
      c.start(id, "/chat/completions", kChat);
      REQUIRE(eventually([&] { return got.ended(id); }, 5s));
    }
    CHECK(c.snapshot().open == 1);
    CHECK(c.snapshot().busy == 0);
  }
  CHECK(fake.connections == 1);
  CHECK(fake.finished == 3);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    CHECK(got.text(id) == "tok0 tok1 tok2 tok3 tok4 tok5 ");
    const auto ev = got.of(id);
    bool usage = false, stop = false;
    for (const auto& e : ev) {
      CHECK_FALSE(e.failed);
      if (e.data.finish_reason == "stop") stop = true;
      if (e.data.has_usage) {
        usage = true;
        CHECK(e.data.prompt_tokens == 11);
        CHECK(e.data.completion_tokens == 6);
        CHECK(e.data.cached_tokens == 3);
      }
    }
    CHECK(usage);
    CHECK(stop);
    CHECK(ev.back().data.done);
  }
  CHECK(fake.last_auth() == "Bearer upstream-key");
}

TEST_CASE("no more connections than the bound: the rest queue and all finish") {
  fake_upstream fake;
  fake.token_delay_ms = 30;
  collected got;
  up::client c(options_for(fake.base_url(), 2), got.sink());
  for (std::uint64_t id = 1; id <= 5; ++id) c.start(id, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return c.snapshot().busy == 2; }, 3s));
  const auto mid = c.snapshot();
  CHECK(mid.open == 2);
  CHECK(mid.queued == 3);
  REQUIRE(eventually([&] {
    for (std::uint64_t id = 1; id <= 5; ++id)
      if (!got.ended(id)) return false;
    return true;
  }, 10s));
  CHECK(fake.connections == 2);
  CHECK(fake.finished == 5);
  CHECK(c.snapshot().queued == 0);
}

TEST_CASE("a cancel closes the stream's connection at once, and nothing more arrives for it") {
  fake_upstream fake;
  fake.tokens = 200;
  fake.token_delay_ms = 20;
  collected got;
  up::client c(options_for(fake.base_url()), got.sink());
  c.start(7, "/chat/completions", R"({"model":"fake","stream":true,"max_tokens":500,"messages":[]})");
  REQUIRE(eventually([&] { return !got.of(7).empty(); }, 3s));
  c.cancel(7);
  CHECK(eventually([&] { return fake.abandoned == 1; }, 3s));
  const auto seen = got.of(7).size();
  std::this_thread::sleep_for(100ms);
  CHECK(got.of(7).size() == seen);
  CHECK_FALSE(got.ended(7));
  CHECK(c.snapshot().open == 0);
  // A queued stream cancelled before it starts never reaches the upstream.
  up::client one(options_for(fake.base_url(), 1), got.sink());
  const int before = fake.requests;
  one.start(8, "/chat/completions", R"({"model":"fake","stream":true,"max_tokens":500,"messages":[]})");
  one.start(9, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return one.snapshot().queued == 1 && fake.requests == before + 1; }, 2s));
  one.cancel(9);
  one.cancel(8);
  std::this_thread::sleep_for(100ms);
  CHECK(fake.requests == before + 1);
  CHECK(one.snapshot().queued == 0);
}

TEST_CASE("error statuses, a death mid-stream, a refused connection and silence fail with what happened") {
  fake_upstream fake;
  collected got;
  auto opts = options_for(fake.base_url());
  opts.stall_timeout_ms = 300;
  up::client c(opts, got.sink());

  fake.status = 429;
  c.start(1, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(1); }, 3s));
  auto e = got.of(1).back();
  CHECK(e.failed);
  CHECK(e.why == up::failure::status);
  CHECK(e.http_status == 429);
  CHECK(e.message == "the fake upstream refuses");

  fake.status = 200;
  fake.die_after = 2;
  c.start(2, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(2); }, 3s));
  CHECK(got.text(2) == "tok0 tok1 ");
  e = got.of(2).back();
  CHECK(e.failed);
  CHECK(e.why == up::failure::broken);

  fake.die_after = -1;
  fake.token_delay_ms = 1000;
  c.start(3, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(3); }, 3s));
  CHECK(got.of(3).back().why == up::failure::stalled);

  fake.token_delay_ms = 2;
  fake.endless_event = true;  // a hostile upstream: held bytes stay bounded
  c.start(5, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(5); }, 5s));
  CHECK(got.of(5).back().why == up::failure::broken);
  CHECK(got.of(5).back().message.find("over 1 MiB") != std::string::npos);
  fake.endless_event = false;

  up::client nowhere(options_for("http://127.0.0.1:" + std::to_string(kiln::test::free_port()) + "/v1"), got.sink());
  nowhere.start(4, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(4); }, 3s));
  CHECK(got.of(4).back().why == up::failure::refused);
  CHECK(got.of(4).size() == 1);
}

TEST_CASE("a kept-alive connection the upstream closed while idle is replaced without failing the stream") {
  fake_upstream fake;
  fake.close_silently = true;
  collected got;
  up::client c(options_for(fake.base_url()), got.sink());
  c.start(1, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(1); }, 3s));
  std::this_thread::sleep_for(50ms);  // the upstream's close reaches the idle connection
  c.start(2, "/chat/completions", kChat);
  REQUIRE(eventually([&] { return got.ended(2); }, 3s));
  CHECK_FALSE(got.of(2).back().failed);
  CHECK(got.text(2) == "tok0 tok1 tok2 tok3 tok4 tok5 ");
  CHECK(fake.connections == 2);
}

TEST_CASE("health polls read /health and vLLM's metrics; an unhealthy or absent upstream is not ok") {
  fake_upstream fake;
  collected got;
  up::client c(options_for(fake.base_url()), got.sink());
  auto ask = [](up::client& cl) {
    std::promise<up::health> p;
    auto f = p.get_future();
    cl.poll([&p](up::health h) { p.set_value(std::move(h)); });
    return f.get();
  };
  auto h = ask(c);
  CHECK(h.ok);
  CHECK(h.load.running == 3);
  CHECK(h.load.waiting == 1);
  CHECK(h.load.kv_usage == doctest::Approx(0.25));
  fake.healthy = false;
  h = ask(c);
  CHECK_FALSE(h.ok);
  CHECK(h.error.find("503") != std::string::npos);
  up::client nowhere(options_for("http://127.0.0.1:" + std::to_string(kiln::test::free_port()) + "/v1"), got.sink());
  h = ask(nowhere);
  CHECK_FALSE(h.ok);
  CHECK_FALSE(h.error.empty());
}
