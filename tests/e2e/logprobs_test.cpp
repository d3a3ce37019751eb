// logprobs through a running `kiln serve`: chat completions whole and streamed on the sim
// pool, and /v1/completions' echo scoring a prompt on a tiny CPU model, as evaluation
// harnesses use it.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;

namespace {

const std::vector<std::string> kAuth = {"Authorization: Bearer key-search"};

json post(const kiln_process& p, const std::string& path, const std::string& body) {
  const http_response r = request(p.port(), "POST", path, body, kAuth);
  CAPTURE(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

// The tokens' texts, one after another (key: of entries that are objects).
std::string joined(const json& entries, const char* key = "token") {
  std::string out;
  for (const auto& e : entries) out += key ? e[key].get<std::string>() : e.get<std::string>();
  return out;
}

}  // namespace

TEST_CASE("e2e logprobs: chat completions carry one entry per token, whole and streamed, the same each time") {
  kiln_process p(test_config(1));
  const std::string body =
      R"({"model":"chat-7b","max_tokens":6,"seed":3,"logprobs":true,"top_logprobs":4,"messages":[{"role":"user","content":"Glaze?"}]})";
  const json whole = post(p, "/v1/chat/completions", body);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == whole["usage"]["completion_tokens"].get<std::size_t>());
  CHECK(joined(content) == whole["choices"][0]["message"]["content"]);
  for (const auto& t : content) {
    CHECK(t["logprob"].get<double>() <= 0);
    REQUIRE(t["top_logprobs"].size() == 4);
    double mass = 0;
    for (const auto& alt : t["top_logprobs"]) mass += std::exp(alt["logprob"].get<double>());
    CHECK(mass <= 1 + 1e-6);
    CHECK(t["bytes"].size() == t["token"].get<std::string>().size());
  }
  CHECK(post(p, "/v1/chat/completions", body)["choices"][0]["logprobs"] == whole["choices"][0]["logprobs"]);
  // Streamed: each chunk's entries spell its content; together they are the whole answer's.
  std::string streamed_body = body;
  streamed_body.insert(1, R"("stream":true,)");
  const http_response s = request(p.port(), "POST", "/v1/chat/completions", streamed_body, kAuth);
  REQUIRE(s.status == 200);
  json entries = json::array();
  for (const auto& e : sse_data(s.body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    if (chunk["choices"].empty() || !chunk["choices"][0].contains("logprobs")) continue;
    const json& lp = chunk["choices"][0]["logprobs"]["content"];
    CHECK(joined(lp) == chunk["choices"][0]["delta"]["content"]);
    for (const auto& t : lp) entries.push_back(t);
  }
  CHECK(entries == content);
  // Without logprobs the answer has none; top_logprobs alone is refused.
  CHECK_FALSE(post(p, "/v1/chat/completions", R"({"model":"chat-7b","max_tokens":2,"messages":[{"role":"user","content":"x"}]})")
                  ["choices"][0].contains("logprobs"));
  CHECK(request(p.port(), "POST", "/v1/chat/completions",
                R"({"model":"chat-7b","top_logprobs":2,"messages":[{"role":"user","content":"x"}]})", kAuth).status == 400);
  CHECK(request(p.port(), "POST", "/v1/completions", R"({"model":"chat-7b","prompt":"x","logprobs":21})", kAuth).status == 400);
}

TEST_CASE("e2e logprobs: /v1/completions echo scores every prompt token on a real forward pass") {
  char tmpl[] = "/tmp/kiln-e2e-logprobs-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string dir = root + "/tiny";
  kiln_process p(test_config(1) + cpu_pool("tiny-chat", dir));
  const std::string prompt = "The cat sat on the mat.";
  // The answer greedily, then the prompt with the answer appended, scored.
  const json gen = post(p, "/v1/completions",
                        R"({"model":"tiny-chat","temperature":0,"max_tokens":3,"logprobs":2,"prompt":")" + prompt + "\"}");
  const json& g = gen["choices"][0]["logprobs"];
  REQUIRE(g["tokens"].size() == 3);
  CHECK(g["text_offset"][0] == 0);  // no echo: offsets count from the answer's start
  for (std::size_t i = 0; i < 3; ++i) {
    // Greedy: each token is its position's likeliest.
    double best = -1e9;
    for (const auto& [text, lp] : g["top_logprobs"][i].items()) best = std::max(best, lp.get<double>());
    CHECK(g["token_logprobs"][i].get<double>() == doctest::Approx(best).epsilon(1e-6));
  }
  const std::string answer = gen["choices"][0]["text"];
  const json scored = post(p, "/v1/completions",
                           json{{"model", "tiny-chat"}, {"temperature", 0}, {"max_tokens", 1}, {"logprobs", 1},
                                {"echo", true}, {"prompt", prompt + answer}}.dump());
  const json& s = scored["choices"][0]["logprobs"];
  const int prompt_tokens = scored["usage"]["prompt_tokens"];
  REQUIRE(s["tokens"].size() == static_cast<std::size_t>(prompt_tokens + 1));
  CHECK(scored["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);
  CHECK(s["token_logprobs"][0].is_null());
  CHECK(s["top_logprobs"][0].is_null());
  CHECK(scored["choices"][0]["text"].get<std::string>().rfind(prompt + answer, 0) == 0);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < s["tokens"].size(); ++i) {
    CHECK(s["text_offset"][i] == offset);
    for (unsigned char c : s["tokens"][i].get<std::string>()) offset += (c & 0xC0) != 0x80;
    if (i > 0) CHECK(s["token_logprobs"][i].get<double>() <= 0);
  }
  // Where the prompt's tokens end with the answer's, scoring them gives what generating them gave.
  const std::size_t n = s["tokens"].size() - 1;
  bool same = true;
  for (std::size_t k = 0; k < 3; ++k) same = same && s["tokens"][n - 3 + k] == g["tokens"][k];
  if (same) {
    for (std::size_t k = 0; k < 3; ++k)
      CHECK(s["token_logprobs"][n - 3 + k].get<double>() == doctest::Approx(g["token_logprobs"][k].get<double>()).epsilon(1e-4));
  } else {
    MESSAGE("the answer tokenized differently inside the prompt; its logprobs not compared");
  }
  // Streamed, the echo chunk carries the prompt's entries and the rest the answer's.
  const http_response st = request(p.port(), "POST", "/v1/completions",
                                   json{{"model", "tiny-chat"}, {"temperature", 0}, {"max_tokens", 2}, {"logprobs", 0},
                                        {"echo", true}, {"stream", true}, {"prompt", prompt}}.dump(),
                                   kAuth);
  REQUIRE(st.status == 200);
  const auto events = sse_data(st.body);
  REQUIRE(events.size() >= 3);
  const json echo = json::parse(events[0])["choices"][0];
  CHECK(echo["text"] == prompt);
  const json counted = post(p, "/tokenize", json{{"model", "tiny-chat"}, {"prompt", prompt}}.dump());
  CHECK(echo["logprobs"]["tokens"].size() == counted["count"].get<std::size_t>());
  CHECK(echo["logprobs"]["token_logprobs"][0].is_null());
  CHECK(joined(echo["logprobs"]["tokens"], nullptr) == prompt);
  const json next = json::parse(events[1])["choices"][0];
  CHECK(next["logprobs"]["text_offset"][0] == prompt.size());  // offsets run on after the echo

  // A prompt of token ids: the model's last row is the highest id it takes; one past it is a
  // 400 naming the vocabulary (it once read the last row instead), and the pool serves on.
  const http_response far = request(p.port(), "POST", "/v1/completions",
                                    R"({"model":"tiny-chat","max_tokens":1,"prompt":[1,16777215]})", kAuth);
  REQUIRE(far.status == 400);
  const std::string msg = json::parse(far.body)["error"]["message"];
  CHECK(msg.find("Token id 16777215 in 'prompt' is outside the model's vocabulary of ") == 0);
  const int rows = std::atoi(msg.c_str() + msg.find("vocabulary of ") + 14);
  REQUIRE(rows > 256);
  const auto ids = [](int id) { return R"({"model":"tiny-chat","max_tokens":1,"prompt":[5,)" + std::to_string(id) + "]}"; };
  CHECK(post(p, "/v1/completions", ids(rows - 1))["usage"]["prompt_tokens"] == 2);
  const http_response past = request(p.port(), "POST", "/v1/completions", ids(rows), kAuth);
  CHECK(past.status == 400);
  CHECK(json::parse(past.body)["error"]["param"] == "prompt");
  CHECK(post(p, "/v1/completions", ids(0))["choices"][0]["finish_reason"] == "length");
  std::filesystem::remove_all(root);
}

TEST_CASE("e2e sampling: logit_bias and the penalties steer a real forward pass; logprobs stay the model's") {
  char tmpl[] = "/tmp/kiln-e2e-penalties-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  kiln_process p(test_config(1) + cpu_pool("tiny-chat", root + "/tiny"));
  const json ids = post(p, "/tokenize", R"({"model":"tiny-chat","prompt":"kiln glaze","add_special_tokens":false})");
  const int x = ids["tokens"][0];
  const std::string piece = post(p, "/detokenize", json{{"model", "tiny-chat"}, {"tokens", {x}}}.dump())["prompt"];
  REQUIRE_FALSE(piece.empty());
  const auto completion = [&](const json& extra) {
    json b{{"model", "tiny-chat"}, {"temperature", 0}, {"max_tokens", 4}, {"logprobs", 1}, {"prompt", "The cat sat"}};
    b.update(extra);
    return post(p, "/v1/completions", b.dump());
  };
  const json plain = completion(json::object());
  // +100 on one token: greedy takes it every time, penalties or not, and each entry's logprob
  // is the raw distribution's (no likelier than the raw top alternative, far from 0).
  for (const json& extra : {json{{"logit_bias", {{std::to_string(x), 100}}}},
                            json{{"logit_bias", {{std::to_string(x), 100}}}, {"frequency_penalty", 2}, {"presence_penalty", 2},
                                 {"repetition_penalty", 1.3}}}) {
    CAPTURE(extra.dump());
    const json forced = completion(extra);
    CHECK(forced["choices"][0]["text"] == piece + piece + piece + piece);
    const json& lp = forced["choices"][0]["logprobs"];
    for (std::size_t i = 0; i < 4; ++i) {
      double best = -1e9;
      for (const auto& [text, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
      CHECK(lp["token_logprobs"][i].get<double>() <= best + 1e-6);
    }
  }
  // -100 on the unbiased answer's first token (its id: its piece tokenized, when that is one
  // token): the answer starts otherwise.
  const std::string first = plain["choices"][0]["logprobs"]["tokens"][0];
  const json first_ids = post(p, "/tokenize", json{{"model", "tiny-chat"}, {"prompt", first}, {"add_special_tokens", false}}.dump());
  if (first_ids["count"] == 1) {
    const json banned = completion({{"logit_bias", {{std::to_string(first_ids["tokens"][0].get<int>()), -100}}}});
    CHECK(banned["choices"][0]["logprobs"]["tokens"][0] != first);
  } else {
    MESSAGE("the first token's piece tokenizes as several tokens; the ban not tried");
  }
  // Negative penalties reward repeats: the answer differs from the plain one (whose 12 greedy
  // tokens on these random weights repeat none), the same streamed as whole.
  const json pen{{"frequency_penalty", -2}, {"presence_penalty", -0.5}, {"repetition_penalty", 1.2}, {"max_tokens", 12}};
  const json whole = completion(pen);
  json streamed_body{{"model", "tiny-chat"}, {"temperature", 0}, {"max_tokens", 12}, {"prompt", "The cat sat"}, {"stream", true}};
  streamed_body.update(pen);
  const http_response st = request(p.port(), "POST", "/v1/completions", streamed_body.dump(), kAuth);
  REQUIRE(st.status == 200);
  std::string text;
  for (const auto& e : sse_data(st.body))
    if (e != "[DONE]" && !json::parse(e)["choices"].empty()) text += json::parse(e)["choices"][0]["text"].get<std::string>();
  CHECK(text == whole["choices"][0]["text"]);
  CHECK(whole["choices"][0]["text"] != completion({{"max_tokens", 12}})["choices"][0]["text"]);
  // A token id past the vocabulary is a 400 naming logit_bias; the pool serves on.
  const http_response far = request(p.port(), "POST", "/v1/chat/completions",
                                    R"({"model":"tiny-chat","logit_bias":{"16777215":5},"messages":[{"role":"user","content":"x"}]})", kAuth);
  REQUIRE(far.status == 400);
  CHECK(json::parse(far.body)["error"]["param"] == "logit_bias");
  CHECK(json::parse(far.body)["error"]["message"].get<std::string>().find("vocabulary") != std::string::npos);
  CHECK(post(p, "/v1/chat/completions", R"({"model":"tiny-chat","max_tokens":2,"presence_penalty":1,"logit_bias":{"5":-100},)"
                                        R"("messages":[{"role":"user","content":"x"}]})")["usage"]["completion_tokens"] == 2);
  // <|endoftext|> ends an answer as <|im_end|> does (the model's generation_config.json lists
  // both, as Qwen's): forced first, the answer is that one token, with no text; ignore_eos passes it.
  const json text_end = post(p, "/tokenize", R"({"model":"tiny-chat","prompt":"<|endoftext|>","add_special_tokens":false})");
  REQUIRE(text_end["count"] == 1);
  const std::string end_id = std::to_string(text_end["tokens"][0].get<int>());
  const json ended = completion({{"logit_bias", {{end_id, 100}}}});
  CHECK(ended["choices"][0]["finish_reason"] == "stop");
  CHECK(ended["usage"]["completion_tokens"] == 1);
  CHECK(ended["choices"][0]["text"] == "");
  const json passed = completion({{"logit_bias", {{end_id, 100}}}, {"ignore_eos", true}});
  CHECK(passed["choices"][0]["finish_reason"] == "length");
  CHECK(passed["usage"]["completion_tokens"] == 4);
  const json later = completion({{"logit_bias", {{end_id, 100}}}, {"min_tokens", 2}});
  CHECK(later["usage"]["completion_tokens"] == 3);
  CHECK(later["choices"][0]["finish_reason"] == "stop");
  // min_tokens past the pool's default max_tokens: a 400 on admission.
  const http_response least = request(p.port(), "POST", "/v1/chat/completions",
                                      R"({"model":"tiny-chat","min_tokens":16777216,"messages":[{"role":"user","content":"x"}]})", kAuth);
  CHECK(least.status == 400);
  const http_response over = request(p.port(), "POST", "/v1/chat/completions",
                                     R"({"model":"chat-7b","min_tokens":100000,"messages":[{"role":"user","content":"x"}]})", kAuth);
  CHECK(over.status == 400);
  CHECK(json::parse(over.body)["error"]["param"] == "min_tokens");
  CHECK(json::parse(over.body)["error"]["message"].get<std::string>().find("default") != std::string::npos);
  // ignore_eos on the sim pool: every answer runs to max_tokens, whole and streamed.
  for (int seed = 1; seed <= 3; ++seed) {
    const std::string b = R"({"model":"chat-7b","max_tokens":300,"ignore_eos":true,"seed":)" + std::to_string(seed) +
                          R"(,"messages":[{"role":"user","content":"x"}]})";
    const json r = post(p, "/v1/chat/completions", b);
    CHECK(r["usage"]["completion_tokens"] == 300);
    CHECK(r["choices"][0]["finish_reason"] == "length");
    std::string streamed = b;
    streamed.insert(1, R"("stream":true,)");
    const http_response st2 = request(p.port(), "POST", "/v1/chat/completions", streamed, kAuth);
    std::string content;
    for (const auto& e : sse_data(st2.body)) {
      if (e == "[DONE]") continue;
      const json c = json::parse(e);
      if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) content += c["choices"][0]["delta"]["content"].get<std::string>();
      if (c.contains("usage") && !c["usage"].is_null()) CHECK(c["usage"]["completion_tokens"] == 300);
    }
    CHECK(content == r["choices"][0]["message"]["content"]);
  }
  // stop_token_ids on the sim pool: the answer ends at the first of them (ignore_eos or not),
  // without its text; an id past a model's vocabulary is a 400 (the sim's has no rows to check).
  const std::string ask = R"("model":"chat-7b","max_tokens":30,"seed":11,"ignore_eos":true,"messages":[{"role":"user","content":"x"}])";
  const std::string full = post(p, "/v1/chat/completions", "{" + ask + "}")["choices"][0]["message"]["content"];
  const json words = post(p, "/tokenize", json{{"model", "chat-7b"}, {"prompt", full}, {"add_special_tokens", false}}.dump());
  REQUIRE(words["count"].get<int>() > 6);
  const int stop_id = words["tokens"][5];
  const json cut = post(p, "/v1/chat/completions", "{" + ask + R"(,"stop_token_ids":[)" + std::to_string(stop_id) + "]}");
  CHECK(cut["choices"][0]["finish_reason"] == "stop");
  const std::string cut_text = cut["choices"][0]["message"]["content"];
  CHECK(cut_text.size() < full.size());
  CHECK(full.rfind(cut_text, 0) == 0);
  CHECK(cut["usage"]["completion_tokens"].get<int>() <= 6);
  const http_response far_stop = request(p.port(), "POST", "/v1/completions",
                                         R"({"model":"tiny-chat","prompt":"x","stop_token_ids":[5,16777215]})", kAuth);
  CHECK(far_stop.status == 400);
  CHECK(json::parse(far_stop.body)["error"]["param"] == "stop_token_ids");
  // The sim pool takes the rest too (its answers are modelled, whatever the sampler's settings).
  CHECK(post(p, "/v1/chat/completions", R"({"model":"chat-7b","max_tokens":2,"frequency_penalty":-2,"logit_bias":{"5":-100},)"
                                        R"("messages":[{"role":"user","content":"x"}]})")["usage"]["completion_tokens"] == 2);
  std::filesystem::remove_all(root);
}
