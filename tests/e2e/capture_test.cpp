// `kiln serve --capture` against the real binary: every served request is recorded with its
// team, tier, conversation, prompt block hashes and output length, and `kiln sim --trace`
// replays the file.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "config/capture.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;

TEST_CASE("capture e2e: served requests are captured for replay, refused ones are not") {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln-e2e-capture-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string cap = (dir / "served.kcap").string();
  int completion_total = 0;
  {
    process_options o;
    o.capture = cap;
    o.stderr_path = (dir / "serve.err").string();
    kiln_process p(test_config(1), o);
    for (int i = 0; i < 6; ++i) {
      // The tier: by x-priority (interactive), by OpenAI's service_tier (flex: batch) alone, or
      // by both (the header wins).
      const std::string tier = i % 3 == 0 ? "" : R"("service_tier":"flex",)";
      std::vector<std::string> headers = {"Authorization: Bearer key-search", "x-conversation-id: chat-" + std::to_string(i % 2)};
      if (i % 3 != 1) headers.push_back("x-priority: interactive");
      const std::string body = R"({)" + tier + R"("model":"chat-7b","max_tokens":)" + std::to_string(5 + i) +
                               R"(,"messages":[{"role":"system","content":"You are kiln, a helpful assistant that answers questions about kilns, glazes and pottery."},{"role":"user","content":"question )" +
                               std::to_string(i) + R"("}]})";
      auto r = request(p.port(), "POST", "/v1/chat/completions", body, headers);
      REQUIRE(r.status == 200);
      completion_total += json::parse(r.body)["usage"]["completion_tokens"].get<int>();
    }
    // Refused before it runs: not a served request.
    CHECK(request(p.port(), "POST", "/v1/chat/completions", R"({"model":"nope","messages":[{"role":"user","content":"x"}]})",
                  {"Authorization: Bearer key-search"})
              .status == 404);
    // A clean stop right after the last answer (this once crashed on a keep-alive connection
    // between its answer and its next read).
    p.signal(SIGTERM);
    CHECK(p.wait_exit(10000) == 0);
  }
  auto read = kiln::config::read_capture(cap);
  REQUIRE(std::holds_alternative<std::vector<kiln::config::capture_record>>(read));
  const auto& recs = std::get<std::vector<kiln::config::capture_record>>(read);
  REQUIRE(recs.size() == 6);
  int output = 0;
  for (std::size_t i = 0; i < recs.size(); ++i) {
    CHECK(recs[i].team == "search");
    CHECK(recs[i].tier == (i % 3 == 1 ? 2 : 0));  // batch (flex) or interactive
    CHECK((recs[i].conversation == "chat-0" || recs[i].conversation == "chat-1"));
    CHECK(recs[i].prompt_tokens > 4);
    CHECK(recs[i].block_hashes.size() == static_cast<std::size_t>((recs[i].prompt_tokens + 15) / 16));
    if (i > 0) CHECK(recs[i].t >= recs[i - 1].t);
    output += recs[i].output_tokens;
  }
  CHECK(output == completion_total);
  // Same system prompt, same opening block.
  CHECK(recs[0].block_hashes.front() == recs[1].block_hashes.front());

  // The capture replays in the simulator.
  const std::string scenario = (dir / "replay.toml").string();
  {
    std::FILE* f = std::fopen(scenario.c_str(), "w");
    REQUIRE(f);
    std::fputs("[sim]\nname = \"replay\"\nduration_s = 60\n[[teams]]\nname = \"search\"\napi_key = \"k\"\n"
               "[[pools]]\nmodel = \"chat-7b\"\nversion = \"v1\"\nreplicas = 2\n",
               f);
    std::fclose(f);
  }
  const std::string cmd = std::string(kiln_binary()) + " sim " + scenario + " --trace " + cap + " --out " +
                          (dir / "out").string() + " > " + (dir / "sim.txt").string() + " 2>&1";
  CHECK(std::system(cmd.c_str()) == 0);
  std::FILE* f = std::fopen((dir / "sim.txt").string().c_str(), "r");
  REQUIRE(f);
  char buf[4096] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string text(buf, n);
  CAPTURE(text);
  CHECK(text.find("6 requests, 6 completed") != std::string::npos);
  CHECK(std::filesystem::exists(dir / "out" / "summary.md"));
  std::filesystem::remove_all(dir);
}
