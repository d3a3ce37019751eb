// Tenancy against the real binary: the store made at first start, keys only as hashes, and the
// store as the source of truth afterwards.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "config/store.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;

namespace {

std::string chat_body() {
  return R"({"model":"chat-7b","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})";
}

int chat_status(int port, const std::string& key) {
  return request(port, "POST", "/v1/chat/completions", chat_body(), {"Authorization: Bearer " + key}).status;
}

/// The first column of the first row, by Debian's sqlite3 CLI ("" without it).
std::string sqlite_one(const std::string& db, const std::string& sql) {
  FILE* p = ::popen(("sqlite3 '" + db + "' \"" + sql + "\" 2>/dev/null").c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("tenancy e2e: the store is made at first start with hashed keys, and is the source of truth after") {
  const std::string store = (std::filesystem::temp_directory_path() / ("kiln-e2e-store-" + std::to_string(::getpid()) + ".db")).string();
  {
    kiln_process p(test_config(1), {"", 0, 0, store, ""});
    CHECK(chat_status(p.port(), "key-search") == 200);
    CHECK(chat_status(p.port(), "key-nope") == 401);
  }
  std::ifstream f(store, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(bytes.empty());
  CHECK(bytes.find("key-search") == std::string::npos);  // never in clear
  if (::access("/usr/bin/sqlite3", X_OK) == 0) {
    CHECK(sqlite_one(store, "select count(*) from teams") == "2");
    CHECK(sqlite_one(store, "select length(key_hash) from api_keys where team='search'") == "64");
    CHECK(sqlite_one(store, "pragma user_version") == std::to_string(kiln::config::store::kSchemaVersion));
  } else {
    MESSAGE("sqlite3 CLI not installed: the rows were not read back");
  }
  // The next start reads the store: the config's changed key does not replace the stored one.
  std::string changed = test_config(1);
  changed.replace(changed.find("api_key = \"key-search\""), 22, "api_key = \"key-search-2\"");
  {
    kiln_process p(changed, {"", 0, 0, store, ""});
    CHECK(chat_status(p.port(), "key-search") == 200);
    CHECK(chat_status(p.port(), "key-search-2") == 401);
  }
  remove_store(store);
}

TEST_CASE("tenancy e2e: a store that cannot be opened stops kiln with one clear line") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("kiln-e2e-nostore-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string cfg = dir + "/kiln.toml";
  std::ofstream(cfg) << test_config(1);
  // A directory where the file should be.
  const std::string cmd = std::string(kiln_binary()) + " serve --config " + cfg + " --port 0 --store " + dir + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  CHECK(WEXITSTATUS(::pclose(p)) == 1);
  CHECK(out.find("kiln: cannot open store " + dir) != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("tenancy e2e: over its tokens per minute a team gets 429 with Retry-After; answers carry x-ratelimit headers") {
  std::string cfg = test_config(2);
  // search: 600 tokens a minute, a bucket of 300; assistant: no limit.
  cfg.replace(cfg.find("api_key = \"key-search\"\n"), 23,
              "api_key = \"key-search\"\n[[teams.limits]]\nmodel = \"chat-7b\"\ntokens_per_minute = 600\nburst = 300\n");
  kiln_process p(cfg);
  auto body = [](int max_tokens) {
    return R"({"model":"chat-7b","max_tokens":)" + std::to_string(max_tokens) +
           R"(,"messages":[{"role":"user","content":"hi"}]})";
  };
  const http_response ok = request(p.port(), "POST", "/v1/chat/completions", body(200), {"Authorization: Bearer key-search"});
  REQUIRE(ok.status == 200);
  CHECK(ok.headers.at("x-ratelimit-limit-tokens") == "600");
  const int remaining = std::stoi(ok.headers.at("x-ratelimit-remaining-tokens"));
  CHECK(remaining < 100);  // 300 less the charge (prompt + 200)
  CHECK(ok.headers.count("x-ratelimit-reset-tokens") == 1);
  const http_response over = request(p.port(), "POST", "/v1/chat/completions", body(250), {"Authorization: Bearer key-search"});
  REQUIRE(over.status == 429);
  CHECK(std::stoi(over.headers.at("retry-after")) > 0);
  CHECK(over.headers.at("x-ratelimit-limit-tokens") == "600");
  CHECK(over.body.find("\"type\":\"requests\"") != std::string::npos);
  CHECK(over.body.find("\"code\":\"rate_limit_exceeded\"") != std::string::npos);
  CHECK(over.body.find("tokens_per_minute") != std::string::npos);
  // A request that can never fit the bucket: 400 naming max_tokens.
  const http_response huge = request(p.port(), "POST", "/v1/chat/completions", body(1000), {"Authorization: Bearer key-search"});
  CHECK(huge.status == 400);
  CHECK(huge.body.find("\"param\":\"max_tokens\"") != std::string::npos);
  // The other team is not limited and gets no limit headers.
  const http_response other = request(p.port(), "POST", "/v1/chat/completions", body(250), {"Authorization: Bearer key-assistant"});
  CHECK(other.status == 200);
  CHECK(other.headers.count("x-ratelimit-limit-tokens") == 0);
  // Streams carry the headers too.
  const http_response stream = request(p.port(), "POST", "/v1/chat/completions",
                                       R"({"model":"chat-7b","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]})",
                                       {"Authorization: Bearer key-search"});
  if (stream.status == 200) CHECK(stream.headers.at("x-ratelimit-limit-tokens") == "600");
  else CHECK(stream.status == 429);
}

TEST_CASE("tenancy e2e: a team key on every admin route gets 403, no key 401; errors name no other team") {
  kiln_process p(test_config(1));
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/admin/pools/chat-7b/state"},         {"PUT", "/admin/replicas/chat-7b-v1-r0/drain"},
      {"POST", "/admin/chaos"},                      {"GET", "/admin/teams/assistant/limits"},
      {"PUT", "/admin/teams/assistant/limits"},      {"POST", "/admin/teams"},
      {"DELETE", "/admin/teams/assistant/keys/k1"},  {"GET", "/admin/teams/assistant/usage"}};
  for (const auto& [method, path] : routes) {
    CAPTURE(method + " " + path);
    const http_response forbidden = request(p.port(), method, path, "{}", {"Authorization: Bearer key-search"});
    CHECK(forbidden.status == 403);
    CHECK(forbidden.body.find("assistant") == std::string::npos);
    CHECK(request(p.port(), method, path, "{}").status == 401);
  }
}

TEST_CASE("tenancy e2e: limits change live through the admin API; new teams get a key once; revoked keys stop working") {
  kiln_process p(test_config(1));
  const std::vector<std::string> admin = {"Authorization: Bearer key-admin"};
  const std::string chat = R"({"model":"chat-7b","max_tokens":250,"messages":[{"role":"user","content":"hi"}]})";
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat, {"Authorization: Bearer key-search"}).status == 200);
  const http_response put = request(p.port(), "PUT", "/admin/teams/search/limits",
                                    R"({"model":"chat-7b","tokens_per_minute":600,"burst":300,"max_concurrency":5})", admin);
  REQUIRE(put.status == 200);
  CHECK(put.body.find("\"tokens_per_minute\":600") != std::string::npos);
  CHECK(request(p.port(), "GET", "/admin/teams/search/limits", "", admin).body == put.body);
  // At once, no restart: one request fits the 300-token bucket, the next does not.
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat, {"Authorization: Bearer key-search"}).status == 200);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat, {"Authorization: Bearer key-search"}).status == 429);
  // Bad limits: 400 naming the field; an unknown team: 404.
  CHECK(request(p.port(), "PUT", "/admin/teams/search/limits", R"({"model":"chat-7b","guaranteed_share":1.5})", admin).status == 400);
  CHECK(request(p.port(), "PUT", "/admin/teams/search/limits", R"({"tokens_per_minute":5})", admin).status == 400);
  CHECK(request(p.port(), "PUT", "/admin/teams/nobody/limits", R"({"model":"chat-7b"})", admin).status == 404);
  // A new team: its key is shown once and works at once; revoked, it stops working.
  const http_response made = request(p.port(), "POST", "/admin/teams", R"({"team":"ml-eval","max_priority":"batch"})", admin);
  REQUIRE(made.status == 201);
  const auto key_at = made.body.find("\"key\":\"") + 7;
  const std::string key = made.body.substr(key_at, made.body.find('"', key_at) - key_at);
  const auto id_at = made.body.find("\"key_id\":\"") + 10;
  const std::string key_id = made.body.substr(id_at, made.body.find('"', id_at) - id_at);
  CHECK(key.rfind("kiln-", 0) == 0);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat, {"Authorization: Bearer " + key}).status == 200);
  CHECK(request(p.port(), "POST", "/admin/teams", R"({"team":"ml-eval"})", admin).status == 400);
  CHECK(request(p.port(), "POST", "/admin/teams", R"({"team":"bad name!"})", admin).status == 400);
  CHECK(request(p.port(), "DELETE", "/admin/teams/ml-eval/keys/" + key_id, "", admin).status == 200);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat, {"Authorization: Bearer " + key}).status == 401);
  CHECK(request(p.port(), "DELETE", "/admin/teams/ml-eval/keys/" + key_id, "", admin).status == 404);
  // The store holds it all, for the next start.
  if (::access("/usr/bin/sqlite3", X_OK) == 0) {
    CHECK(sqlite_one(p.store_path(), "select max_priority from teams where team='ml-eval'") == "batch");
    CHECK(sqlite_one(p.store_path(), "select tokens_per_minute from team_limits where team='search'") == "600.0");
    CHECK(sqlite_one(p.store_path(), "select count(*) from api_keys where team='ml-eval' and revoked_at is not null") == "1");
  }
}

