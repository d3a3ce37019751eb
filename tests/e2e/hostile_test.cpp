// kiln as a hostile client finds it: slow readers, descriptor exhaustion, HTTP/1.0 streams,
// odd transfer codings, request targets in absolute form, bodies without keys, health while
// draining, the access log of aborted requests, NaN in config, and /metrics under promtool.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

const std::vector<std::string> kAuth = {"Authorization: Bearer key-search"};

std::string chat(int max_tokens, bool stream = true) {
  return std::string("{\"model\":\"chat-7b\",\"stream\":") + (stream ? "true" : "false") +
         ",\"max_tokens\":" + std::to_string(max_tokens) + ",\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}]}";
}

// Steps of 0.2 ms: each stream produces 5,000 tokens a second, far more than a stalled client
// takes, yet a pace the front carries for a few streams. (Steps of no time at all would let the
// engines outrun the front itself, and what waits for the I/O thread then depends on how fast
// each thread happens to run, not on the per-connection cap these tests check.)
std::string fast_config(const std::string& server_lines, int grace_ms = 400) {
  std::string c = with_server(test_config(1, 400, grace_ms), server_lines);
  const std::string text = "min_output_tokens = 200\nmax_output_tokens = 400\n";
  c.replace(c.find(text), text.size(), "min_output_tokens = 30000\nmax_output_tokens = 30000\n");
  return c + "[pools.gpu]\nhbm_bytes_per_s = 1e18\nflops_per_s = 1e18\nfixed_step_s = 0.0002\n";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

// Reads what is left of a connection: true if the server has closed it (EOF or reset comes).
bool closed_soon(http_conn& c) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!c.read_some().empty())
    if (std::chrono::steady_clock::now() - t0 > 5s) return false;
  return std::chrono::steady_clock::now() - t0 < 5s;
}

long resident_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

// A client that sends a long streaming request, then never reads.
std::unique_ptr<http_conn> stalled_stream(int port) {
  auto c = std::make_unique<http_conn>(port, 10000, /*rcvbuf=*/4096);
  c->send_raw(make_request("POST", "/v1/chat/completions", chat(30000), kAuth));
  return c;
}

// The stalled-reader cases run with the actors on the I/O thread and beside it: with one
// thread for both, the engines' fast steps must still leave the I/O its turns.
const char* const kThreadModes[] = {"actors_on_io_thread = true\n", "actors_on_io_thread = false\nactor_threads = 1\n"};

}  // namespace

TEST_CASE("hostile: a client that stops reading loses its stream at the write deadline; slot and connection are freed") {
  for (const char* mode : kThreadModes) {
    CAPTURE(mode);
    // The cap is far above the whole answer: only the deadline can end this stream.
    kiln_process p(fast_config(std::string(mode) + "write_timeout_ms = 500\nmax_buffered_bytes = 67108864\n"));
    auto c = stalled_stream(p.port());
    REQUIRE(eventually([&] { return metric(p.port(), "kiln_open_streams") == 1; }, 5s));
    // Its socket fills, the write waits past the deadline, and the stream is cancelled.
    CHECK(eventually([&] { return metric(p.port(), "kiln_open_streams") == 0; }, 15s));
    CHECK(eventually([&] { return metric(p.port(), "kiln_engine_running_sequences") == 0; }, 5s));
    CHECK(metric(p.port(), "kiln_requests_total{status=\"499\"}") == 1);
    CHECK(closed_soon(*c));
    CHECK(request(p.port(), "POST", "/v1/chat/completions", chat(5, false), kAuth).status == 200);
  }
}

