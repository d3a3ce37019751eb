// POST /tokenize and POST /detokenize, in vLLM's shapes: a model and a prompt (or messages,
// rendered by the model's chat template first) -> {count, max_model_len, tokens, token_strs,
// prompt}; a model and token ids -> {prompt}. Admission holds the tokenizers and answers.
#include <chrono>

#include <caf/actor_cast.hpp>
#include <caf/actor_registry.hpp>
#include <nlohmann/json.hpp>

#include "actors/ask.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/tokenize_call.hpp"
#include "net/admin_reply.hpp"
#include "net/json_body.hpp"
#include "net/openai.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::ordered_json;
constexpr auto kTimeout = std::chrono::seconds(10);

void ask_admission(front& f, const std::shared_ptr<exchange>& ex, actors::tokenize_request q, bool detokenize) {
  const bool want_strs = q.token_strs;
  auto admission = caf::actor_cast<caf::actor>(f.deps.sys->registry().get(actors::admission_name));
  actors::ask<actors::tokenize_result>(
      *f.deps.sys, admission, std::move(q), kTimeout, [&f, ex, detokenize, want_strs](caf::expected<actors::tokenize_result> r) {
        if (!r) return answer_failure(f, ex, r.error(), "admission");
        if (!r->ok) return answer_error(ex, to_api_error(r->code, r->message, r->param));
        nlohmann::json body;
        if (detokenize) {
          body = {{"prompt", r->text}};
        } else {
          body = {{"count", r->tokens.size()}, {"max_model_len", r->max_model_len}, {"tokens", r->tokens},
                  {"token_strs", nullptr}, {"prompt", r->text}};
          if (want_strs) body["token_strs"] = r->token_strs;
        }
        ex->post([ex, text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)]() mutable {
          ex->respond(200, std::move(text));
        });
      });
}

// The booleans both forms take; null or absent keeps the default.
constexpr const char* kFlags[] = {"add_special_tokens", "return_token_strs", "add_generation_prompt", "continue_final_message"};

// {model, prompt} or {model, messages, add_generation_prompt, tools, chat_template_kwargs};
// either with add_special_tokens (as vLLM: true for a prompt, false for messages, whose
// template writes its own) and return_token_strs.
void tokenize(front& f, const std::shared_ptr<exchange>& ex) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty())
    return answer_bad_request(ex, "you must provide a model parameter", "model");
  actors::tokenize_request q;
  q.model = body["model"].get<std::string>();
  const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
  if (has_prompt == has_messages) return answer_bad_request(ex, "Give either 'prompt' or 'messages'.", "prompt");
  for (const char* k : kFlags)
    if (body.contains(k) && !body[k].is_null() && !body[k].is_boolean())
      return answer_bad_request(ex, std::string("'") + k + "' must be a boolean.", k);
  const auto flag = [&body](const char* k, bool otherwise) {
    return body.contains(k) && body[k].is_boolean() ? body[k].get<bool>() : otherwise;
  };
  q.add_special = flag("add_special_tokens", has_prompt);
  q.token_strs = flag("return_token_strs", false);
  if (has_prompt) {
    if (!body["prompt"].is_string()) return answer_bad_request(ex, "'prompt' must be a string.", "prompt");
    q.prompt = body["prompt"].get<std::string>();
    for (auto it = body.begin(); it != body.end(); ++it)
      if (it.key() != "model" && it.key() != "prompt" && it.key() != "add_special_tokens" && it.key() != "return_token_strs")
        return answer_bad_request(ex, "Unrecognized request argument supplied: " + it.key(), it.key());
  } else {
    // The chat fields through the chat completion's own checks; the rest are template variables.
    json chat = {{"model", q.model}, {"messages", body["messages"]}};
    json kwargs = json::object();
    for (auto it = body.begin(); it != body.end(); ++it) {
      const std::string& k = it.key();
      if (k == "model" || k == "messages" || k == "add_special_tokens" || k == "return_token_strs") continue;
      if (k == "tools" || k == "chat_template_kwargs") chat[k] = it.value();
      else if (k == "add_generation_prompt" || k == "continue_final_message") kwargs[k] = it.value();
      else return answer_bad_request(ex, "Unrecognized request argument supplied: " + k, k);
    }
    if (!kwargs.empty()) {
      if (!chat.contains("chat_template_kwargs") || !chat["chat_template_kwargs"].is_object()) chat["chat_template_kwargs"] = json::object();
      for (auto it = kwargs.begin(); it != kwargs.end(); ++it) chat["chat_template_kwargs"][it.key()] = it.value();
    }
    auto parsed = parse_chat_request(chat.dump(-1, ' ', false, json::error_handler_t::replace));
    if (auto* err = std::get_if<api_error>(&parsed)) return ex->respond(err->status, error_json(*err));
    q.chat_json = std::get<chat_params>(parsed).template_json;
    q.created_unix = unix_now();
  }
  ask_admission(f, ex, std::move(q), false);
}

// {model, tokens}
void detokenize(front& f, const std::shared_ptr<exchange>& ex) {
  json body;
  if (auto why = parse_json_object(ex->request().body, body)) return answer_bad_request(ex, *why, "");
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty())
    return answer_bad_request(ex, "you must provide a model parameter", "model");
  if (!body.contains("tokens") || !body["tokens"].is_array())
    return answer_bad_request(ex, "'tokens' must be an array of token ids.", "tokens");
  actors::tokenize_request q;
  q.model = body["model"].get<std::string>();
  q.detokenize = true;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer()) return answer_bad_request(ex, "'tokens' must be an array of token ids.", "tokens");
    const auto id = t.get<std::int64_t>();
    if (id < 0 || id >= (1 << 24)) return answer_bad_request(ex, "Token id " + std::to_string(id) + " is out of range.", "tokens");
    q.tokens.push_back(static_cast<std::int32_t>(id));
  }
  ask_admission(f, ex, std::move(q), true);
}

}  // namespace

void add_tokenize_routes(front& f) {
  f.routes.add("POST", "/tokenize", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { tokenize(f, ex); });
  f.routes.add("POST", "/detokenize", access::team,
               [&f](const std::shared_ptr<exchange>& ex, const route_params&) { detokenize(f, ex); });
}

}  // namespace kiln::net
