// OpenAI's Files and Batches against the real binary: uploads, a batch run to its end with an
// answer or an error for every line, the errors users get, a deadline, and a cancel.
#include <doctest/doctest.h>

#include <filesystem>
#include <ctime>
#include <fstream>
#include <set>

#include "tests/batch/batch_support.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using nlohmann::json;

namespace {

const std::vector<std::string> kSearch = {"Authorization: Bearer key-search"};
const std::vector<std::string> kAssistant = {"Authorization: Bearer key-assistant"};

std::string file_id_of(const http_response& r) {
  REQUIRE(r.status == 200);
  return json::parse(r.body)["id"].get<std::string>();
}

}  // namespace

TEST_CASE("batch api: files upload and read back, per team; each line of a batch ends in its output or error file") {
  kiln_process p(test_config(2));
  const int port = p.port();
  // 30 good lines and one the endpoint refuses (max_tokens below 1): larger than the server's
  // 4 KiB body limit, which an upload route does not use.
  std::string input;
  for (int i = 0; i < 30; ++i) input += batch_input_line("req-" + std::to_string(i), 12) + "\n";
  input += R"({"custom_id":"bad","method":"POST","url":"/v1/chat/completions","body":{"model":"chat-7b","max_tokens":-5,"messages":[{"role":"user","content":"x"}]}})" "\n";
  REQUIRE(input.size() > 4096);
  const http_response up = upload_file(port, "key-search", input);
  const std::string file = file_id_of(up);
  const json fj = json::parse(up.body);
  CHECK(fj["object"] == "file");
  CHECK(fj["purpose"] == "batch");
  CHECK(fj["bytes"] == input.size());
  CHECK(fj["filename"] == "input.jsonl");
  CHECK(request(port, "GET", "/v1/files/" + file + "/content", "", kSearch).body == input);
  CHECK(request(port, "GET", "/v1/files/" + file, "", kSearch).status == 200);
  CHECK(request(port, "GET", "/v1/files/" + file, "", kAssistant).status == 404);  // another team's
  CHECK(request(port, "GET", "/v1/files/file-nope", "", kSearch).status == 404);
  CHECK(request(port, "GET", "/v1/files", "", {"Authorization: Bearer key-nope"}).status == 401);

  // What an upload or a batch cannot be.
  CHECK(upload_file(port, "key-search", input, "fine-tune").status == 400);
  CHECK(request(port, "POST", "/v1/files", input, {"Authorization: Bearer key-search", "Content-Type: application/jsonl"}).status == 400);
  CHECK(create_batch(port, "key-search", file, "25").status == 400);
  CHECK(create_batch(port, "key-search", file, "8d").status == 400);
  CHECK(create_batch(port, "key-search", file, "24h", "/v1/embeddings").status == 400);
  CHECK(create_batch(port, "key-search", "file-nope").status == 404);
  CHECK(create_batch(port, "key-assistant", file).status == 404);
  const std::string dup = file_id_of(upload_file(port, "key-search", batch_input_line("a", 5) + "\n" + batch_input_line("a", 5) + "\n"));
  const http_response dup_batch = create_batch(port, "key-search", dup);
  CHECK(dup_batch.status == 400);
  CHECK(dup_batch.body.find("line 2") != std::string::npos);

  const http_response made = create_batch(port, "key-search", file);
  REQUIRE(made.status == 200);
  const json b = json::parse(made.body);
  CHECK(b["object"] == "batch");
  CHECK(b["input_file_id"] == file);
  CHECK(b["metadata"]["job"] == "test");
  CHECK(b["request_counts"]["total"] == 31);
  const json done = wait_batch(port, "key-search", b["id"], 60);
  REQUIRE(done.value("status", "") == "completed");
  CHECK(done["request_counts"]["completed"] == 30);
  CHECK(done["request_counts"]["failed"] == 1);
  CHECK(done["completed_at"].is_number());
  CHECK(done["in_progress_at"].is_number());

  int repeats = 0;
  const auto out = lines_by_id(port, "key-search", done["output_file_id"], repeats);
  CHECK(repeats == 0);
  REQUIRE(out.size() == 30);
  for (const auto& [id, line] : out) {
    CAPTURE(id);
    CHECK(line["response"]["status_code"] == 200);
    CHECK(line["response"]["body"]["object"] == "chat.completion");
    CHECK(line["response"]["body"]["usage"]["completion_tokens"].get<int>() > 0);
    CHECK(line["response"]["body"]["usage"]["completion_tokens"].get<int>() <= 12);
    CHECK(line["error"].is_null());
  }
  const auto err = lines_by_id(port, "key-search", done["error_file_id"], repeats);
  REQUIRE(err.size() == 1);
  CHECK(err.at("bad")["response"]["status_code"] == 400);
  CHECK(err.at("bad")["response"]["body"]["error"]["param"] == "max_tokens");

  // The list, newest first, with a cursor; the output files are the team's.
  const json all = json::parse(request(port, "GET", "/v1/batches?limit=1", "", kSearch).body);
  CHECK(all["data"].size() == 1);
  CHECK(all["data"][0]["id"] == b["id"]);
  CHECK(request(port, "GET", "/v1/batches?limit=0", "", kSearch).status == 400);
  CHECK(json::parse(request(port, "GET", "/v1/batches", "", kAssistant).body)["data"].empty());
  CHECK(request(port, "GET", "/v1/files/" + done["output_file_id"].get<std::string>(), "", kSearch).status == 200);
  CHECK(request(port, "POST", "/v1/batches/" + b["id"].get<std::string>() + "/cancel", "", kSearch).status == 409);
  CHECK(request(port, "POST", "/v1/batches/batch_nope/cancel", "", kSearch).status == 404);
  // A file deleted is gone, bytes and all.
  CHECK(request(port, "DELETE", "/v1/files/" + dup, "", kSearch).status == 200);
  CHECK(request(port, "GET", "/v1/files/" + dup + "/content", "", kSearch).status == 404);
}

