// The OpenAI fields agent frameworks send, and /tokenize and /detokenize, through a running
// `kiln serve`: on the sim pool, and on a tiny CPU model whose chat template renders tools,
// a template variable and strftime_now.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;

namespace {

const std::vector<std::string> kAuth = {"Authorization: Bearer key-search"};

std::string chat(const std::string& model, const std::string& extra) {
  return "{\"model\":\"" + model + "\",\"max_tokens\":3,\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}]" +
         extra + "}";
}

// A template that shows what it was given: tools as JSON, one variable, the year.
constexpr const char* kToolTemplate =
    "{%- if messages[0].role == 'assistant' %}{{ raise_exception('Conversations start with the user.') }}{% endif -%}"
    "{%- if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif -%}"
    "{%- if mood is defined %}mood={{ mood }}\n{% endif -%}"
    "year={{ strftime_now('%Y') }}\n"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<call>{{ c.function.arguments | tojson }}</call>{% endfor %}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

}  // namespace

TEST_CASE("e2e openai: include_usage false leaves out the usage chunk; structured output is a clear 400") {
  kiln_process p(test_config(1));
  auto events_of = [&](const std::string& extra) {
    const http_response r = request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", ",\"stream\":true" + extra), kAuth);
    REQUIRE(r.status == 200);
    return sse_data(r.body);
  };
  auto has_usage = [](const std::vector<std::string>& events) {
    for (const auto& e : events)
      if (e != "[DONE]" && json::parse(e).contains("usage")) return true;
    return false;
  };
  const auto plain = events_of("");
  CHECK(has_usage(plain));  // kiln's default: the usage chunk comes
  CHECK(has_usage(events_of(",\"stream_options\":{\"include_usage\":true}")));
  const auto without = events_of(",\"stream_options\":{\"include_usage\":false},\"user\":null,\"tool_choice\":\"auto\"");
  CHECK_FALSE(has_usage(without));
  CHECK(without.size() == plain.size() - 1);
  CHECK(without.back() == "[DONE]");
  for (const char* format : {"json_object", "json_schema"}) {
    const http_response r = request(p.port(), "POST", "/v1/chat/completions",
                                    chat("chat-7b", std::string(",\"response_format\":{\"type\":\"") + format + "\"}"), kAuth);
    CHECK(r.status == 400);
    CHECK(json::parse(r.body)["error"]["message"].get<std::string>().find("not supported yet") != std::string::npos);
  }
  CHECK(request(p.port(), "POST", "/v1/chat/completions", chat("chat-7b", ",\"response_format\":{\"type\":\"text\"}"), kAuth).status == 200);
  // /tokenize and /detokenize need a team's key, and answer in vLLM's shapes.
  CHECK(request(p.port(), "POST", "/tokenize", R"({"model":"chat-7b","prompt":"a"})").status == 401);
  const json t = json::parse(request(p.port(), "POST", "/tokenize", R"({"model":"chat-7b","prompt":"the kiln"})", kAuth).body);
  CHECK(t["count"] == 2);
  CHECK(t["tokens"].size() == 2);
  CHECK(t["max_model_len"].get<int>() > 0);
  const json d = json::parse(request(p.port(), "POST", "/detokenize",
                                     R"({"model":"chat-7b","tokens":)" + t["tokens"].dump() + "}", kAuth).body);
  CHECK(d["prompt"] == " the kiln");  // the stand-in's words carry their leading space
  CHECK(request(p.port(), "POST", "/tokenize", R"({"model":"nope","prompt":"a"})", kAuth).status == 404);
  CHECK(request(p.port(), "POST", "/tokenize", R"({"model":"chat-7b","prompt":"a","messages":[]})", kAuth).status == 400);
  CHECK(request(p.port(), "POST", "/detokenize", R"({"model":"chat-7b","tokens":[1.5]})", kAuth).status == 400);
  const auto broken = request(p.port(), "POST", "/tokenize", "{\"model\":\"chat-7b\",}", kAuth);
  CHECK(broken.status == 400);
  CHECK(json::parse(broken.body)["error"]["message"] ==
        "We could not parse the JSON body of your request: syntax error while parsing object key - unexpected '}'; "
        "expected string literal (line 1, column 20).");
  CHECK(json::parse(request(p.port(), "POST", "/detokenize", "[1]", kAuth).body)["error"]["message"] ==
        "The request body must be a JSON object.");
}

