// Tool calls parsed out of model output, whole and streamed, in the Hermes (Qwen) and Llama 3.1
// JSON formats; anything that is not a well-formed call stays text.
#include <doctest/doctest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "net/tool_calls.hpp"

using namespace kiln::net;

namespace {

std::string args(const tool_call& c) { return nlohmann::json::parse(c.arguments).dump(); }

// Feeds `text` in pieces of `n` bytes; returns what was streamed and the parse at the end.
std::pair<std::string, parsed_output> stream(std::string_view text, tool_format f, std::size_t n) {
  tool_call_stream s(f, "x");
  std::string sent;
  for (std::size_t i = 0; i < text.size(); i += n) sent += s.feed(text.substr(i, n));
  return {sent, s.finish()};
}

}  // namespace

TEST_CASE("tool calls: Hermes <tool_call> blocks, with text before them") {
  const auto p = parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}</tool_call>",
      tool_format::hermes, "abc");
  CHECK(p.content == "Let me check.");
  REQUIRE(p.calls.size() == 2);
  CHECK(p.calls[0].name == "get_weather");
  CHECK(args(p.calls[0]) == R"({"city":"Oslo"})");
  CHECK(args(p.calls[1]) == R"({"city":"Rome"})");  // arguments given as JSON text
  CHECK(p.calls[0].id == "call_abc_0");
  CHECK(p.calls[1].id == "call_abc_1");
  // Unclosed at the end of the answer (max_tokens cut it? no: a complete object) still counts.
  CHECK(parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}", tool_format::hermes, "a").calls.size() == 1);
  // Not calls: malformed JSON, no name, arguments not an object; the text is kept as it was.
  for (const char* bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                          "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "plain text"}) {
    const auto q = parse_tool_calls(bad, tool_format::hermes, "a");
    CHECK(q.calls.empty());
    CHECK(q.content == bad);
  }
}

TEST_CASE("tool calls: Llama 3.1 JSON, with <|python_tag|> and ';' between calls") {
  auto p = parse_tool_calls(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", tool_format::llama3_json, "a");
  REQUIRE(p.calls.size() == 1);
  CHECK(p.content.empty());
  CHECK(args(p.calls[0]) == R"({"city":"Oslo"})");
  p = parse_tool_calls("<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", \"parameters\": {}}",
                       tool_format::llama3_json, "a");
  REQUIRE(p.calls.size() == 2);
  CHECK(args(p.calls[0]) == R"({"q":"x;y"})");  // a ';' inside a string does not split
  CHECK(p.calls[1].name == "b");
  for (const char* text : {"The answer is {\"name\": 1}", "{\"name\": \"a\", \"parameters\": {}} and more", "{not json", "{\"x\": 1}"}) {
    const auto q = parse_tool_calls(text, tool_format::llama3_json, "a");
    CHECK(q.calls.empty());
    CHECK(q.content == text);
  }
  CHECK(parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", tool_format::none, "a").calls.empty());
}

TEST_CASE("tool calls streamed: text goes out at once, a call is held whole, in any split of the bytes") {
  const std::string hermes = "Checking <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>";
  const std::string llama = "{\"name\": \"f\", \"parameters\": {\"a\": 1}}";
  for (std::size_t n : {1, 2, 3, 7, 100}) {
    CAPTURE(n);
    auto [sent, end] = stream(hermes, tool_format::hermes, n);
    CHECK(sent == "Checking ");
    REQUIRE(end.calls.size() == 1);
    CHECK(args(end.calls[0]) == R"({"a":1})");
    auto [sent2, end2] = stream(llama, tool_format::llama3_json, n);
    CHECK(sent2.empty());
    REQUIRE(end2.calls.size() == 1);
    // A '<' that is not a call's start, and text with no call, stream out whole.
    auto [sent3, end3] = stream("a < b <tool_ and <tool_c", tool_format::hermes, n);
    CHECK(sent3 + end3.content == "a < b <tool_ and <tool_c");
    CHECK(end3.calls.empty());
    auto [sent4, end4] = stream("Plain answer {not a call}", tool_format::llama3_json, n);
    CHECK(sent4 + end4.content == "Plain answer {not a call}");
  }
}

TEST_CASE("tool calls: random output never breaks the parser; streamed text plus what is held is the whole answer") {
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {"<tool_call>", "</tool_call>", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}", "{", "}",
                                          "\"", "<|python_tag|>", ";", " ", "text", "\xff", "<tool_", "\n"};
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    for (int k = static_cast<int>(rng() % 8); k >= 0; --k) text += parts[rng() % parts.size()];
    for (tool_format f : {tool_format::hermes, tool_format::llama3_json}) {
      CAPTURE(text);
      const auto whole = parse_tool_calls(text, f, "r");
      auto [sent, end] = stream(text, f, 1 + rng() % 5);
      if (end.calls.empty()) CHECK(sent + end.content == text);  // nothing taken as a call: all of it is text
      for (const auto& c : whole.calls) CHECK_FALSE(nlohmann::json::parse(c.arguments, nullptr, false).is_discarded());
    }
  }
}
