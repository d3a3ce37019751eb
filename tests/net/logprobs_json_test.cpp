// Log-probabilities on the wire: the request fields and their combinations, and OpenAI's
// chat and /v1/completions logprobs objects in streamed and whole answers.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "net/logprobs_json.hpp"
#include "net/openai.hpp"

using namespace kiln::net;
using kiln::engine::token_logprob;
using json = nlohmann::json;

namespace {

std::vector<token_logprob> sample_tokens() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  return {{"He", nan, {}},
          {"llo", -0.5f, {{"llo", -0.5f}, {"y", -1.25f}, {"llo", -3.f}}},
          {" w\xC3\xB6rld", -std::numeric_limits<float>::infinity(), {{" a", -0.125f}}},
          {"\xE2\x82", -2.f, {}}};  // half a UTF-8 character
}

}  // namespace

TEST_CASE("openai: logprobs fields, alone and together") {
  auto chat = [](const std::string& extra) {
    auto r = parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"x"}])" + extra + "}");
    if (auto* e = std::get_if<api_error>(&r)) FAIL(e->message);
    return std::get<chat_params>(r).logprobs;
  };
  CHECK(chat("") == -1);
  CHECK(chat(R"(,"logprobs":false)") == -1);
  CHECK(chat(R"(,"logprobs":null,"top_logprobs":null)") == -1);
  CHECK(chat(R"(,"logprobs":true)") == 0);
  CHECK(chat(R"(,"logprobs":true,"top_logprobs":0)") == 0);
  CHECK(chat(R"(,"top_logprobs":20,"logprobs":true)") == 20);  // either order
  CHECK(chat(R"(,"logprobs":false,"top_logprobs":0)") == -1);
  auto text = [](const std::string& extra) {
    auto r = parse_completion_request(R"({"model":"m","prompt":"a b")" + extra + "}");
    if (auto* e = std::get_if<api_error>(&r)) FAIL(e->message);
    return std::get<completion_params>(r);
  };
  CHECK(text("").common.logprobs == -1);
  CHECK(text(R"(,"logprobs":0)").common.logprobs == 0);
  CHECK(text(R"(,"logprobs":20)").common.logprobs == 20);
  CHECK_FALSE(text(R"(,"logprobs":5)").prompt_logprobs);  // without echo: the answer's only
  CHECK_FALSE(text(R"(,"echo":true)").prompt_logprobs);   // echo without logprobs: text only
  CHECK(text(R"(,"echo":true,"logprobs":0)").prompt_logprobs);
  CHECK(text(R"(,"logprobs":1,"echo":true,"max_tokens":1)").prompt_logprobs);
  CHECK_FALSE(text(R"(,"echo":false,"logprobs":1)").prompt_logprobs);
}

TEST_CASE("logprobs writer: chat's content list with bytes and alternatives") {
  logprobs_writer w(false);
  const json o = json::parse(w.object(sample_tokens()));
  const json& c = o.at("content");
  REQUIRE(c.size() == 4);
  CHECK(c[0]["logprob"].is_null());
  CHECK(c[1]["token"] == "llo");
  CHECK(c[1]["logprob"] == -0.5);
  CHECK(c[1]["bytes"] == json::array({108, 108, 111}));
  REQUIRE(c[1]["top_logprobs"].size() == 3);  // chat keeps every alternative, same text or not
  CHECK(c[1]["top_logprobs"][1] == json({{"token", "y"}, {"logprob", -1.25}, {"bytes", {121}}}));
  CHECK(c[2]["logprob"] == -9999.0);           // -inf has no JSON form
  CHECK(c[2]["bytes"] == json::array({32, 119, 195, 182, 114, 108, 100}));
  CHECK(c[3]["token"].get<std::string>().rfind("\xEF\xBF\xBD", 0) == 0);  // the half character as U+FFFD, its bytes as they are
  CHECK(c[3]["bytes"] == json::array({226, 130}));
  CHECK(c[3]["top_logprobs"].empty());
  // A chunk's suffix closes the delta, then logprobs, then finish_reason.
  const completion_meta m{"chatcmpl-1", 1, "m"};
  std::string event;
  append_content_event(event, content_event_prefix(m), "llo", w.chunk_suffix({sample_tokens()[1]}));
  const json chunk = json::parse(event.substr(6));
  CHECK(chunk["choices"][0]["delta"]["content"] == "llo");
  CHECK(chunk["choices"][0]["logprobs"]["content"][0]["logprob"] == -0.5);
  CHECK(chunk["choices"][0]["finish_reason"].is_null());
  // A whole answer carries it beside the message; without it, no logprobs key.
  const json whole = json::parse(completion_json(m, "Hello", "stop", {}, {}, w.object(sample_tokens())));
  CHECK(whole["choices"][0]["logprobs"]["content"].size() == 4);
  CHECK(whole["choices"][0]["message"]["content"] == "Hello");
  CHECK_FALSE(json::parse(completion_json(m, "Hello", "stop", {})).at("choices")[0].contains("logprobs"));
}

TEST_CASE("logprobs writer: /v1/completions' columns, offsets running on across a stream's chunks") {
  logprobs_writer w(true);
  auto all = sample_tokens();
  const json first = json::parse(w.object({all[0], all[1]}));
  CHECK(first["tokens"] == json::array({"He", "llo"}));
  CHECK(first["token_logprobs"][0].is_null());
  CHECK(first["token_logprobs"][1] == -0.5);
  CHECK(first["top_logprobs"][0].is_null());  // the prompt's first token: nothing predicted it
  CHECK(first["top_logprobs"][1] == json({{"llo", -0.5}, {"y", -1.25}}));  // a dict: the likelier of two "llo"
  CHECK(first["text_offset"] == json::array({0, 2}));
  const json second = json::parse(w.object({all[2], all[3]}));
  CHECK(second["text_offset"] == json::array({5, 11}));  // " wörld" is 6 characters, 7 bytes
  CHECK(second["token_logprobs"][0] == -9999.0);
  CHECK(second["top_logprobs"][1] == json::object());
  const completion_meta m{"cmpl-1", 1, "m", true};
  const json chunk = json::parse(chunk_content_json(m, "x").substr(0));
  CHECK(chunk["choices"][0]["logprobs"].is_null());
  std::string event;
  logprobs_writer fresh(true);
  append_content_event(event, content_event_prefix(m), "Hello", fresh.chunk_suffix({all[0], all[1]}));
  const json streamed = json::parse(event.substr(6));
  CHECK(streamed["choices"][0]["text"] == "Hello");
  CHECK(streamed["choices"][0]["logprobs"]["tokens"].size() == 2);
  const json whole = json::parse(completion_json(m, "Hello", "length", {}, {}, logprobs_writer(true).object(all)));
  CHECK(whole["choices"][0]["logprobs"]["text_offset"] == json::array({0, 2, 5, 11}));
  CHECK(json::parse(completion_json(m, "Hello", "length", {}))["choices"][0]["logprobs"].is_null());
}

TEST_CASE("logprob numbers: shortest form that reads back the same float") {
  for (float f : {-0.5f, -1e-8f, -123.456f, -0.1f, 0.f, -3.4028235e38f}) {
    std::string s;
    append_logprob(s, f);
    CHECK(static_cast<float>(std::stod(s)) == f);
    CHECK(json::parse(s).is_number_float());
  }
}