TEST_CASE("batch api: an upload at the configured size is taken and one byte more is 413") {
  std::string cfg = test_config(1);
  cfg += "[batch]\nmax_file_bytes = 2048\n";
  kiln_process p(cfg);
  // The form around the file is allowed on top of the file's own limit.
  CHECK(upload_file(p.port(), "key-search", std::string(2048, 'x')).status == 200);
  std::string big = std::string(2048 + (64 << 10) + 1, 'x');
  CHECK(upload_file(p.port(), "key-search", big).status == 413);
}

TEST_CASE("batch api: lines past the deadline end as batch_expired; a cancel stops the rest; both add up to the total") {
  std::string cfg = test_config(1);
  // The assistant team gets about three lines a minute: the rest wait on its limit.
  cfg.replace(cfg.find("api_key = \"key-assistant\"\n"), 26,
              "api_key = \"key-assistant\"\n[[teams.limits]]\nmodel = \"chat-7b\"\ntokens_per_minute = 120\nburst = 120\n");
  kiln_process p(cfg);
  std::string input;
  for (int i = 0; i < 12; ++i) input += batch_input_line("x" + std::to_string(i), 20) + "\n";
  const std::string file = file_id_of(upload_file(p.port(), "key-assistant", input));

  const json expiring = json::parse(create_batch(p.port(), "key-assistant", file, "3s").body);
  const json expired = wait_batch(p.port(), "key-assistant", expiring["id"], 30);
  REQUIRE(expired.value("status", "") == "expired");
  const int ok = expired["request_counts"]["completed"], failed = expired["request_counts"]["failed"];
  CHECK(ok + failed == 12);
  CHECK(failed > 0);
  int repeats = 0;
  const auto errs = lines_by_id(p.port(), "key-assistant", expired["error_file_id"], repeats);
  CHECK(repeats == 0);
  CHECK(static_cast<int>(errs.size()) == failed);
  for (const auto& [id, line] : errs) CHECK(line["error"]["code"] == "batch_expired");

  const json running = json::parse(create_batch(p.port(), "key-assistant", file, "1h").body);
  const http_response c = request(p.port(), "POST", "/v1/batches/" + running["id"].get<std::string>() + "/cancel", "",
                                  {"Authorization: Bearer key-assistant"});
  CHECK(c.status == 200);
  const json cancelled = wait_batch(p.port(), "key-assistant", running["id"], 30);
  REQUIRE(cancelled.value("status", "") == "cancelled");
  CHECK(cancelled["cancelling_at"].is_number());
  CHECK(cancelled["request_counts"]["completed"].get<int>() + cancelled["request_counts"]["failed"].get<int>() == 12);
  const auto unrun = lines_by_id(p.port(), "key-assistant", cancelled["error_file_id"], repeats);
  CHECK(repeats == 0);
  for (const auto& [id, line] : unrun) CHECK(line["error"]["code"] == "batch_cancelled");
}

TEST_CASE("batch api: seed 000's form runs a file under the files directory into the output path it names") {
  const std::string store =
      (std::filesystem::temp_directory_path() / ("kiln-batch-seed-" + std::to_string(::getpid()) + ".db")).string();
  remove_store(store);
  const store_guard cleanup{store};
  std::filesystem::create_directories(store + ".files/in");
  {
    std::ofstream in(store + ".files/in/work.jsonl");
    in << R"({"messages":[{"role":"user","content":"one"}],"max_tokens":5})" "\n" << batch_input_line("two", 5) << "\n";
  }
  {
    kiln_process p(test_config(1), {"", 0, 0, store, ""});
    auto post = [&](const json& body) {
      return request(p.port(), "POST", "/v1/batches", body.dump(), {"Authorization: Bearer key-search"});
    };
    const std::int64_t later = std::time(nullptr) + 600;
    CHECK(post({{"model", "chat-7b"}, {"input_uri", "/etc/passwd"}, {"output_uri", "out.jsonl"}, {"deadline", later}}).status == 400);
    CHECK(post({{"model", "chat-7b"}, {"input_uri", "in/../../x"}, {"output_uri", "out.jsonl"}, {"deadline", later}}).status == 400);
    CHECK(post({{"model", "chat-7b"}, {"input_uri", "in/work.jsonl"}, {"output_uri", "out.jsonl"}, {"deadline", 5}}).status == 400);
    const http_response r = post({{"model", "chat-7b"}, {"input_uri", "file://" + store + ".files/in/work.jsonl"},
                                  {"output_uri", "out/work.out.jsonl"}, {"deadline", later}});
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    const json b = json::parse(r.body);
    CHECK(b["batch_id"] == b["id"]);
    const json done = wait_batch(p.port(), "key-search", b["batch_id"], 30);
    CHECK(done.value("status", "") == "completed");
    CHECK(done["request_counts"]["completed"] == 2);
  }
  std::ifstream out(store + ".files/out/work.out.jsonl");
  std::string line;
  std::set<std::string> ids;
  while (std::getline(out, line)) ids.insert(json::parse(line)["custom_id"].get<std::string>());
  CHECK(ids == std::set<std::string>{"line-1", "two"});
}
