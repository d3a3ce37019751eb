// Request validation as a table, and the JSON shapes of chunks, completions and errors.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "net/json_body.hpp"
#include "net/openai.hpp"
#include "net/sse.hpp"

using namespace kiln::net;
using nlohmann::json;

namespace {

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

std::string body(const std::string& extra) {
  return "{\"model\":\"chat-7b\"," + kMsgs + (extra.empty() ? "" : "," + extra) + "}";
}

}  // namespace

TEST_CASE("openai: invalid requests name the parameter") {
  struct row {
    std::string body;
    std::string param;  // "" = null
    std::string code;
  };
  const row table[] = {
      {"{", "", "invalid_json"},
      {"[1,2]", "", "invalid_json"},
      {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model", ""},
      {"{\"model\":\"m\"}", "messages", ""},
      {"{\"model\":\"m\",\"messages\":[]}", "messages", ""},
      {"{\"model\":\"m\",\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role", ""},
      {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", ""},
      {"{\"model\":3," + kMsgs + "}", "model", ""},
      {body("\"n\":2"), "n", ""},
      {body("\"temperature\":3"), "temperature", ""},
      {body("\"temperature\":\"hot\""), "temperature", ""},
      {body("\"max_tokens\":0"), "max_tokens", ""},
      {body("\"max_tokens\":1.5"), "max_tokens", ""},
      {body("\"max_completion_tokens\":-1"), "max_completion_tokens", ""},
      {body("\"stream\":\"yes\""), "stream", ""},
      {body("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), "stop", ""},
      {body("\"stop\":[1]"), "stop", ""},
      {body("\"seed\":\"x\""), "seed", ""},
      {body("\"top_p\":2"), "top_p", ""},
      {body("\"logprobs\":\"yes\""), "logprobs", ""},
      {body("\"logprobs\":1"), "logprobs", ""},
      {body("\"tools\":[]"), "tools", ""},
      {body("\"tools\":[{\"type\":\"function\"}]"), "tools[0]", ""},
      {body("\"tools\":{}"), "tools", ""},
      {body("\"tool_choice\":\"required\""), "tool_choice", ""},
      {body("\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"), "tool_choice", ""},
      {body("\"response_format\":{\"type\":\"json_object\"}"), "response_format", ""},
      {body("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}"), "response_format", ""},
      {body("\"response_format\":{\"type\":\"yaml\"}"), "response_format", ""},
      {body("\"top_logprobs\":21"), "top_logprobs", ""},
      {body("\"top_logprobs\":3"), "top_logprobs", ""},
      {body("\"top_logprobs\":3,\"logprobs\":false"), "top_logprobs", ""},
      {body("\"top_logprobs\":-1,\"logprobs\":true"), "top_logprobs", ""},
      {body("\"stream_options\":{\"include_usage\":1}"), "stream_options.include_usage", ""},
      {body("\"chat_template_kwargs\":{\"messages\":[]}"), "chat_template_kwargs", ""},
      {body("\"user\":5"), "user", ""},
      {body("\"parallel_tool_calls\":\"yes\""), "parallel_tool_calls", ""},
      {body("\"presence_penalty\":2.01"), "presence_penalty", ""},
      {body("\"frequency_penalty\":-2.5"), "frequency_penalty", ""},
      {body("\"frequency_penalty\":\"1\""), "frequency_penalty", ""},
      {body("\"repetition_penalty\":0"), "repetition_penalty", ""},
      {body("\"repetition_penalty\":100.5"), "repetition_penalty", ""},
      {body("\"logit_bias\":[1,2]"), "logit_bias", ""},
      {body("\"logit_bias\":{\"x\":1}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"-1\":1}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"\":1}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"16777216\":1}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"99999999999\":1}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"5\":100.5}"), "logit_bias", ""},
      {body("\"logit_bias\":{\"5\":\"ban\"}"), "logit_bias", ""},
      {body("\"min_tokens\":-1"), "min_tokens", ""},
      {body("\"min_tokens\":\"5\""), "min_tokens", ""},
      {body("\"min_tokens\":9,\"max_tokens\":8"), "min_tokens", ""},
      {body("\"max_completion_tokens\":8,\"min_tokens\":9"), "min_tokens", ""},
      {body("\"ignore_eos\":\"yes\""), "ignore_eos", ""},
      {body("\"service_tier\":\"scale\""), "service_tier", ""},
      {body("\"stop_token_ids\":7"), "stop_token_ids", ""},
      {body("\"stop_token_ids\":[-1]"), "stop_token_ids", ""},
      {body("\"stop_token_ids\":[1.5]"), "stop_token_ids", ""},
      {body("\"stop_token_ids\":[16777216]"), "stop_token_ids", ""},
      {body("\"stop_token_ids\":[\"7\"]"), "stop_token_ids", ""},
      {body("\"service_tier\":1"), "service_tier", ""},
  };
  for (const auto& r : table) {
    CAPTURE(r.body);
    auto res = parse_chat_request(r.body);
    REQUIRE(std::holds_alternative<api_error>(res));
    const auto& e = std::get<api_error>(res);
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    CHECK(e.param == r.param);
    if (!r.code.empty()) CHECK(e.code == r.code);
    CHECK_FALSE(e.message.empty());
  }
}

TEST_CASE("openai: a body that is not JSON says why and where, without echoing its bytes") {
  struct row {
    std::string body;
    std::string says;
  };
  const row table[] = {
      {"{", "unexpected end of input"},
      {"{\"model\":\"m\",}", "expected string literal (line 1, column 14)"},
      {"{\"model\":\"\xff\xfe\"}", "ill-formed UTF-8"},
      {"{\"max_tokens\":1e400}", "number overflow"},
      {"", "unexpected end of input"},
  };
  auto check = [](const api_error& e, const std::string& says) {
    CHECK(e.code == "invalid_json");
    CHECK(e.message.starts_with("We could not parse the JSON body of your request: "));
    CHECK(e.message.find(says) != std::string::npos);
    CHECK(e.message.find("json.exception") == std::string::npos);
    CHECK(e.message.find("last read") == std::string::npos);
    CHECK(e.message.find('\xff') == std::string::npos);
  };
  for (const auto& r : table) {
    CAPTURE(r.body);
    auto chat = parse_chat_request(r.body);
    REQUIRE(std::holds_alternative<api_error>(chat));
    check(std::get<api_error>(chat), r.says);
    auto text = parse_completion_request(r.body);
    REQUIRE(std::holds_alternative<api_error>(text));
    check(std::get<api_error>(text), r.says);
  }
  // The same reading for every call that takes a JSON object (admin calls use plain JSON).
  nlohmann::json plain;
  CHECK_FALSE(parse_json_object(R"({"b":1,"a":[2]})", plain).has_value());
  CHECK(plain["a"][0] == 2);
  CHECK(parse_json_object("{\"a\":tru}", plain).value().find("invalid literal (line 1, column 9)") != std::string::npos);
  CHECK(parse_json_object("\"text\"", plain) == "The request body must be a JSON object.");
  nlohmann::ordered_json ordered;
  REQUIRE_FALSE(parse_json_object(R"({"b":1,"a":2})", ordered).has_value());
  CHECK(ordered.begin().key() == "b");  // the client's order kept
  // Valid JSON that is not an object keeps its own message.
  auto list = parse_chat_request("[1,2]");
  REQUIRE(std::holds_alternative<api_error>(list));
  CHECK(std::get<api_error>(list).message == "The request body must be a JSON object.");
}

TEST_CASE("openai: a valid request with every supported field") {
  auto res = parse_chat_request(R"({"model":"chat-7b","messages":[{"role":"system","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "stream":true,"max_tokens":9,"max_completion_tokens":12,"temperature":0,"seed":7,"stop":"END",
      "n":1,"top_p":0.9,"stream_options":{"include_usage":true},"user":"u"})");
  REQUIRE(std::holds_alternative<chat_params>(res));
  const auto& p = std::get<chat_params>(res);
  CHECK(p.model == "chat-7b");
  REQUIRE(p.messages.size() == 2);
  CHECK(p.messages[1].content == "ab");
  CHECK(p.stream);
  CHECK(p.max_tokens == 12);  // max_completion_tokens wins
  CHECK(p.temperature == 0);
  CHECK(p.seed == 7u);
  REQUIRE(p.stop.size() == 1);
  CHECK(p.stop[0] == "END");
  CHECK(p.presence_penalty == 0);
  CHECK(p.repetition_penalty == 1);
  CHECK(p.logit_bias.empty());
}

TEST_CASE("openai: logit bias and penalties at their limits, in both APIs") {
  auto res = parse_chat_request(body(R"("presence_penalty":-2,"frequency_penalty":2,"repetition_penalty":0.01,)"
                                     R"("logit_bias":{"16777215":-100,"7":100,"07":-3,"0":0.5})"));
  REQUIRE(std::holds_alternative<chat_params>(res));
  const auto& p = std::get<chat_params>(res);
  CHECK(p.presence_penalty == -2);
  CHECK(p.frequency_penalty == 2);
  CHECK(p.repetition_penalty == doctest::Approx(0.01));
  // By id, each once: "07" names 7 again, and the later key stands.
  const std::vector<std::pair<std::int32_t, float>> want{{0, 0.5f}, {7, -3.f}, {16777215, -100.f}};
  CHECK(p.logit_bias == want);
  auto nulls = parse_chat_request(body(R"("presence_penalty":null,"logit_bias":null,"repetition_penalty":null)"));
  REQUIRE(std::holds_alternative<chat_params>(nulls));
  CHECK(std::get<chat_params>(nulls).logit_bias.empty());
  auto c = parse_completion_request(R"({"model":"m","prompt":"x","frequency_penalty":0.5,"repetition_penalty":100,"logit_bias":{"3":-100}})");
  REQUIRE(std::holds_alternative<completion_params>(c));
  const auto& cp = std::get<completion_params>(c).common;
  CHECK(cp.frequency_penalty == 0.5);
  CHECK(cp.repetition_penalty == 100);
  REQUIRE(cp.logit_bias.size() == 1);
  CHECK(cp.logit_bias[0].first == 3);
  auto bad = parse_completion_request(R"({"model":"m","prompt":"x","logit_bias":{"3":-101}})");
  REQUIRE(std::holds_alternative<api_error>(bad));
  CHECK(std::get<api_error>(bad).param == "logit_bias");
  // min_tokens up to max_tokens (the completion's default 16 included); ignore_eos a boolean.
  auto at = parse_chat_request(body(R"("min_tokens":8,"max_tokens":8,"ignore_eos":true)"));
  REQUIRE(std::holds_alternative<chat_params>(at));
  CHECK(std::get<chat_params>(at).min_tokens == 8);
  CHECK(std::get<chat_params>(at).ignore_eos);
  CHECK(std::holds_alternative<chat_params>(parse_chat_request(body(R"("min_tokens":500)"))));  // the pool's default: checked on admission
  CHECK(std::holds_alternative<completion_params>(parse_completion_request(R"({"model":"m","prompt":"x","min_tokens":16})")));
  // service_tier: OpenAI's names for kiln's tiers; auto (or null) leaves the tier to the header or the default.
  const auto tier_of = [](const std::string& t) { return std::get<chat_params>(parse_chat_request(body("\"service_tier\":" + t))).tier; };
  CHECK(tier_of("\"priority\"") == kiln::engine::priority::interactive);
  CHECK(tier_of("\"default\"") == kiln::engine::priority::standard);
  CHECK(tier_of("\"flex\"") == kiln::engine::priority::batch);
  CHECK_FALSE(tier_of("\"auto\"").has_value());
  CHECK_FALSE(tier_of("null").has_value());
  auto ids = parse_completion_request(R"({"model":"m","prompt":"x","stop_token_ids":[9,3,9,16777215]})");
  REQUIRE(std::holds_alternative<completion_params>(ids));
  CHECK(std::get<completion_params>(ids).common.stop_token_ids == std::vector<std::int32_t>{3, 9, 16777215});
  auto past = parse_completion_request(R"({"model":"m","prompt":"x","min_tokens":17})");
  REQUIRE(std::holds_alternative<api_error>(past));
  CHECK(std::get<api_error>(past).param == "min_tokens");
}

TEST_CASE("openai: tools, tool calls and template variables reach the template as sent; nulls are accepted") {
  auto res = parse_chat_request(R"({"model":"m","user":null,"tool_choice":"auto","parallel_tool_calls":true,
      "response_format":{"type":"text"},"top_logprobs":0,"logprobs":false,"stream_options":{"include_usage":false},
      "chat_template_kwargs":{"enable_thinking":false},
      "tools":[{"type":"function","function":{"name":"w","parameters":{"z":1,"a":2}}}],
      "messages":[{"role":"user","content":"hi"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"w","arguments":"{\"city\": \"Oslo\"}"}}]},
        {"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"21C"}]}]})");
  REQUIRE(std::holds_alternative<chat_params>(res));
  const auto& p = std::get<chat_params>(res);
  CHECK_FALSE(p.include_usage);
  CHECK_FALSE(p.tool_choice_none);
  const auto t = nlohmann::ordered_json::parse(p.template_json);
  CHECK(t["messages"][1]["content"] == "");  // null content: empty text
  CHECK(t["messages"][1]["tool_calls"][0]["function"]["arguments"]["city"] == "Oslo");  // an object now
  CHECK(t["messages"][2]["content"] == "21C");
  CHECK(t["messages"][2]["tool_call_id"] == "c1");
  CHECK(t["tools"][0]["function"]["parameters"].dump() == R"({"z":1,"a":2})");  // the client's key order
  CHECK(t["enable_thinking"] == false);
  auto none = parse_chat_request(R"({"model":"m","tool_choice":"none","messages":[{"role":"user","content":"x"}]})");
  REQUIRE(std::holds_alternative<chat_params>(none));
  CHECK(std::get<chat_params>(none).tool_choice_none);
  CHECK(std::get<chat_params>(none).include_usage);
}

TEST_CASE("openai: /v1/completions requests: a text or token-id prompt, echo, and what is refused") {
  auto ok = [](const std::string& body) {
    auto r = parse_completion_request(body);
    if (auto* e = std::get_if<api_error>(&r)) FAIL(e->message);
    return std::get<completion_params>(r);
  };
  const auto text = ok(R"({"model":"m","prompt":"Once","echo":true,"stream":true,"logprobs":null,"best_of":1,"suffix":null})");
  CHECK(text.prompt_text == "Once");
  CHECK(text.echo);
  CHECK(text.common.stream);
  CHECK(text.common.max_tokens == 16);  // OpenAI's default here
  CHECK(ok(R"({"model":"m","prompt":["One"],"max_tokens":3})").prompt_text == "One");
  CHECK(ok(R"({"model":"m","prompt":[1,2,3]})").prompt_ids == std::vector<std::int32_t>{1, 2, 3});
  CHECK(ok(R"({"model":"m","prompt":[[4,5]],"max_tokens":2})").prompt_ids == std::vector<std::int32_t>{4, 5});
  struct bad_case { const char* body; const char* param; };
  for (const auto& b : {bad_case{R"({"model":"m"})", "prompt"}, bad_case{R"({"model":"m","prompt":""})", "prompt"},
                        bad_case{R"({"model":"m","prompt":["a","b"]})", "prompt"}, bad_case{R"({"model":"m","prompt":[1,-2]})", "prompt"},
                        bad_case{R"({"model":"m","prompt":[]})", "prompt"}, bad_case{R"({"model":"m","prompt":[1],"echo":true})", "echo"},
                        bad_case{R"({"model":"m","prompt":"a","logprobs":21})", "logprobs"},
                        bad_case{R"({"model":"m","prompt":"a","logprobs":true})", "logprobs"},
                        bad_case{R"({"model":"m","prompt":"a","top_logprobs":2})", "top_logprobs"},
                        bad_case{R"({"model":"m","prompt":"a","suffix":"z"})", "suffix"},
                        bad_case{R"({"model":"m","prompt":"a","best_of":2})", "best_of"},
                        bad_case{R"({"model":"m","prompt":"a","messages":[]})", "messages"},
                        bad_case{R"({"model":"m","prompt":"a","max_tokens":0})", "max_tokens"},
                        bad_case{R"({"prompt":"a"})", "model"}}) {
    CAPTURE(b.body);
    auto r = parse_completion_request(b.body);
    REQUIRE(std::holds_alternative<api_error>(r));
    CHECK(std::get<api_error>(r).param == b.param);
  }
  // Several prompts (texts or token-id lists) are named as such, not as bad token ids.
  for (const char* body : {R"({"model":"m","prompt":["a","b"]})", R"({"model":"m","prompt":[[1,2],[3]]})",
                           R"({"model":"m","prompt":[[1],"b",[2]]})"}) {
    CAPTURE(body);
    auto r = parse_completion_request(body);
    REQUIRE(std::holds_alternative<api_error>(r));
    CHECK(std::get<api_error>(r).message.find("one prompt per request") != std::string::npos);
    CHECK(std::get<api_error>(r).message.find(" prompts;") != std::string::npos);
  }
  auto mixed = parse_completion_request(R"({"model":"m","prompt":[1,"b"]})");  // one list, a text inside
  REQUIRE(std::holds_alternative<api_error>(mixed));
  CHECK(std::get<api_error>(mixed).message.find("token ids must be integers") != std::string::npos);
}

TEST_CASE("openai: text completion shapes") {
  const completion_meta m{"cmpl-1", 1700000000, "m", true};
  const json chunk = json::parse(chunk_content_json(m, "hi"));
  CHECK(chunk["object"] == "text_completion");
  CHECK(chunk["choices"][0]["text"] == "hi");
  CHECK(chunk["choices"][0]["logprobs"].is_null());
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  std::string event;
  append_content_event(event, content_event_prefix(m), "a\"b", content_suffix(m));
  CHECK(json::parse(event.substr(6))["choices"][0]["text"] == "a\"b");
  CHECK(json::parse(chunk_finish_json(m, "length"))["choices"][0]["finish_reason"] == "length");
  const json full = json::parse(completion_json(m, "done", "stop", completion_usage{3, 1, 0, "v1", "r", "x", 1.0}));
  CHECK(full["object"] == "text_completion");
  CHECK(full["choices"][0]["text"] == "done");
  CHECK(full["usage"]["total_tokens"] == 4);
}

TEST_CASE("openai: error object and chunk shapes") {
  const json e = json::parse(error_json({401, "invalid_request_error", "bad key", "", "invalid_api_key"}));
  CHECK(e["error"]["message"] == "bad key");
  CHECK(e["error"]["param"].is_null());
  CHECK(e["error"]["code"] == "invalid_api_key");

  const completion_meta m{"chatcmpl-1", 1700000000, "chat-7b"};
  const json role = json::parse(chunk_role_json(m));
  CHECK(role["object"] == "chat.completion.chunk");
  CHECK(role["choices"][0]["delta"]["role"] == "assistant");
  const json content = json::parse(chunk_content_json(m, "a \"q\"\n\x01"));
  CHECK(content["choices"][0]["delta"]["content"] == "a \"q\"\n\x01");
  const json fin = json::parse(chunk_finish_json(m, "length"));
  CHECK(fin["choices"][0]["finish_reason"] == "length");
  const completion_usage u{11, 5, 3, "v1", "local", "r0", 9.5};
  const json usage = json::parse(chunk_usage_json(m, u));
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["total_tokens"] == 16);
  CHECK(usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 3);
  CHECK(usage["model_version"] == "v1");
  CHECK(usage["region"] == "local");
  CHECK(usage["replica_id"] == "r0");
  const json full = json::parse(completion_json(m, "hello", "stop", u));
  CHECK(full["object"] == "chat.completion");
  CHECK(full["choices"][0]["message"]["content"] == "hello");
  CHECK(full["usage"]["completion_tokens"] == 5);
}

TEST_CASE("openai: json_quote escapes and repairs invalid UTF-8") {
  CHECK(json_quote("é") == "\"é\"");
  CHECK(json_quote("\xff") == "\"\\ufffd\"");
  CHECK(json_quote("\xe2\x82") == "\"\\ufffd\\ufffd\"");  // truncated sequence
  CHECK(json_quote("\t\\") == "\"\\t\\\\\"");
  CHECK(json::parse(json_quote("\xc0\xaf")).get<std::string>() == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
}

TEST_CASE("openai: a content event from the stream's prefix is the SSE event of its chunk, byte for byte") {
  const completion_meta m{"chatcmpl-\"7\"", 1700000000, "chat-7b"};
  const std::string prefix = content_event_prefix(m);
  std::string reused;
  for (std::string_view text : {"plain", "a \"q\"\n\x01\x1f", "\\", "\xff\xe2\x82", "\xf0\x9f\x98\x80 emoji", " "}) {
    CAPTURE(text);
    std::string want;
    append_sse_event(want, chunk_content_json(m, text));
    reused.clear();  // the stream's buffer: cleared after each flush, its capacity kept
    append_content_event(reused, prefix, text);
    CHECK(reused == want);
    const json parsed = json::parse(reused.substr(6));  // after "data: "
    CHECK(parsed["id"] == "chatcmpl-\"7\"");
    CHECK(reused.ends_with("\n\n"));
  }
  // Events append: two tokens are two events in one buffer.
  reused.clear();
  append_content_event(reused, prefix, "a");
  append_content_event(reused, prefix, "b");
  CHECK(reused.find("\n\ndata: ") != std::string::npos);
}
