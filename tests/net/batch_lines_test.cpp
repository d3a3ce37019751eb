// Batch input files, output lines, resuming from what a file holds, and multipart uploads.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "net/batch_lines.hpp"
#include "net/multipart.hpp"

using namespace kiln::net;
using nlohmann::json;

namespace {

std::string line(const std::string& id, const std::string& model = "chat-7b", const std::string& url = "/v1/chat/completions") {
  return json{{"custom_id", id},
              {"method", "POST"},
              {"url", url},
              {"body", {{"model", model}, {"messages", json::array({{{"role", "user"}, {"content", "hi " + id}}})}}}}
             .dump();
}

const std::vector<batch_input_error>& errors_of(const std::variant<batch_input, std::vector<batch_input_error>>& r) {
  REQUIRE(std::holds_alternative<std::vector<batch_input_error>>(r));
  return std::get<std::vector<batch_input_error>>(r);
}

}  // namespace

TEST_CASE("batch input: lines in OpenAI's form, blank lines and CRLF skipped") {
  const std::string text = line("a") + "\r\n\n" + line("b") + "\n";
  auto r = read_batch_input(text, "/v1/chat/completions", 10);
  REQUIRE(std::holds_alternative<batch_input>(r));
  const auto& in = std::get<batch_input>(r);
  CHECK(in.model == "chat-7b");
  REQUIRE(in.lines.size() == 2);
  CHECK(in.lines[0].custom_id == "a");
  CHECK(json::parse(in.lines[1].body)["messages"][0]["content"] == "hi b");
}

TEST_CASE("batch input: each bad line is named by its number") {
  CHECK(errors_of(read_batch_input(line("a") + "\n{not json\n", "/v1/chat/completions", 10))[0].line == 2);
  CHECK(errors_of(read_batch_input(line("a") + "\n" + line("a") + "\n", "/v1/chat/completions", 10))[0].code == "duplicate_custom_id");
  CHECK(errors_of(read_batch_input(line("a") + "\n" + line("b", "other") + "\n", "/v1/chat/completions", 10))[0].code ==
        "model_mismatch");
  CHECK(errors_of(read_batch_input(line("a", "chat-7b", "/v1/completions"), "/v1/chat/completions", 10))[0].code ==
        "mismatched_endpoint");
  CHECK(errors_of(read_batch_input(R"({"custom_id":"x","method":"GET","url":"/v1/chat/completions","body":{}})",
                                   "/v1/chat/completions", 10))[0].param == "method");
  CHECK(errors_of(read_batch_input(R"({"custom_id":"x","body":{"model":"m","stream":true}})", "/v1/chat/completions", 10))[0]
            .param == "body.stream");
  CHECK(errors_of(read_batch_input(R"({"custom_id":"","body":{"model":"m"}})", "/v1/chat/completions", 10))[0].param ==
        "custom_id");
  CHECK(errors_of(read_batch_input("\n\n", "/v1/chat/completions", 10))[0].code == "empty_file");
}

TEST_CASE("batch input: at the line limit it runs, one past it it does not") {
  std::string three;
  for (const char* id : {"a", "b", "c"}) three += line(id) + "\n";
  CHECK(std::holds_alternative<batch_input>(read_batch_input(three, "/v1/chat/completions", 3)));
  CHECK(errors_of(read_batch_input(three, "/v1/chat/completions", 2))[0].code == "too_many_requests");
}

TEST_CASE("batch input: seed 000's loose form takes bare bodies and fills in the model") {
  const std::string text = R"({"messages":[{"role":"user","content":"x"}]})" "\n" + line("named") + "\n";
  auto r = read_batch_input(text, "/v1/chat/completions", 10, true, "chat-7b");
  REQUIRE(std::holds_alternative<batch_input>(r));
  const auto& in = std::get<batch_input>(r);
  REQUIRE(in.lines.size() == 2);
  CHECK(in.lines[0].custom_id == "line-1");
  CHECK(json::parse(in.lines[0].body)["model"] == "chat-7b");
  CHECK(in.lines[1].custom_id == "named");
  // The strict form refuses a bare body.
  CHECK(errors_of(read_batch_input(text, "/v1/chat/completions", 10))[0].param == "custom_id");
}

TEST_CASE("batch output: answer and unrun lines are JSON with OpenAI's fields, one per line") {
  const std::string a = answer_line("batch_req_1", "a", 200, "rid", R"({"id":"chatcmpl-1","usage":{"total_tokens":3}})");
  REQUIRE(a.back() == '\n');
  const json j = json::parse(a);
  CHECK(j["custom_id"] == "a");
  CHECK(j["response"]["status_code"] == 200);
  CHECK(j["response"]["request_id"] == "rid");
  CHECK(j["response"]["body"]["usage"]["total_tokens"] == 3);
  CHECK(j["error"].is_null());
  const json u = json::parse(unrun_line("batch_req_2", "b", "batch_expired", "too late"));
  CHECK(u["response"].is_null());
  CHECK(u["error"]["code"] == "batch_expired");
}

TEST_CASE("batch resume: whole lines count; a line cut short by a crash does not") {
  const std::string a = answer_line("r1", "a", 200, "x", "{}"), b = answer_line("r2", "b", 400, "y", "{}");
  auto whole = answered_lines(a + b);
  CHECK(whole.lines == 2);
  CHECK(whole.custom_ids == std::set<std::string>{"a", "b"});
  CHECK(whole.whole_bytes == a.size() + b.size());
  const std::string cut = a + b.substr(0, b.size() / 2);
  auto partial = answered_lines(cut);
  CHECK(partial.lines == 1);
  CHECK(partial.custom_ids == std::set<std::string>{"a"});
  CHECK(partial.whole_bytes == a.size());
  CHECK(answered_lines("").lines == 0);
}

TEST_CASE("multipart: the OpenAI SDK's upload, quoted names, and broken forms") {
  CHECK(form_boundary("multipart/form-data; boundary=----abc") == "----abc");
  CHECK(form_boundary("Multipart/Form-Data; boundary=\"q b\"") == "q b");
  CHECK(form_boundary("application/json") == "");
  const std::string body =
      "------abc\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
      "------abc\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n"
      "Content-Type: application/jsonl\r\n\r\nline1\r\nline2\n\r\n------abc--\r\n";
  auto r = parse_form(body, "----abc");
  REQUIRE(std::holds_alternative<std::vector<form_part>>(r));
  const auto& parts = std::get<std::vector<form_part>>(r);
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].name == "purpose");
  CHECK(parts[0].data == "batch");
  CHECK(parts[1].filename == "in.jsonl");
  CHECK(parts[1].content_type == "application/jsonl");
  CHECK(parts[1].data == "line1\r\nline2\n");
  CHECK(std::holds_alternative<std::string>(parse_form(body.substr(0, body.size() - 20), "----abc")));
  CHECK(std::holds_alternative<std::string>(parse_form("no delimiters", "----abc")));
  CHECK(std::holds_alternative<std::string>(parse_form("------abc\r\nContent-Disposition: form-data\r\n\r\nx\r\n------abc--", "----abc")));
  CHECK(std::holds_alternative<std::string>(parse_form(body, "")));
}