TEST_CASE("e2e openai: tools, tool calls and template variables reach a real template; /tokenize shows the prompt served") {
  char tmpl[] = "/tmp/kiln-e2e-tools-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string dir = root + "/tiny";
  REQUIRE(std::system((std::string(kiln_binary()) + " make-tiny-model " + dir + " >/dev/null").c_str()) == 0);
  {
    std::ifstream in(dir + "/tokenizer_config.json");
    json cfg = json::parse(in);
    cfg["chat_template"] = kToolTemplate;
    std::ofstream(dir + "/tokenizer_config.json") << cfg.dump();
  }
  kiln_process p(test_config(1) + cpu_pool("tiny-chat", dir, false));
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";
  const json shown = json::parse(request(p.port(), "POST", "/tokenize",
                                         R"({"model":"tiny-chat","messages":[{"role":"user","content":"Weather in Oslo?"}])" + tools +
                                             R"(,"chat_template_kwargs":{"mood":"calm"}})",
                                         kAuth).body);
  const std::string prompt = shown["prompt"];
  CHECK(prompt.find(R"(<tools>[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object")") == 0);
  CHECK(prompt.find("mood=calm\n") != std::string::npos);
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  CHECK(prompt.find("year=" + std::to_string(1900 + tm.tm_year)) != std::string::npos);
  CHECK(prompt.substr(prompt.size() - 22) == "<|im_start|>assistant\n");
  // The chat completion renders the same prompt: its usage counts the same tokens.
  const json done = json::parse(request(p.port(), "POST", "/v1/chat/completions",
                                        chat("tiny-chat", tools + R"(,"chat_template_kwargs":{"mood":"calm"})"), kAuth).body);
  CHECK(done["usage"]["prompt_tokens"] == shown["count"]);
  const json bare = json::parse(request(p.port(), "POST", "/v1/chat/completions", chat("tiny-chat", ""), kAuth).body);
  CHECK(bare["usage"]["prompt_tokens"].get<int>() < shown["count"].get<int>());
  // An assistant turn's tool call (arguments as a JSON string, content null) reaches the
  // template with its arguments as an object.
  const json call = json::parse(request(p.port(), "POST", "/tokenize",
                                        R"({"model":"tiny-chat","add_generation_prompt":false,"messages":[{"role":"user","content":"x"},)"
                                        R"({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",)"
                                        R"("function":{"name":"get_weather","arguments":"{\"city\": \"Oslo\"}"}}]},)"
                                        R"({"role":"tool","tool_call_id":"c1","content":"21C"}]})",
                                        kAuth).body);
  const std::string rendered = call["prompt"];
  CHECK(rendered.find(R"(<|im_start|>assistant
<call>{"city": "Oslo"}</call><|im_end|>)") != std::string::npos);
  CHECK(rendered.find("<|im_start|>tool\n21C<|im_end|>\n") != std::string::npos);
  CHECK(rendered.find("<|im_start|>assistant\n", rendered.size() - 30) == std::string::npos);  // no generation prompt
  // A template that raises: the request is a 400 carrying the template's message.
  for (const char* path : {"/v1/chat/completions", "/tokenize"}) {
    const http_response raised = request(p.port(), "POST", path,
                                         R"({"model":"tiny-chat","messages":[{"role":"assistant","content":"hi"}]})", kAuth);
    CHECK(raised.status == 400);
    CHECK(json::parse(raised.body)["error"]["message"].get<std::string>().find("Conversations start with the user.") !=
          std::string::npos);
  }
  // Ids round-trip through /detokenize (special tokens included).
  const json back = json::parse(request(p.port(), "POST", "/detokenize",
                                        R"({"model":"tiny-chat","tokens":)" + call["tokens"].dump() + "}", kAuth).body);
  CHECK(back["prompt"] == rendered);
  std::filesystem::remove_all(root);
}

