#include "actors/tokenize_call.hpp"

#include <nlohmann/json.hpp>

#include "actors/admission.hpp"
#include "engine/bpe_tokenizer.hpp"

namespace kiln::actors {

namespace {

tokenize_result failed(errc code, std::string message, std::string param = {}) {
  tokenize_result r;
  r.ok = false;
  r.code = code;
  r.message = std::move(message);
  r.param = std::move(param);
  return r;
}

// The stand-in template (sim pools) reads the conversation's roles and text.
std::vector<chat_turn> turns_of(const std::string& chat_json) {
  std::vector<chat_turn> out;
  const auto j = nlohmann::ordered_json::parse(chat_json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("messages") || !j["messages"].is_array()) return out;
  for (const auto& m : j["messages"])
    if (m.is_object() && m.value("role", nlohmann::ordered_json()).is_string() && m.value("content", nlohmann::ordered_json()).is_string())
      out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

}  // namespace

tokenize_result run_tokenize(const admission_state& st, const tokenize_request& q) {
  auto [model, version] = config::split_model_ref(q.model);
  if (version.empty()) version = st.version_of(model, request{});
  auto it = st.pools.find(model + "@" + version);
  if (version.empty() || it == st.pools.end())
    return failed(errc::unknown_model, "The model '" + q.model + "' does not exist.", "model");
  const pool_update& pool = it->second;
  if (!pool.runtime || pool.status == pool_status::loading)
    return failed(errc::unavailable, "The model '" + q.model + "' is loading.");
  if (pool.status == pool_status::failed || !pool.runtime->tokenizer)
    return failed(errc::unavailable, "The model '" + q.model + "' is unavailable: " + pool.failure);
  const pool_runtime& rt = *pool.runtime;
  tokenize_result out;
  out.max_model_len = rt.cfg->max_context;
  if (q.detokenize) {
    for (const auto id : q.tokens)
      if (id < 0 || id >= (1 << 24)) return failed(errc::invalid_request, "Token id " + std::to_string(id) + " is out of range.", "tokens");
    const std::vector<engine::token_id> ids(q.tokens.begin(), q.tokens.end());
    if (const auto* bpe = dynamic_cast<const engine::bpe_tokenizer*>(rt.tokenizer.get())) {
      out.text = bpe->decode_all(ids, false);
    } else {
      for (const auto id : ids) out.text += rt.tokenizer->decode(id);
    }
    return out;
  }
  std::string text = q.prompt;
  if (!q.chat_json.empty()) {
    request r;
    r.chat_json = q.chat_json;
    r.created_unix = q.created_unix;
    r.messages = turns_of(q.chat_json);
    if (auto e = rt.render(r, text)) return failed(errc::invalid_request, "The chat template rejected the messages: " + *e, "messages");
  }
  const auto ids = q.add_special ? rt.tokenizer->encode_special(text) : rt.tokenizer->encode(text);
  out.tokens.assign(ids.begin(), ids.end());
  if (q.token_strs)
    for (const auto id : ids) out.token_strs.push_back(rt.tokenizer->piece(id));
  out.text = std::move(text);
  return out;
}

}  // namespace kiln::actors
