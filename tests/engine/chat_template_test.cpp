// Chat templates as Hugging Face ships them, rendered to exact strings.
#include <doctest/doctest.h>

#include "engine/chat_template.hpp"

using namespace kiln::engine;

namespace {

const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const char* kQwen2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou "
    "are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const char* kMistral =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are "
    "supported!') }}{% endif %}{% endfor %}";

std::string render(const char* tmpl, const std::vector<chat_message>& msgs, bool gen = true, std::string bos = "",
                   std::string eos = "") {
  auto t = chat_template::make(tmpl, std::move(bos), std::move(eos));
  if (auto* e = std::get_if<std::string>(&t)) return "PARSE: " + *e;
  auto r = std::get<chat_template>(t).render(msgs, gen);
  return r.index() == 0 ? std::get<0>(r) : "ERROR: " + std::get<1>(r);
}

}  // namespace

TEST_CASE("chat template: Llama 3") {
  CHECK(render(kLlama3, {{"system", "You are kiln."}, {"user", "  Hi there \n"}}, true, "<|begin_of_text|>") ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are kiln.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(render(kLlama3, {{"user", "x"}}, false, "<B>") == "<B><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST_CASE("chat template: Qwen2 (ChatML) adds its default system prompt") {
  CHECK(render(kQwen2, {{"user", "Hello"}}) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render(kQwen2, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n");
}

TEST_CASE("chat template: Mistral, and raise_exception for roles out of turn") {
  CHECK(render(kMistral, {{"user", "A"}, {"assistant", "B"}, {"user", "C"}}, true, "<s>", "</s>") ==
        "<s>[INST] A [/INST]B</s>[INST] C [/INST]");
  CHECK(render(kMistral, {{"user", "A"}, {"user", "B"}}, true, "<s>", "</s>") ==
        "ERROR: Conversation roles must alternate user/assistant/user/assistant/...");
  CHECK(render(kMistral, {{"system", "S"}}, true, "<s>", "</s>") == "ERROR: Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks as transformers sets them") {
  CHECK(render("{% if true %}\nX\n{% endif %}\nY", {}) == "X\nY");
  CHECK(render("  {% if true %}X{% endif %}", {}) == "X");
  CHECK(render("a  {% if true %}X{% endif %}", {}) == "a  X");
  CHECK(render("a \n  {{- 'b' -}}  \n c", {}) == "ab" "c");
  CHECK(render("{# note #}\nA{#- x -#} B", {}) == "AB");
  CHECK(render("{%- for m in messages %}\n  {{- m.role }}:{{ m.content }};\n{%- endfor %}", {{"user", "a"}, {"assistant", "b"}}) ==
        "user:a;assistant:b;");
}

TEST_CASE("jinja: expressions, filters, tests, loop variables and namespaces") {
  const std::vector<chat_message> m = {{"system", "S"}, {"user", "U1"}, {"assistant", "A1"}};
  CHECK(render("{{ messages | length }} {{ messages[0].role | upper }} {{ messages[-1]['content'] }}", m) == "3 SYSTEM A1");
  CHECK(render("{% for x in messages if x.role != 'system' %}{{ loop.index }}{{ x.role[0] }}{% if not loop.last %},{% endif %}{% endfor %}", m) ==
        "1u,2a");
  CHECK(render("{% set ns = namespace(n=0) %}{% for x in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", m) == "3");
  CHECK(render("{% set n = 5 %}{% for x in messages %}{% set n = 1 %}{% endfor %}{{ n }}", m) == "5");  // loop scope
  CHECK(render("{{ foo is defined }} {{ none is none }} {{ 'a' is string }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 1.5 * 2 }}", {}) ==
        "False True True 3 2 3.0");
  CHECK(render("{{ 'x' if messages else 'y' }}{{ ' a b '.strip().split(' ') | join('-') }}{{ [1,2,3][1:] }}", m) == "xa-b[2, 3]");
  CHECK(render("{{ {'k': 'v'} | tojson }} {{ 'ab' ~ 3 }} {{ 'c' in 'abc' }} {{ 'z' not in ['a'] }}", {}) ==
        "{\"k\": \"v\"} ab3 True True");
  CHECK(render("{{ missing | default('d') }}{{ messages[9].role }}|", m) == "d|");
}

TEST_CASE("jinja: bad templates give one clear error, never a crash") {
  CHECK(render("{% if x %}", {}).rfind("PARSE: template syntax error: line 1: 'if' without 'endif'", 0) == 0);
  CHECK(render("{{ 'unterminated }}", {}).find("unterminated string") != std::string::npos);
  CHECK(render("{% macro m() %}{% endmacro %}", {}).find("'macro' is not supported") != std::string::npos);
  CHECK(render("{{ 1 / 0 }}", {}) == "ERROR: division by zero");
  CHECK(render("{{ 'a' + 1 }}", {}).rfind("ERROR: cannot add", 0) == 0);
  CHECK(render("{% for i in range(100000) %}{% for j in range(1000) %}x{% endfor %}{% endfor %}", {}).rfind("ERROR: template", 0) == 0);
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "{% if true %}";
  CHECK(render(deep.c_str(), {}).find("nested too deeply") != std::string::npos);
}