#include <signal.h>

#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/stream_client.hpp"

TEST_CASE("tenancy e2e: kill -9 mid-load and restart: the usage rows equal the tokens clients received") {
  const std::string store =
      (std::filesystem::temp_directory_path() / ("kiln-e2e-crash-" + std::to_string(::getpid()) + ".db")).string();
  std::string cfg = test_config(2);
  cfg.replace(cfg.find("[[pools]]"), 9, "[[teams]]\nname = \"ml\"\napi_key = \"key-ml\"\n[[pools]]");
  const std::vector<std::string> teams = {"search", "assistant", "ml"};
  std::vector<stream_spec> specs;
  std::vector<std::string> team_of;
  for (int i = 0; i < 90; ++i) {
    const std::string& team = teams[static_cast<std::size_t>(i % 3)];
    // Some answers end early, some are cut by the kill.
    const int max_tokens = 20 + (i * 37) % 280;
    specs.push_back({"{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":" + std::to_string(max_tokens) +
                         ",\"messages\":[{\"role\":\"user\",\"content\":\"crash " + std::to_string(i) + "\"}]}",
                     {"Authorization: Bearer key-" + team}});
    team_of.push_back(team);
  }
  std::vector<stream_result> got;
  {
    kiln_process p(cfg, {"", 0, 0, store, ""});
    std::thread load([&] { got = run_streams(p.port(), specs, 20); });
    std::this_thread::sleep_for(std::chrono::milliseconds(900));
    p.signal(SIGKILL);
    load.join();
  }
  std::map<std::string, std::int64_t> output, prompt, requests;
  // Cut streams that had tokens: one whose record was made durable just before the kill lost
  // its end on the way out (its tokens had all been sent); it is counted, at most these.
  std::map<std::string, std::int64_t> cut_streams, cut_max_tokens;
  int completed = 0, cut = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].finished && got[i].done && got[i].completion_tokens >= 0) {
      output[team_of[i]] += got[i].completion_tokens;
      prompt[team_of[i]] += got[i].prompt_tokens;
      ++requests[team_of[i]];
      ++completed;
    } else {
      ++cut;
      if (!got[i].content.empty()) {
        ++cut_streams[team_of[i]];
        cut_max_tokens[team_of[i]] += 20 + (static_cast<int>(i) * 37) % 280;
      }
    }
  }
  MESSAGE("completed " << completed << ", cut by the kill " << cut);
  REQUIRE(completed > 0);
  REQUIRE(cut > 0);
  // The next start replays the usage log into the store.
  kiln_process p(cfg, {"", 0, 0, store, ""});
  for (const auto& team : teams) {
    CAPTURE(team);
    nlohmann::json rows;
    const bool folded = eventually(
        [&] {
          const http_response r = request(p.port(), "GET", "/admin/teams/" + team + "/usage", "",
                                          {"Authorization: Bearer key-admin"});
          rows = nlohmann::json::parse(r.body, nullptr, false)["usage"];
          return rows.is_array() && !rows.empty();
        },
        std::chrono::seconds(10));
    REQUIRE(folded);
    std::int64_t out = 0, in = 0, n = 0;
    for (const auto& row : rows) {
      out += row["output_tokens"].get<std::int64_t>();
      in += row["prompt_tokens"].get<std::int64_t>();
      n += row["requests"].get<std::int64_t>();
    }
    // Every end a client saw is counted; beyond those, only requests cut in the window between
    // their record and their end (none, in most runs).
    CHECK(n >= requests[team]);
    CHECK(n - requests[team] <= cut_streams[team]);
    CHECK(out >= output[team]);
    CHECK(out - output[team] <= cut_max_tokens[team]);
    CHECK(in >= prompt[team]);
    if (n == requests[team]) {
      CHECK(out == output[team]);
      CHECK(in == prompt[team]);
    } else {
      MESSAGE((n - requests[team]) << " request(s) of " << team << " recorded whose end the kill stopped on its way out");
    }
    if (::access("/usr/bin/sqlite3", X_OK) == 0)  // the rows are in the file, for anyone to read
      CHECK(sqlite_one(store, "select sum(output_tokens) from usage where team='" + team + "'") == std::to_string(out));
  }
  remove_store(store);
}

