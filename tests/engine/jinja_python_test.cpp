// The parts of kiln's Jinja that must behave as Python's Jinja2 does under transformers:
// slices with steps, Unicode-aware strip/trim and case, tojson's key order, indent and
// escapes, Python's float repr, strftime_now, and conversations given as JSON (tools).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "engine/chat_template.hpp"
#include "engine/unicode_text.hpp"

using namespace kiln::engine;
using ojson = nlohmann::ordered_json;

namespace {

// Renders `tmpl` over `conversation` at 2024-07-26 12:00:00 UTC; errors come back prefixed.
std::string run(const std::string& tmpl, const ojson& conversation = ojson::object()) {
  auto t = chat_template::make(tmpl, "<s>", "</s>");
  if (auto* e = std::get_if<std::string>(&t)) return "PARSE: " + *e;
  auto r = std::get<chat_template>(t).render_json(conversation, 1721995200);
  return r.index() == 0 ? std::get<0>(r) : "ERROR: " + std::get<1>(r);
}

}  // namespace

TEST_CASE("jinja: slices with a step, as Python's (Qwen3 walks messages[::-1])") {
  const ojson c = {{"xs", {0, 1, 2, 3, 4, 5}}, {"s", "héllo"}};
  CHECK(run("{{ xs[::-1] }}", c) == "[5, 4, 3, 2, 1, 0]");
  CHECK(run("{{ xs[::2] }}|{{ xs[1::2] }}|{{ xs[-2::-2] }}", c) == "[0, 2, 4]|[1, 3, 5]|[4, 2, 0]");
  CHECK(run("{{ xs[4:1:-1] }}|{{ xs[1:4:-1] }}|{{ xs[:-4:-1] }}", c) == "[4, 3, 2]|[]|[5, 4, 3]");
  CHECK(run("{{ xs[10::-1] }}|{{ xs[-10:2] }}|{{ xs[2:] }}", c) == "[5, 4, 3, 2, 1, 0]|[0, 1]|[2, 3, 4, 5]");
  // Strings by characters, not bytes.
  CHECK(run("{{ s[::-1] }}|{{ s[1] }}|{{ s[:2] }}|{{ s | length }}", c) == "olléh|é|hé|5");
  CHECK(run("{{ xs[::0] }}", c).rfind("ERROR: ", 0) == 0);
}

TEST_CASE("jinja: strip, trim and case are Python's, Unicode whitespace included") {
  const ojson c = {{"s", "\u00a0\u3000 text \u2003\n"}, {"w", "Ünïcode ß"}};
  CHECK(run("[{{ s.strip() }}][{{ s | trim }}][{{ s.lstrip() }}][{{ s.rstrip() }}]", c) ==
        "[text][text][text \u2003\n][\u00a0\u3000 text]");
  CHECK(run("[{{ 'xxhixx'.strip('x') }}][{{ 'ab'.strip(none) }}]") == "[hi][ab]");
  // A zero-width space and a BOM are not whitespace in Python.
  CHECK(run("[{{ s.strip() }}]", {{"s", "\u200b a \ufeff"}}) == "[\u200b a \ufeff]");
  CHECK(run("{{ w.upper() }}|{{ w | lower }}", c) == "ÜNÏCODE SS|ünïcode ß");
  CHECK(strip_python_space("\u0085\u2028x\u2029\u001c", true, true) == "x");
}

TEST_CASE("jinja: tojson keeps key order and prints as json.dumps does") {
  const ojson tool = {{"type", "function"},
                      {"function", {{"name", "f"}, {"parameters", {{"z", 1}, {"a", {1.5, true, nullptr}}, {"e", ojson::object()}}}}}};
  CHECK(run("{{ t | tojson }}", {{"t", tool}}) ==
        R"({"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": [1.5, true, null], "e": {}}}})");
  CHECK(run("{{ t | tojson(indent=2) }}", {{"t", {{"b", {1, 2}}, {"a", ojson::array()}}}}) ==
        "{\n  \"b\": [\n    1,\n    2\n  ],\n  \"a\": []\n}");
  CHECK(run("{{ s | tojson }}", {{"s", "q\"\\\n\t\b\f\x01é"}}) == R"("q\"\\\n\t\b\f\u0001é")");
  CHECK(run("{{ d.items() | list }}", {{"d", {{"k2", 1}, {"k1", 2}}}}) == "[['k2', 1], ['k1', 2]]");
  // Python's repr for floats: the shortest text that reads back the same.
  CHECK(run("{{ 0.1 }} {{ 1.0 }} {{ 2.5e-7 }} {{ x }}", {{"x", 1e20}}) == "0.1 1.0 2.5e-07 1e+20");
}

