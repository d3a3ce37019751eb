// A pool of `remote` replicas over loopback: one kiln process serves as the upstream (sim
// executor), another's pool calls it; a vLLM-speaking test server stands in where a test
// needs an upstream to misbehave on cue. Tenancy, routing, retry and metering stay kiln's.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/fake_upstream.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin"};
const std::vector<std::string> kSearch = {"Authorization: Bearer key-search", "Content-Type: application/json"};

std::string head(const std::string& region) {
  return "region = \"" + region + R"("
admin_key = "key-admin"
[server]
host = "127.0.0.1"
port = 0
shutdown_grace_ms = 300
[[teams]]
name = "search"
api_key = "key-search"
[[teams]]
name = "assistant"
api_key = "key-assistant"
)";
}

// The upstream: a kiln with a sim pool of its own (a short context, to see its errors).
std::string upstream_config(int replicas = 1) {
  return head("up") + "[[pools]]\nmodel = \"chat-7b\"\nversion = \"v1\"\nreplicas = " + std::to_string(replicas) +
         "\nmax_context = 512\n[pools.sim_text]\nmin_output_tokens = 200\nmax_output_tokens = 400\n";
}

std::string remote_pool(const std::vector<std::string>& upstreams, const std::string& extra = "") {
  std::string list;
  for (const auto& u : upstreams) list += (list.empty() ? "\"" : ", \"") + u + "\"";
  return "[[pools]]\nmodel = \"chat-7b\"\nversion = \"r1\"\nexecutor = \"remote\"\nupstreams = [" + list +
         "]\nupstream_model = \"served-model\"\nupstream_api_key = \"up-key\"\nheartbeat_ms = 200\n" + extra;
}

std::string front_config(const std::vector<std::string>& upstreams, const std::string& extra = "") {
  return head("local") + remote_pool(upstreams, extra);
}

// A front whose upstreams are kiln processes: they serve the model as chat-7b, under the key
// of one of their teams.
std::string front_of_kilns(const std::vector<std::string>& upstreams, const std::string& extra = "") {
  std::string cfg = front_config(upstreams, extra);
  cfg.replace(cfg.find("served-model"), 12, "chat-7b");
  cfg.replace(cfg.find("\"up-key\""), 8, "\"key-search\"");
  return cfg;
}

std::string url_of(const kiln_process& u) { return "http://127.0.0.1:" + std::to_string(u.port()) + "/v1"; }

std::string chat_body(const std::string& text, int max_tokens, bool stream, const std::string& model = "chat-7b");

// Sends a streamed chat on `c` and reads until a non-empty content delta came; what was read.
std::string first_content(http_conn& c, const std::string& body) {
  c.send_raw(make_request("POST", "/v1/chat/completions", body, kSearch));
  REQUIRE(c.read_head().status == 200);
  std::string seen;
  const std::string mark = "\"content\":\"";
  REQUIRE(eventually([&] {
    seen += c.read_some();
    for (auto at = seen.find(mark); at != std::string::npos; at = seen.find(mark, at + 1))
      if (at + mark.size() < seen.size() && seen[at + mark.size()] != '"') return true;
    return false;
  }, 5s));
  return seen;
}

std::string chat_body(const std::string& text, int max_tokens, bool stream, const std::string& model) {
  return json{{"model", model},
              {"stream", stream},
              {"max_tokens", max_tokens},
              {"seed", 5},
              {"messages", json::array({{{"role", "user"}, {"content", text}}})}}
      .dump();
}

json pool_state(int port) {
  const auto r = request(port, "GET", "/admin/pools/chat-7b/state", "", kAdmin);
  return json::parse(r.body, nullptr, false);
}

// Whether replica `id` of the front's pool is (or is not) in its router's ranking.
bool in_ranking(int port, const std::string& id) {
  const json s = pool_state(port);
  if (!s.is_object()) return false;
  for (const auto& r : s["replicas"])
    if (r.value("replica_id", "") == id) return r.value("in_ranking", false);
  return false;
}