TEST_CASE("e2e openai: /v1/completions with a text or token-id prompt, echo, streamed and not") {
  kiln_process p(test_config(1));
  const json text = json::parse(request(p.port(), "POST", "/v1/completions",
                                        R"({"model":"chat-7b","prompt":"the kiln","max_tokens":4,"echo":true})", kAuth).body);
  CHECK(text["object"] == "text_completion");
  CHECK(text["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  const std::string out = text["choices"][0]["text"];
  CHECK(out.rfind("the kiln", 0) == 0);
  CHECK(out.size() > 8);
  CHECK(text["usage"]["prompt_tokens"] == 2);  // the prompt as it is, no template around it
  CHECK(text["usage"]["completion_tokens"] == 4);
  const json ids = json::parse(request(p.port(), "POST", "/v1/completions", R"({"model":"chat-7b","prompt":[7,8,9],"max_tokens":2})", kAuth).body);
  CHECK(ids["usage"]["prompt_tokens"] == 3);
  CHECK(ids["choices"][0]["finish_reason"] == "length");
  const http_response s = request(p.port(), "POST", "/v1/completions",
                                  R"({"model":"chat-7b","prompt":"clay","max_tokens":3,"stream":true,"echo":true})", kAuth);
  REQUIRE(s.status == 200);
  const auto events = sse_data(s.body);
  REQUIRE(events.size() >= 5);  // echo, 3 tokens, finish, usage, [DONE]
  CHECK(json::parse(events[0])["choices"][0]["text"] == "clay");
  std::string streamed;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    CHECK(e["object"] == "text_completion");
    if (!e["choices"].empty()) streamed += e["choices"][0]["text"].get<std::string>();
  }
  CHECK(streamed.rfind("clay", 0) == 0);
  CHECK(events.back() == "[DONE]");
  CHECK(request(p.port(), "POST", "/v1/completions", R"({"model":"chat-7b","prompt":"x","logprobs":true})", kAuth).status == 400);
  CHECK(request(p.port(), "POST", "/v1/completions", R"({"model":"nope","prompt":"x"})", kAuth).status == 404);
}

TEST_CASE("e2e openai fuzz: mutated completions, tokenize and tool requests are answered, never a crash") {
  kiln_process p(test_config(1));
  std::mt19937 rng(20261201);
  const std::vector<std::pair<std::string, std::string>> valid = {
      {"/v1/completions", R"({"model":"chat-7b","prompt":"the kiln","max_tokens":2,"echo":true})"},
      {"/v1/completions", R"({"model":"chat-7b","prompt":[[1,2,3]],"max_tokens":2,"stream":true})"},
      {"/tokenize", R"({"model":"chat-7b","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"tools":[{"type":"function","function":{"name":"f"}}]})"},
      {"/detokenize", R"({"model":"chat-7b","tokens":[1,2,3]})"},
      {"/v1/chat/completions", R"({"model":"chat-7b","max_tokens":2,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"a","content":"1"}],"chat_template_kwargs":{"k":[1,{"z":null}]}})"}};
  for (int i = 0; i < 200; ++i) {
    const auto& [path, body] = valid[rng() % valid.size()];
    std::string b = body;
    switch (rng() % 4) {
      case 0: b[rng() % b.size()] = static_cast<char>(rng() % 256); break;
      case 1: b.erase(rng() % b.size()); break;
      case 2: b.insert(rng() % b.size(), std::string(1 + rng() % 4, static_cast<char>(rng() % 256))); break;
      case 3: break;  // as it is
    }
    const http_response r = request(p.port(), "POST", path, b, kAuth);
    CAPTURE(r.status);
    CHECK(is_answer(r));
  }
  CHECK(request(p.port(), "GET", "/healthz").status == 200);
  CHECK(request(p.port(), "POST", valid[0].first, valid[0].second, kAuth).status == 200);
}