TEST_CASE("hostile: the per-connection buffer cap holds when the deadline is far away") {
  for (const char* mode : kThreadModes) {
    CAPTURE(mode);
    kiln_process p(fast_config(std::string(mode) + "write_timeout_ms = 600000\nmax_buffered_bytes = 65536\n"));
    const long rss0 = resident_kb(p.pid());
    // Eight readers that stop: each answer is about 5 MB, all produced within seconds.
    std::vector<std::unique_ptr<http_conn>> stalled;
    for (int i = 0; i < 8; ++i) stalled.push_back(stalled_stream(p.port()));
    // Each is dropped once 64 KB wait for it, long before its write deadline.
    CHECK(eventually([&] { return metric(p.port(), "kiln_requests_total{status=\"499\"}") == 8; }, 15s));
    CHECK(metric(p.port(), "kiln_open_streams") == 0);
    CHECK(eventually([&] { return metric(p.port(), "kiln_engine_running_sequences") == 0; }, 5s));
    const long grew_kb = resident_kb(p.pid()) - rss0;
    MESSAGE("kiln resident memory grew " << grew_kb << " kB with 8 stalled 5 MB streams; tokens streamed "
                                         << metric(p.port(), "kiln_tokens_streamed_total"));
    CHECK(grew_kb < 16 * 1024);  // without the cap: 8 x 5 MB of buffered answers
    for (auto& c : stalled) CHECK(closed_soon(*c));
  }
}

TEST_CASE("hostile: SIGTERM with a client that never reads: kiln still exits soon after the grace period") {
  kiln_process p(fast_config("write_timeout_ms = 600000\n", /*grace_ms=*/300));
  auto c = stalled_stream(p.port());
  REQUIRE(eventually([&] { return metric(p.port(), "kiln_open_streams") == 1; }, 5s));
  std::this_thread::sleep_for(500ms);  // its socket is full by now
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGTERM);
  CHECK(p.wait_exit(5000) == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);  // grace 0.3 s + at most 1 s to write the error
}

TEST_CASE("hostile: SIGTERM while clients keep reconnecting: kiln still exits soon after the grace period") {
  kiln_process p(fast_config("", /*grace_ms=*/300));
  const int port = p.port();
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0}, unavailable{0};
  // Four clients that open a new connection for every request, as fast as they are answered.
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&] {
      while (!stop.load()) {
        const auto r = request(port, "POST", "/v1/chat/completions", chat(3, false), kAuth);
        if (r.status == 200) ++answered;
        if (r.status == 503) ++unavailable;
        if (r.status == 0) std::this_thread::sleep_for(1ms);  // refused: the listener is gone
      }
    });
  REQUIRE(eventually([&] { return answered.load() > 20; }, 10s));
  const auto t0 = std::chrono::steady_clock::now();
  p.signal(SIGTERM);
  const int rc = p.wait_exit(10000);
  const auto took = std::chrono::steady_clock::now() - t0;
  stop = true;
  for (auto& c : clients) c.join();
  CHECK(rc == 0);
  CHECK(took < 3s);  // grace 0.3 s, then the listener closes and what is open ends
  CHECK(unavailable.load() > 0);  // while draining, new requests were told to go elsewhere
}

TEST_CASE("hostile: at the descriptor limit the accept loop backs off instead of spinning, and recovers") {
  const std::string log = temp_path("kiln-fd-log");
  // Idle connections keep their descriptors for 10 s: the limit stays reached while we watch.
  kiln_process p(test_config(1, /*request_timeout_ms=*/10000), {log, /*max_files=*/64, 0, "", ""});
  std::vector<std::unique_ptr<http_conn>> held;
  for (int i = 0; i < 90; ++i) held.push_back(std::make_unique<http_conn>(p.port(), 2000));
  std::this_thread::sleep_for(500ms);
  const double cpu0 = process_cpu_seconds(p.pid());
  std::this_thread::sleep_for(1500ms);
  const double busy = process_cpu_seconds(p.pid()) - cpu0;
  MESSAGE("kiln cpu while at the descriptor limit: " << busy << " s of 1.5 s");
  CHECK(busy < 0.5);  // a spinning accept loop would use the whole 1.5 s
  CHECK(read_file(log).find("accept failed") != std::string::npos);
  held.clear();  // descriptors free again: the pending connections are accepted and served
  CHECK(eventually([&] { return request(p.port(), "GET", "/healthz").status == 200; }, 5s));
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat(5, false), kAuth).status == 200);
  std::remove(log.c_str());
}