void wait_serving(int port, const std::vector<std::string>& ids) {
  for (const auto& id : ids) REQUIRE_MESSAGE(eventually([&] { return in_ranking(port, id); }, 10s), id << " never ranked");
}

}  // namespace

TEST_CASE("a remote pool serves through kiln: streams with kiln's own framing, usage, errors, completions") {
  kiln_process upstream(upstream_config());
  kiln_process front(front_of_kilns({url_of(upstream)}));
  wait_serving(front.port(), {"chat-7b-r1-r0"});

  std::vector<stream_spec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back({chat_body("remote " + std::to_string(i), 12, true), kSearch});
  const auto via = run_streams(front.port(), specs, 30);
  const auto direct = run_streams(upstream.port(), specs, 30);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    CHECK(via[i].status == 200);
    CHECK(via[i].done);
    CHECK(via[i].finished);
    CHECK(via[i].terminals == 1);
    CHECK(via[i].after_done == 0);
    CHECK_FALSE(via[i].content.empty());
    CHECK(via[i].content == direct[i].content);  // the sim's answer is of prompt and seed
    CHECK(via[i].completion_tokens == 12);
    CHECK(via[i].prompt_tokens == direct[i].prompt_tokens);  // usage is the upstream's
    CHECK(via[i].replica_id == "chat-7b-r1-r0");  // kiln's framing, not the upstream's
    CHECK(via[i].region == "local");
    CHECK(direct[i].region == "up");
  }

  const auto whole = request(front.port(), "POST", "/v1/chat/completions", chat_body("remote 0", 12, false), kSearch);
  REQUIRE(whole.status == 200);
  const json j = json::parse(whole.body);
  CHECK(j["choices"][0]["message"]["content"] == via[0].content);
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 12);

  // The upstream's refusal (its context is 512 tokens) comes back as kiln's error object.
  const auto refused = request(front.port(), "POST", "/v1/chat/completions", chat_body("too long", 4000, false), kSearch);
  CHECK(refused.status == 400);
  const json e = json::parse(refused.body, nullptr, false);
  REQUIRE(e.is_object());
  CHECK(e["error"]["message"].get<std::string>().find("upstream") != std::string::npos);

  const auto completion = request(front.port(), "POST", "/v1/completions",
                                  R"({"model":"chat-7b","prompt":"once upon","max_tokens":5,"seed":1})", kSearch);
  CHECK(completion.status == 200);
  CHECK(json::parse(completion.body)["usage"]["completion_tokens"] == 5);

  // Tenancy and metering are kiln's: an unknown key never reaches the upstream; the team's
  // tokens are counted by the front.
  const auto stranger = request(front.port(), "POST", "/v1/chat/completions", chat_body("x", 5, false),
                                {"Authorization: Bearer nobody", "Content-Type: application/json"});
  CHECK(stranger.status == 401);
  CHECK(eventually([&] {
    return metric(front.port(), "kiln_team_tokens_total{team=\"search\",model=\"chat-7b\",kind=\"output\"}") == 4 * 12 + 12 + 5;
  }, 3s));
}