TEST_CASE("tenancy e2e: /metrics has per-team tokens, statuses, bucket fill, and per-pool latency and cost") {
  std::string cfg = test_config(2);
  cfg.replace(cfg.find("api_key = \"key-search\"\n"), 23,
              "api_key = \"key-search\"\n[[teams.limits]]\nmodel = \"chat-7b\"\ntokens_per_minute = 600\nburst = 300\n");
  kiln_process p(cfg);
  const std::string body = R"({"model":"chat-7b","stream":true,"max_tokens":200,"messages":[{"role":"user","content":"hi"}]})";
  CHECK(request(p.port(), "POST", "/v1/chat/completions", body, {"Authorization: Bearer key-search"}).status == 200);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", body, {"Authorization: Bearer key-search"}).status == 429);
  const http_response done = request(p.port(), "POST", "/v1/chat/completions", body, {"Authorization: Bearer key-assistant"});
  REQUIRE(done.status == 200);
  const std::string m = request(p.port(), "GET", "/metrics").body;
  CHECK(metric_sum(m, "kiln_team_requests_total{team=\"search\",model=\"chat-7b\",status=\"200\"}") == 1);
  CHECK(metric_sum(m, "kiln_team_requests_total{team=\"search\",model=\"chat-7b\",status=\"429\"}") == 1);
  CHECK(metric_sum(m, "kiln_team_tokens_total{team=\"search\",model=\"chat-7b\",kind=\"output\"}") == 200);
  CHECK(metric_sum(m, "kiln_team_tokens_total{team=\"assistant\",model=\"chat-7b\",kind=\"output\"}") == 200);
  const double fill = metric_sum(m, "kiln_team_bucket_fill{team=\"search\"");
  CHECK(fill > 0);
  CHECK(fill < 0.5);
  CHECK(metric_sum(m, "kiln_ttft_seconds_count{model=\"chat-7b\"}") == 2);
  CHECK(metric_sum(m, "kiln_time_per_output_token_seconds_count{model=\"chat-7b\"}") == 2);
  CHECK(metric_sum(m, "kiln_model_usd_per_million_tokens{model=\"chat-7b\"}") > 0);
  CHECK(m.find("kiln_pool_prefix_hit_rate{model=\"chat-7b\",version=\"v1\"}") != std::string::npos);
  CHECK(m.find("kiln_pool_queue_depth{pool=\"chat-7b@v1\",tier=\"batch\"} 0") != std::string::npos);
}