TEST_CASE("hostile: HTTP/1.0 clients get close-delimited streams, never chunked") {
  kiln_process p(test_config(1));
  http_conn c(p.port());
  const std::string body = chat(8);
  c.send_raw("POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer key-search\r\n"
             "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  std::string raw;
  for (std::string s = c.read_some(); !s.empty(); s = c.read_some()) raw += s;
  const auto head_end = raw.find("\r\n\r\n");
  REQUIRE(head_end != std::string::npos);
  std::string head = raw.substr(0, head_end);
  for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  CHECK(head.find(" 200 ") != std::string::npos);
  CHECK(head.find("transfer-encoding") == std::string::npos);
  CHECK(head.find("connection: close") != std::string::npos);
  const std::string payload = raw.substr(head_end + 4);
  CHECK(payload.rfind("data: {", 0) == 0);  // no chunk sizes in front
  CHECK(payload.find("data: [DONE]\n\n") != std::string::npos);
  CHECK(payload.size() >= std::string("data: [DONE]\n\n").size());
  CHECK(payload.substr(payload.size() - 14) == "data: [DONE]\n\n");
}

TEST_CASE("hostile: a Transfer-Encoding whose last coding is not chunked gets 400 and the connection closes") {
  kiln_process p(test_config(1));
  for (const char* te : {"gzip", "chunked, gzip", "identity"}) {
    CAPTURE(te);
    http_conn c(p.port());
    c.send_raw(std::string("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-search\r\n"
                           "Transfer-Encoding: ") + te + "\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    const http_response r = c.read_response();
    CHECK(r.status == 400);
    CHECK(r.body.find("\"error\"") != std::string::npos);
    CHECK(c.closed_within(2000));
  }
  CHECK(request(p.port(), "GET", "/healthz").status == 200);
}

TEST_CASE("hostile: a request target in absolute form (as a proxy sends it) is served as its path") {
  kiln_process p(test_config(1));
  http_conn c(p.port());
  for (const char* target : {"http://127.0.0.1/v1/models", "HTTPS://kiln.example:443/v1/models?x=1", "http://h/healthz"}) {
    CAPTURE(target);
    c.send_raw(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-search\r\n\r\n");
    const http_response r = c.read_response();
    CHECK(r.status == 200);
  }
  // Without a path it is the root (no route), and a scheme alone is no absolute form.
  const std::pair<const char*, const char*> unknown[] = {{"http://h", "GET /."}, {"http://h?q=1", "GET /."}, {"http:/v1/models", "GET http:/v1/models."}};
  for (const auto& [target, seen] : unknown) {
    CAPTURE(target);
    c.send_raw(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer key-search\r\n\r\n");
    const http_response r = c.read_response();
    CHECK(r.status == 404);
    CHECK(r.body.find(std::string("Unknown request URL: ") + seen) != std::string::npos);
  }
}

TEST_CASE("hostile: authentication comes first: no key means 401 whatever the body, and a big body is never read") {
  kiln_process p(test_config(1));
  CHECK(request(p.port(), "POST", "/v1/chat/completions", "{not json").status == 401);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", "{not json", {"Authorization: Bearer wrong"}).status == 401);
  CHECK(request(p.port(), "POST", "/v1/chat/completions", "{not json", kAuth).status == 400);
  // Headers announcing 10 MB, and no key: the answer comes without the body being sent.
  http_conn c(p.port(), 3000);
  c.send_raw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 10000000\r\n\r\n");
  const http_response r = c.read_response();
  CHECK(r.status == 401);
  CHECK(r.headers.at("connection") == "close");
  CHECK(c.closed_within(2000));
  // Admin routes: a team key is forbidden before any body is looked at.
  CHECK(request(p.port(), "POST", "/admin/chaos", "{not json", kAuth).status == 403);
  CHECK(request(p.port(), "POST", "/admin/chaos", "{not json").status == 401);
}

TEST_CASE("hostile: /healthz answers 503 while draining, and new requests get 503 shutting_down") {
  kiln_process p(test_config(1, 400, 3000));
  http_conn c(p.port());
  c.send_raw(make_request("POST", "/v1/chat/completions", chat(150), kAuth));
  REQUIRE(c.read_head().status == 200);
  p.signal(SIGTERM);
  std::this_thread::sleep_for(100ms);
  const http_response h = request(p.port(), "GET", "/healthz");
  CHECK(h.status == 503);
  CHECK(h.body.find("draining") != std::string::npos);
  const http_response r = request(p.port(), "POST", "/v1/chat/completions", chat(5), kAuth);
  CHECK(r.status == 503);
  CHECK(r.body.find("shutting_down") != std::string::npos);
  CHECK(r.headers.count("retry-after") == 1);
  std::string body;
  for (std::string s = c.read_some(); !s.empty(); s = c.read_some()) body += s;
  CHECK(body.find("data: [DONE]") != std::string::npos);
  CHECK(p.wait_exit(5000) == 0);
}

TEST_CASE("hostile: the access log keeps the team and token counts of aborted requests") {
  const std::string log = temp_path("kiln-access-log");
  {
    kiln_process p(test_config(1, 400, 300), {log, 0, 0, "", ""});
    {
      http_conn c(p.port());
      c.send_raw(make_request("POST", "/v1/chat/completions", chat(2000), kAuth));
      REQUIRE(c.read_head().status == 200);
      std::string got;
      while (got.find("\"content\":\" ") == std::string::npos) got += c.read_some();
      std::this_thread::sleep_for(100ms);
    }  // the client vanishes mid-stream
    REQUIRE(eventually([&] { return read_file(log).find("status=499") != std::string::npos; }, 5s));
    http_conn c(p.port());
    c.send_raw(make_request("POST", "/v1/chat/completions", chat(20000), {"Authorization: Bearer key-assistant"}));
    REQUIRE(c.read_head().status == 200);
    c.read_some();
    p.signal(SIGTERM);  // the grace runs out: the stream ends with shutting_down
    CHECK(p.wait_exit(5000) == 0);
  }
  const std::string text = read_file(log);
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex("team=search model=chat-7b .*status=499 prompt_tokens=(\\d+) completion_tokens=(\\d+)")));
  CHECK(std::stoi(m[1]) > 0);
  CHECK(std::stoi(m[2]) > 0);
  REQUIRE(std::regex_search(text, m, std::regex("team=assistant model=chat-7b .*status=503 prompt_tokens=(\\d+) completion_tokens=(\\d+)")));
  CHECK(std::stoi(m[1]) > 0);
  CHECK(std::stoi(m[2]) > 0);
  std::remove(log.c_str());
}

// The access log splits a request's time to first token into the engine's share (arrival
// there to first token) and the rest (the front, admission, routing, the way back).
TEST_CASE("hostile: the access log gives the engine's share of the time to first token") {
  const std::string log = temp_path("kiln-access-ttft");
  {
    kiln_process p(test_config(1), {log, 0, 0, "", ""});
    http_conn c(p.port());
    c.send_raw(make_request("POST", "/v1/chat/completions", chat(5), kAuth));
    REQUIRE(c.read_head().status == 200);
    std::string body;
    while (body.find("[DONE]") == std::string::npos) {
      const std::string s = c.read_some();
      REQUIRE(!s.empty());
      body += s;
    }
    REQUIRE(eventually([&] { return read_file(log).find("status=200") != std::string::npos; }, 5s));
  }
  std::smatch m;
  const std::string text = read_file(log);
  REQUIRE(std::regex_search(text, m, std::regex("status=200 .*ttft_ms=([0-9.]+) engine_ttft_ms=([0-9.]+) duration_ms=([0-9.]+)")));
  const double ttft = std::stod(m[1]), engine = std::stod(m[2]), whole = std::stod(m[3]);
  CHECK(engine > 0);
  CHECK(engine <= ttft);
  CHECK(ttft <= whole);
  std::remove(log.c_str());
}

TEST_CASE("hostile: a config with NaN or infinity is refused with one clear line") {
  for (const char* value : {"nan", "inf", "-inf"}) {
    CAPTURE(value);
    const std::string path = temp_path("kiln-nan.toml");
    std::ofstream(path) << test_config(1) << "[[pools]]\nmodel = \"x\"\nversion = \"v\"\ngpu_memory_fraction = " << value << "\n";
    const auto [status, out] = run_command(std::string(kiln_binary()) + " config show --config " + path);
    CHECK(status == 1);
    CHECK(out.find("pools[1].gpu_memory_fraction must be between 0.05 and 0.99") != std::string::npos);
    std::remove(path.c_str());
  }
}

TEST_CASE("hostile: kiln serve refuses a flag without a value or with an empty one, rather than taking the default") {
  for (const char* args : {"--config ''", "--store ''", "--capture ''", "--port ''", "--config", "--store"}) {
    CAPTURE(args);
    // Bounded: a regression would start serving (on the default store) instead of ending.
    const auto [status, out] = run_command("timeout 10 " + std::string(kiln_binary()) + " serve --port 0 " + args);
    CHECK(status == 2);
    CHECK((out.find("needs a value") != std::string::npos || out.find("--port must be a number") != std::string::npos));
    CHECK(out.find("serving on") == std::string::npos);
  }
  const auto [status, out] = run_command(std::string(kiln_binary()) + " make-tiny-model ''");
  CHECK(status == 2);
  CHECK(out.find("make-tiny-model needs a directory") != std::string::npos);
}

TEST_CASE("hostile: kiln COMMAND --help prints the usage and succeeds, without running the command") {
  for (const char* cmd : {"serve", "sim", "plan", "chaos", "tokenize", "make-tiny-model", "config"}) {
    CAPTURE(cmd);
    // Bounded: a regression would take --help for an option and start serving.
    const auto [status, out] = run_command("timeout 10 " + std::string(kiln_binary()) + " " + cmd + " --help");
    CHECK(status == 0);
    CHECK(out.find("kiln sim SCENARIO.toml") != std::string::npos);
    CHECK(out.find("serving on") == std::string::npos);
  }
  const auto [status, out] = run_command(std::string(kiln_binary()) + " ops -h");
  CHECK(status == 0);
  CHECK(out.find("usage: kiln ops") != std::string::npos);
  const auto [bad_status, bad] = run_command(std::string(kiln_binary()) + " sim --helpful");
  CHECK(bad_status == 2);
}

TEST_CASE("hostile: /metrics passes promtool check metrics") {
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    MESSAGE("skipped: promtool not installed (Debian package prometheus)");
    return;
  }
  kiln_process p(test_config(2));
  request(p.port(), "POST", "/v1/chat/completions", chat(5, false), kAuth);
  request(p.port(), "POST", "/v1/chat/completions", "{", kAuth);
  request(p.port(), "POST", "/admin/chaos", R"({"target":"engine","id":"chat-7b-v1-r0","action":"kill"})",
          {"Authorization: Bearer key-admin"});
  std::this_thread::sleep_for(200ms);
  const std::string path = temp_path("kiln-metrics.txt");
  std::ofstream(path) << request(p.port(), "GET", "/metrics").body;
  const auto [status, out] = run_command("/usr/bin/promtool check metrics < " + path);
  CAPTURE(out);
  CHECK(status == 0);
  CHECK(out.empty());
  std::remove(path.c_str());
}