TEST_CASE("a vLLM-speaking upstream: what kiln sends, usage with cached tokens, polls, and a client that goes away") {
  fake_upstream fake;
  kiln_process front(front_config({fake.base_url()}));
  wait_serving(front.port(), {"chat-7b-r1-r0"});
  CHECK(fake.polls > 0);

  const auto r = request(front.port(), "POST", "/v1/chat/completions", chat_body("hello upstream", 16, false), kSearch);
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  CHECK(j["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 tok5 ");
  CHECK(j["usage"]["prompt_tokens"] == 11);
  CHECK(j["usage"]["completion_tokens"] == 6);
  CHECK(j["usage"]["prompt_tokens_details"]["cached_tokens"] == 3);
  const json sent = json::parse(fake.last_body());
  CHECK(sent["model"] == "served-model");
  CHECK(sent["stream"] == true);
  CHECK(sent["stream_options"]["include_usage"] == true);
  CHECK(sent["max_tokens"] == 16);
  CHECK(sent["seed"] == 5);
  CHECK(sent["messages"][0]["content"] == "hello upstream");
  CHECK(fake.last_auth() == "Bearer up-key");
  // A completion goes as text; add_special_tokens travels only where the client turned it off.
  for (const bool specials : {true, false}) {
    const std::string body = std::string(R"({"model":"chat-7b","prompt":"plain text","max_tokens":3)") +
                             (specials ? "}" : R"(,"add_special_tokens":false})");
    REQUIRE(request(front.port(), "POST", "/v1/completions", body, kSearch).status == 200);
    const json went = json::parse(fake.last_body());
    CHECK(went["prompt"] == "plain text");
    CHECK(went.contains("add_special_tokens") == !specials);
    if (!specials) CHECK(went["add_special_tokens"] == false);
  }
  // Logit bias and penalties go upstream as sent; left out where the client left them out.
  CHECK_FALSE(sent.contains("logit_bias"));
  CHECK_FALSE(sent.contains("presence_penalty"));
  CHECK_FALSE(sent.contains("repetition_penalty"));
  REQUIRE(request(front.port(), "POST", "/v1/chat/completions",
                  R"({"model":"chat-7b","max_tokens":3,"presence_penalty":-0.5,"frequency_penalty":1.25,)"
                  R"("repetition_penalty":1.1,"logit_bias":{"50256":-100,"7":2.5},"min_tokens":2,"ignore_eos":true,"stop_token_ids":[9,4],)"
                  R"("messages":[{"role":"user","content":"x"}]})",
                  kSearch).status == 200);
  const json biased = json::parse(fake.last_body());
  CHECK(biased["presence_penalty"] == -0.5);
  CHECK(biased["frequency_penalty"] == 1.25);
  CHECK(biased["repetition_penalty"].get<double>() == doctest::Approx(1.1));
  CHECK(biased["logit_bias"] == json{{"7", 2.5}, {"50256", -100}});
  CHECK(biased["min_tokens"] == 2);
  CHECK(biased["ignore_eos"] == true);
  CHECK(biased["stop_token_ids"] == json{4, 9});
  CHECK_FALSE(sent.contains("min_tokens"));
  CHECK_FALSE(sent.contains("ignore_eos"));

  // A streaming client that vanishes: its upstream request closes at once.
  fake.tokens = 400;
  fake.token_delay_ms = 20;
  {
    http_conn c(front.port());
    first_content(c, chat_body("long", 400, true));
  }
  CHECK(eventually([&] { return fake.abandoned == 1; }, 3s));
  CHECK(fake.finished == 4);  // the two chats and the two completions above
}

TEST_CASE("an upstream that dies: retried elsewhere before the first token, one error event after it") {
  fake_upstream dead;  // closes every answer before its first token
  dead.die_after = 0;
  kiln_process upstream(upstream_config(2));
  kiln_process front(front_of_kilns({dead.base_url(), url_of(upstream)}, "routing = \"round_robin\"\n"));
  wait_serving(front.port(), {"chat-7b-r1-r0", "chat-7b-r1-r1"});
  std::vector<stream_spec> specs;
  // Spread out, so that retries in flight stay within the router's retry budget.
  for (int i = 0; i < 10; ++i) specs.push_back({chat_body("retry " + std::to_string(i), 8, true), kSearch, i * 150});
  const auto got = run_streams(front.port(), specs, 30);
  int retried = 0;
  for (const auto& g : got) {
    CHECK(g.status == 200);
    CHECK(g.done);
    CHECK(g.terminals == 1);
    CHECK(g.completion_tokens == 8);
    CHECK(g.replica_id == "chat-7b-r1-r1");
    if (g.attempts == 2) ++retried;
  }
  CHECK(dead.requests.load() >= 1);
  CHECK(retried == dead.requests.load());

  // Killed mid-stream (kill -9 of the upstream process): tokens already sent stand, one error
  // event ends the stream.
  kiln_process lone(upstream_config());
  kiln_process front2(front_of_kilns({url_of(lone)}));
  wait_serving(front2.port(), {"chat-7b-r1-r0"});
  http_conn c(front2.port(), 15000);
  std::string seen = first_content(c, chat_body("killed mid-stream", 400, true));
  lone.signal(SIGKILL);
  for (int i = 0; i < 200 && seen.find("[DONE]") == std::string::npos; ++i) {
    const std::string more = c.read_some();
    if (more.empty()) break;
    seen += more;
  }
  int errors = 0;
  int finishes = 0;
  for (const auto& d : sse_data(seen)) {
    const json ev = json::parse(d, nullptr, false);
    if (ev.is_object() && ev.contains("error")) ++errors;
    if (ev.is_object() && ev.contains("choices") && !ev["choices"].empty() && !ev["choices"][0]["finish_reason"].is_null())
      ++finishes;
  }
  CHECK(errors == 1);
  CHECK(finishes == 0);
}

TEST_CASE("an upstream that stops answering its health polls leaves the ranking, and returns") {
  fake_upstream a, b;
  kiln_process front(front_config({a.base_url(), b.base_url()}));
  wait_serving(front.port(), {"chat-7b-r1-r0", "chat-7b-r1-r1"});
  a.healthy = false;
  CHECK(eventually([&] { return !in_ranking(front.port(), "chat-7b-r1-r0"); }, 4s));
  CHECK(in_ranking(front.port(), "chat-7b-r1-r1"));
  const int a_before = a.requests;
  for (int i = 0; i < 6; ++i) {
    const auto r = request(front.port(), "POST", "/v1/chat/completions", chat_body("only b " + std::to_string(i), 4, false), kSearch);
    CHECK(r.status == 200);
  }
  CHECK(a.requests.load() == a_before);
  CHECK(b.requests.load() >= 6);
  a.healthy = true;
  CHECK(eventually([&] { return in_ranking(front.port(), "chat-7b-r1-r0"); }, 4s));
}

TEST_CASE("upstreams are listed, added and removed through the admin API") {
  fake_upstream a, b;
  kiln_process front(head("local") + remote_pool({a.base_url()}) +
                     "[[pools]]\nmodel = \"other\"\nversion = \"v1\"\n");
  wait_serving(front.port(), {"chat-7b-r1-r0"});
  const std::string path = "/admin/pools/chat-7b/r1/upstreams";
  auto list = [&] { return json::parse(request(front.port(), "GET", path, "", kAdmin).body, nullptr, false); };
  CHECK(list()["upstreams"].size() == 1);
  CHECK(list()["upstreams"][0]["url"] == a.base_url());

  auto added = request(front.port(), "POST", path, json{{"url", b.base_url()}}.dump(), kAdmin);
  CHECK(added.status == 201);
  CHECK(json::parse(added.body)["upstreams"].size() == 2);
  CHECK(request(front.port(), "POST", path, json{{"url", b.base_url()}}.dump(), kAdmin).status == 409);
  CHECK(request(front.port(), "POST", path, R"({"url":"ftp://x/v1"})", kAdmin).status == 400);
  CHECK(request(front.port(), "POST", path, R"({"uri":"http://x/v1"})", kAdmin).status == 400);
  CHECK(request(front.port(), "POST", path, "not json", kAdmin).status == 400);
  CHECK(request(front.port(), "POST", path, json{{"url", b.base_url()}}.dump(), kSearch).status == 403);
  CHECK(request(front.port(), "GET", "/admin/pools/other/v1/upstreams", "", kAdmin).status == 400);
  CHECK(request(front.port(), "GET", "/admin/pools/nope/v1/upstreams", "", kAdmin).status == 404);
  wait_serving(front.port(), {"chat-7b-r1-r1"});

  auto removed = request(front.port(), "DELETE", path, json{{"url", a.base_url()}}.dump(), kAdmin);
  CHECK(removed.status == 200);
  CHECK(eventually([&] { return list()["upstreams"].size() == 1; }, 5s));
  CHECK(list()["upstreams"][0]["replica_id"] == "chat-7b-r1-r1");
  CHECK(request(front.port(), "DELETE", path, json{{"url", a.base_url()}}.dump(), kAdmin).status == 404);
  CHECK(request(front.port(), "DELETE", path, json{{"url", b.base_url()}}.dump(), kAdmin).status == 409);
  const int a_before = a.requests;
  for (int i = 0; i < 4; ++i)
    CHECK(request(front.port(), "POST", "/v1/chat/completions", chat_body("after " + std::to_string(i), 4, false), kSearch).status == 200);
  CHECK(a.requests.load() == a_before);
  CHECK(b.requests.load() >= 4);
}

TEST_CASE("kiln behind kiln: a client that goes away ends its upstream request; a frozen upstream leaves the ranking, and returns") {
  kiln_process u1(upstream_config()), u2(upstream_config());
  kiln_process front(front_of_kilns({url_of(u1), url_of(u2)}));
  wait_serving(front.port(), {"chat-7b-r1-r0", "chat-7b-r1-r1"});

  auto gone = [&] {
    return metric(u1.port(), "kiln_requests_total{status=\"499\"}") + metric(u2.port(), "kiln_requests_total{status=\"499\"}");
  };
  {
    http_conn c(front.port());
    first_content(c, chat_body("walk away", 400, true));
  }
  CHECK(eventually([&] { return gone() == 1; }, 3s));  // the upstream saw its client (the front) go

  u1.signal(SIGSTOP);  // frozen: its health polls go unanswered
  CHECK(eventually([&] { return !in_ranking(front.port(), "chat-7b-r1-r0"); }, 4s));
  for (int i = 0; i < 4; ++i) {
    const auto r = request(front.port(), "POST", "/v1/chat/completions", chat_body("while frozen " + std::to_string(i), 4, false), kSearch);
    CHECK(r.status == 200);
    CHECK(json::parse(r.body, nullptr, false).value("replica_id", "") == "chat-7b-r1-r1");
  }
  u1.signal(SIGCONT);
  CHECK(eventually([&] { return in_ranking(front.port(), "chat-7b-r1-r0"); }, 4s));
}

TEST_CASE("upstreams changed through the admin API are what a restarted node serves from") {
  fake_upstream a, b;
  char tmpl[] = "/tmp/kiln-remote-store-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  process_options opts;
  opts.store = dir + "/kiln.db";
  const std::string cfg = front_config({a.base_url()});
  const std::string path = "/admin/pools/chat-7b/r1/upstreams";
  auto list = [&](int port) { return json::parse(request(port, "GET", path, "", kAdmin).body, nullptr, false)["upstreams"]; };
  {
    kiln_process front(cfg, opts);
    wait_serving(front.port(), {"chat-7b-r1-r0"});
    REQUIRE(request(front.port(), "POST", path, json{{"url", b.base_url()}}.dump(), kAdmin).status == 201);
    REQUIRE(request(front.port(), "DELETE", path, json{{"url", a.base_url()}}.dump(), kAdmin).status == 200);
    CHECK(list(front.port()).size() == 1);
  }
  {
    kiln_process front(cfg, opts);  // the config still names a only
    wait_serving(front.port(), {"chat-7b-r1-r0"});
    const json now = list(front.port());
    REQUIRE(now.size() == 1);
    CHECK(now[0]["url"] == b.base_url());
    const int a_before = a.requests.load();
    CHECK(request(front.port(), "POST", "/v1/chat/completions", chat_body("after restart", 4, false), kSearch).status == 200);
    CHECK(a.requests.load() == a_before);
    CHECK(b.requests.load() >= 1);
  }
  remove_store(opts.store);
  std::filesystem::remove_all(dir);
}