TEST_CASE("e2e openai: a tokenizer's BOS (its post_processor) on /v1/completions and /tokenize, as vLLM adds it") {
  char tmpl[] = "/tmp/kiln-e2e-bos-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string dir = root + "/tiny";
  REQUIRE(std::system((std::string(kiln_binary()) + " make-tiny-model " + dir + " >/dev/null").c_str()) == 0);
  int bos = -1;
  {
    std::ifstream in(dir + "/tokenizer.json");
    json tok = json::parse(in);
    for (const auto& a : tok["added_tokens"])
      if (a["content"] == "<|endoftext|>") bos = a["id"];
    tok["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", json::array({{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
                                                     {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                             {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {bos}}}}}}};
    std::ofstream(dir + "/tokenizer.json") << tok.dump();
  }
  REQUIRE(bos >= 0);
  kiln_process p(test_config(1) + cpu_pool("tiny-chat", dir, false));
  const auto post = [&](const char* path, const std::string& body) {
    const http_response r = request(p.port(), "POST", path, body, kAuth);
    INFO(body << " -> " << r.body);
    return std::make_pair(r.status, json::parse(r.body, nullptr, false));
  };
  // /tokenize: a prompt gets the BOS unless asked not to; token_strs are the vocabulary's.
  const auto [s1, with] = post("/tokenize", R"({"model":"tiny-chat","prompt":"the kiln fires","return_token_strs":true})");
  REQUIRE(s1 == 200);
  const auto [s2, without] = post("/tokenize", R"({"model":"tiny-chat","prompt":"the kiln fires","add_special_tokens":false})");
  REQUIRE(s2 == 200);
  REQUIRE(with["tokens"].size() == without["tokens"].size() + 1);
  CHECK(with["tokens"][0] == bos);
  CHECK(std::equal(without["tokens"].begin(), without["tokens"].end(), with["tokens"].begin() + 1));
  CHECK(without["token_strs"].is_null());
  REQUIRE(with["token_strs"].size() == with["tokens"].size());
  CHECK(with["token_strs"][0] == "<|endoftext|>");
  std::string pieces;
  for (std::size_t i = 1; i < with["token_strs"].size(); ++i) pieces += with["token_strs"][i].get<std::string>();
  CHECK(pieces == "theĠkilnĠfires");  // byte-level: a space is Ġ in the vocabulary
  // Messages: the template writes its own; add_special_tokens true puts the BOS before it.
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const auto [s3, chat] = post("/tokenize", R"({"model":"tiny-chat",)" + msgs + "}");
  const auto [s4, chat_bos] = post("/tokenize", R"({"model":"tiny-chat","add_special_tokens":true,)" + msgs + "}");
  REQUIRE(s3 == 200);
  REQUIRE(s4 == 200);
  CHECK(chat["tokens"][0] != bos);
  CHECK(chat_bos["count"].get<int>() == chat["count"].get<int>() + 1);
  CHECK(chat_bos["tokens"][0] == bos);
  // The chat completion counts the template's tokens only; a completion the BOS too.
  const auto [s5, answer] = post("/v1/chat/completions", R"({"model":"tiny-chat","max_tokens":2,)" + msgs + "}");
  REQUIRE(s5 == 200);
  CHECK(answer["usage"]["prompt_tokens"] == chat["count"]);
  const auto [s6, plain] = post("/v1/completions", R"({"model":"tiny-chat","prompt":"the kiln fires","max_tokens":2})");
  const auto [s7, raw] =
      post("/v1/completions", R"({"model":"tiny-chat","prompt":"the kiln fires","max_tokens":2,"add_special_tokens":false})");
  const auto [s8, ids] = post("/v1/completions", R"({"model":"tiny-chat","max_tokens":2,"prompt":)" + without["tokens"].dump() + "}");
  REQUIRE(s6 == 200);
  REQUIRE(s7 == 200);
  REQUIRE(s8 == 200);
  CHECK(plain["usage"]["prompt_tokens"] == with["count"]);
  CHECK(raw["usage"]["prompt_tokens"] == without["count"]);
  CHECK(ids["usage"]["prompt_tokens"] == without["count"]);  // token ids go as they are
  // Echo with logprobs: the BOS is the first prompt token (unscored); the text is the prompt's.
  const auto [s9, echoed] =
      post("/v1/completions", R"({"model":"tiny-chat","prompt":"the kiln fires","max_tokens":1,"echo":true,"logprobs":0})");
  REQUIRE(s9 == 200);
  const json& lp = echoed["choices"][0]["logprobs"];
  CHECK(echoed["choices"][0]["text"].get<std::string>().rfind("the kiln fires", 0) == 0);
  REQUIRE(lp["token_logprobs"].size() == with["tokens"].size() + 1);
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["token_logprobs"][1].is_number());
  // Flags that are not booleans, and unknown keys beside a prompt, are 400s naming them.
  for (const char* bad : {R"({"model":"tiny-chat","prompt":"x","add_special_tokens":"yes"})",
                          R"({"model":"tiny-chat","prompt":"x","return_token_strs":1})",
                          R"({"model":"tiny-chat","add_generation_prompt":"banana","messages":[{"role":"user","content":"x"}]})",
                          R"({"model":"tiny-chat","prompt":"x","add_generation_prompt":true})"}) {
    const auto [status, e] = post("/tokenize", bad);
    CHECK(status == 400);
    CHECK(e["error"]["param"].is_string());
  }
  const auto [s10, e10] = post("/v1/completions", R"({"model":"tiny-chat","prompt":"x","add_special_tokens":0})");
  CHECK(s10 == 400);
  CHECK(e10["error"]["param"] == "add_special_tokens");
  std::filesystem::remove_all(root);
}