TEST_CASE("jinja: strftime_now formats the render's time; a conversation's keys are globals") {
  CHECK(run("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %H:%M') }}") == "26 Jul 2024|July 12:00");
  // add_generation_prompt defaults to true; the conversation may turn it off or add its own keys.
  CHECK(run("{{ add_generation_prompt }} {{ bos_token }}{{ eos_token }}") == "True <s></s>");
  CHECK(run("{{ add_generation_prompt }} {{ enable_thinking }}", {{"add_generation_prompt", false}, {"enable_thinking", false}}) ==
        "False False");
  CHECK(run("{{ messages[0].tool_calls[0].function.arguments.city }}",
            {{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"function", {{"arguments", {{"city", "Oslo"}}}}}}}}}}}}) == "Oslo");
}

TEST_CASE("jinja: break and continue, as transformers' loopcontrols; outside a loop they are errors") {
  const ojson c = {{"xs", {1, 2, 3, 4, 5}}};
  CHECK(run("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", c) ==
        "13");
  // The last user message, found from the end (what Qwen-style templates look for).
  CHECK(run("{% for m in msgs[::-1] %}{% if m.role == 'user' %}{{ m.content }}{% break %}{% endif %}{% endfor %}",
            {{"msgs", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}, {{"role", "assistant"}, {"content", "c"}}}}}) ==
        "b");
  CHECK(run("{% for x in xs %}{% for y in xs %}{% break %}{% endfor %}{{ x }}{% endfor %}", c) == "12345");  // the inner loop only
  CHECK(run("{% break %}") == "ERROR: 'break' outside a loop");
  CHECK(run("{% continue x %}").rfind("PARSE: ", 0) == 0);
}

TEST_CASE("jinja: a tag's closing marks inside a string literal do not end it (Mistral v0.3 writes {{- \"}}\" }})") {
  CHECK(run(R"({{- "}}" }}|{{ '}}' ~ "x" }}|{% set a = "%}" %}{{ a }}|{{ "a\"}}b" }})") == R"(}}|}}x|%}|a"}}b)");
  CHECK(run(R"({# "}} #}{{ 1 }})") == "1");  // comments have no strings: the first "#}" ends them
  CHECK(run(R"({{ "}} )").rfind("PARSE: ", 0) == 0);  // an unterminated string leaves the tag unclosed
}

TEST_CASE("jinja: select, reject, selectattr, rejectattr and map(attribute=), as Jinja's") {
  const ojson c = {{"ms", {{{"role", "system"}, {"n", 0}}, {{"role", "user"}, {"n", 1}}, {{"role", "user"}, {"n", 2}},
                           {{"role", "assistant"}, {"tool_calls", nullptr}}}},
                   {"xs", {0, 1, 2, 3, nullptr, "", "a"}}};
  CHECK(run(R"({{ ms | selectattr("role", "equalto", "user") | map(attribute="n") | list }})", c) == "[1, 2]");
  CHECK(run(R"({{ ms | rejectattr("role", "equalto", "user") | list | length }})", c) == "2");
  CHECK(run(R"({{ ms | selectattr("n") | list | length }}|{{ ms | selectattr("tool_calls", "none") | list | length }})", c) == "2|1");
  CHECK(run(R"({{ ms | selectattr("tool_calls", "undefined") | list | length }})", c) == "3");  // missing: undefined
  CHECK(run(R"({{ xs | select | list }}|{{ xs | select("number") | reject("odd") | list }})", c) == "[1, 2, 3, 'a']|[0, 2]");
  CHECK(run(R"({{ ms | map(attribute="missing") | select("defined") | list }})", c) == "[]");
  CHECK(run(R"({{ xs | select("nosuchtest") | list }})", c).rfind("ERROR: ", 0) == 0);
  CHECK(run(R"({{ ms | selectattr | list }})", c).rfind("ERROR: ", 0) == 0);
}
