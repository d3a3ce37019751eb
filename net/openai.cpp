#include "net/openai.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "net/json_body.hpp"

namespace kiln::net {

namespace {

using json = nlohmann::ordered_json;  // the template sees keys in the client's order (tools)

api_error invalid(std::string message, std::string param, std::string code = {}) {
  return api_error{400, "invalid_request_error", std::move(message), std::move(param), std::move(code)};
}

std::string type_name(const json& v) { return v.type_name(); }

// message content: a string, or an array of {"type":"text","text":...} parts.
std::optional<std::string> content_text(const json& c) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return std::string();
  if (!c.is_array()) return std::nullopt;
  std::string out;
  for (const json& part : c) {
    if (!part.is_object()) return std::nullopt;
    auto t = part.find("type");
    auto x = part.find("text");
    if (t == part.end() || *t != "text" || x == part.end() || !x->is_string()) return std::nullopt;
    out += x->get<std::string>();
  }
  return out;
}

// A tool call as the template wants it: arguments that are a JSON object's text become that
// object (Llama 3.1's template prints them with tojson), as vLLM does.
std::optional<api_error> read_tool_calls(const json& calls, const std::string& at, json& out) {
  if (calls.is_null()) return std::nullopt;
  if (!calls.is_array()) return invalid("'" + at + ".tool_calls' must be an array.", at + ".tool_calls");
  out = json::array();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const std::string here = at + ".tool_calls[" + std::to_string(k) + "]";
    const json& c = calls[k];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
        !c["function"]["name"].is_string())
      return invalid("'" + here + "' must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}.", here);
    json call = c;
    json& fn = call["function"];
    if (fn.contains("arguments") && fn["arguments"].is_string()) {
      json parsed = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) fn["arguments"] = std::move(parsed);
    }
    out.push_back(std::move(call));
  }
  return std::nullopt;
}

// What the chat template will see, gathered while the request is read.
struct template_parts {
  json input = json::object();   ///< messages, tools
  json kwargs = json::object();  ///< chat_template_kwargs
};

std::optional<api_error> read_messages(const json& v, chat_params& out, template_parts& tp) {
  if (!v.is_array() || v.empty())
    return invalid("'messages' must be a non-empty array of messages.", "messages");
  json& for_template = tp.input["messages"] = json::array();
  static const std::set<std::string, std::less<>> roles = {"system", "developer", "user", "assistant", "tool"};
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) return invalid("Each message must be an object.", at);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || !roles.count(role->get<std::string>()))
      return invalid("'" + at + ".role' must be one of system, developer, user, assistant, tool.", at + ".role");
    auto content = m.find("content");
    std::optional<std::string> text = content == m.end() ? std::nullopt : content_text(*content);
    if (!text) return invalid("'" + at + ".content' must be a string or an array of text parts.", at + ".content");
    json m_out = m;  // the template gets every field (tool_calls, tool_call_id, name, ...)
    m_out["content"] = *text;
    if (auto calls = m.find("tool_calls"); calls != m.end())
      if (auto e = read_tool_calls(*calls, at, m_out["tool_calls"])) return e;
    if (m_out.contains("tool_calls") && m_out["tool_calls"].is_null()) m_out.erase("tool_calls");
    for_template.push_back(std::move(m_out));
    out.messages.push_back({role->get<std::string>(), std::move(*text)});
  }
  return std::nullopt;
}

std::optional<api_error> read_int(const json& v, const char* name, int lo, int hi, int& out) {
  if (!v.is_number_integer())
    return invalid(std::string("'") + name + "' must be an integer, got " + type_name(v) + ".", name);
  const auto x = v.get<std::int64_t>();
  if (x < lo || x > hi)
    return invalid(std::string("'") + name + "' must be between " + std::to_string(lo) + " and " +
                       std::to_string(hi) + ".", name);
  out = static_cast<int>(x);
  return std::nullopt;
}

// min_tokens past max_tokens (where the request sets it; else the pool's default is checked
// when the request is admitted).
std::optional<api_error> check_min_tokens(const chat_params& p) {
  if (p.max_tokens > 0 && p.min_tokens > p.max_tokens)
    return invalid("'min_tokens' (" + std::to_string(p.min_tokens) + ") must be at most 'max_tokens' (" +
                       std::to_string(p.max_tokens) + ").",
                   "min_tokens");
  return std::nullopt;
}

// {"token id": bias from -100 to 100, ...}: by token id, each once.
std::optional<api_error> read_logit_bias(const json& v, std::vector<std::pair<std::int32_t, float>>& out) {
  out.clear();
  if (v.is_null()) return std::nullopt;
  if (!v.is_object()) return invalid("'logit_bias' must be an object mapping token ids to biases.", "logit_bias");
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    const bool digits = !k.empty() && k.size() <= 8 && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stol(k) >= (1 << 24))
      return invalid("'logit_bias' keys must be token ids (integers from 0 to 16777215 as strings), got '" + k + "'.",
                     "logit_bias");
    const json& b = it.value();
    if (!b.is_number() || !(b.get<double>() >= -100 && b.get<double>() <= 100))
      return invalid("'logit_bias' values must be numbers from -100 to 100 (token " + k + ").", "logit_bias");
    out.emplace_back(static_cast<std::int32_t>(std::stol(k)), static_cast<float>(b.get<double>()));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // "7" and "07" name one token: the later bias stands, as for a repeated key.
  std::vector<std::pair<std::int32_t, float>> once;
  for (const auto& e : out) {
    if (!once.empty() && once.back().first == e.first) once.pop_back();
    once.push_back(e);
  }
  out = std::move(once);
  return std::nullopt;
}

std::optional<api_error> read_field(const std::string& key, const json& v, chat_params& out, template_parts& tp) {
  if (key == "model") {
    if (!v.is_string() || v.get<std::string>().empty()) return invalid("'model' must be a non-empty string.", "model");
    out.model = v.get<std::string>();
  } else if (key == "messages") {
    return read_messages(v, out, tp);
  } else if (key == "stream") {
    if (!v.is_boolean() && !v.is_null()) return invalid("'stream' must be a boolean.", "stream");
    out.stream = v.is_boolean() && v.get<bool>();
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return std::nullopt;
    int n = 0;
    if (auto e = read_int(v, key.c_str(), 1, 1 << 24, n)) return e;
    if (key == "max_completion_tokens" || out.max_tokens == 0) out.max_tokens = n;
  } else if (key == "temperature") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 2)
      return invalid("'temperature' must be a number between 0 and 2.", "temperature");
    out.temperature = v.get<double>();
  } else if (key == "top_p") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 1)
      return invalid("'top_p' must be a number greater than 0 and at most 1.", "top_p");
    out.top_p = v.get<double>();
  } else if (key == "top_k") {
    if (v.is_null()) return std::nullopt;
    if (auto e = read_int(v, "top_k", 0, 1 << 20, out.top_k)) return e;
  } else if (key == "seed") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) return invalid("'seed' must be an integer.", "seed");
    out.seed = v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
  } else if (key == "stop") {
    if (v.is_null()) return std::nullopt;
    if (v.is_string()) {
      out.stop = {v.get<std::string>()};
    } else if (v.is_array() && v.size() <= 4) {
      for (const json& s : v) {
        if (!s.is_string()) return invalid("'stop' must be a string or an array of up to 4 strings.", "stop");
        out.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid("'stop' must be a string or an array of up to 4 strings.", "stop");
    }
    for (const auto& s : out.stop)
      if (s.empty()) return invalid("'stop' strings must not be empty.", "stop");
  } else if (key == "n") {
    if (!v.is_null() && !(v.is_number_integer() && v.get<std::int64_t>() == 1))
      return invalid("Only n = 1 is supported.", "n");
  } else if (key == "stream_options") {
    if (!v.is_null() && !v.is_object()) return invalid("'stream_options' must be an object.", "stream_options");
    if (v.is_object() && v.contains("include_usage") && !v["include_usage"].is_null()) {
      if (!v["include_usage"].is_boolean())
        return invalid("'stream_options.include_usage' must be a boolean.", "stream_options.include_usage");
      out.include_usage = v["include_usage"].get<bool>();
    }
  } else if (key == "tools") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_array() || v.empty()) return invalid("'tools' must be a non-empty array of function tools.", "tools");
    for (std::size_t k = 0; k < v.size(); ++k) {
      const json& t = v[k];
      const std::string at = "tools[" + std::to_string(k) + "]";
      if (!t.is_object() || t.value("type", std::string()) != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        return invalid("'" + at + "' must be {\"type\": \"function\", \"function\": {\"name\", ...}}.", at);
    }
    tp.input["tools"] = v;
    out.has_tools = true;
  } else if (key == "tool_choice") {
    if (v.is_null() || v == "auto") return std::nullopt;
    if (v == "none") {
      out.tool_choice_none = true;
      return std::nullopt;
    }
    return invalid("tool_choice 'required' or a named function needs constrained decoding, which kiln does not support "
                   "yet; use 'auto' or 'none'.", "tool_choice");
  } else if (key == "parallel_tool_calls") {
    if (!v.is_null() && !v.is_boolean()) return invalid("'parallel_tool_calls' must be a boolean.", key);
  } else if (key == "response_format") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
      return invalid("'response_format' must be an object with a type.", "response_format");
    const std::string type = v["type"].get<std::string>();
    if (type == "text") return std::nullopt;
    if (type == "json_object" || type == "json_schema")
      return invalid("response_format '" + type + "' is not supported yet: kiln has no structured output; use 'text'.",
                     "response_format");
    return invalid("'response_format.type' must be text, json_object or json_schema.", "response_format");
  } else if (key == "chat_template_kwargs") {
    // vLLM's extension: extra variables for the chat template (enable_thinking, ...).
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) return invalid("'chat_template_kwargs' must be an object.", key);
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() == "messages" || it.key() == "tools")
        return invalid("'chat_template_kwargs' cannot set '" + it.key() + "'.", key);
      tp.kwargs[it.key()] = it.value();
    }
  } else if (key == "cache_salt") {
    // Accepted for compatibility and ignored: the prefix cache is partitioned by team.
    if (!v.is_null() && !v.is_string()) return invalid("'cache_salt' must be a string.", "cache_salt");
  } else if (key == "user") {
    if (!v.is_string() && !v.is_null()) return invalid("'user' must be a string.", "user");
  } else if (key == "presence_penalty" || key == "frequency_penalty") {
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || !(v.get<double>() >= -2 && v.get<double>() <= 2))
      return invalid("'" + key + "' must be a number from -2 to 2.", key);
    (key == "presence_penalty" ? out.presence_penalty : out.frequency_penalty) = v.get<double>();
  } else if (key == "repetition_penalty") {
    // vLLM's: tokens of the prompt or the answer so far lose weight (> 1) or gain it (< 1).
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || !(v.get<double>() >= 0.01 && v.get<double>() <= 100))
      return invalid("'repetition_penalty' must be a number from 0.01 to 100 (1: none).", key);
    out.repetition_penalty = v.get<double>();
  } else if (key == "logit_bias") {
    return read_logit_bias(v, out.logit_bias);
  } else if (key == "service_tier") {
    // OpenAI's tiers onto kiln's: priority -> interactive, default -> standard, flex -> batch.
    if (v.is_null() || v == "auto") return std::nullopt;
    if (v == "priority") out.tier = engine::priority::interactive;
    else if (v == "default") out.tier = engine::priority::standard;
    else if (v == "flex") out.tier = engine::priority::batch;
    else return invalid("'service_tier' must be auto, default, flex or priority.", key);
  } else if (key == "stop_token_ids") {
    // vLLM's: token ids that end the answer as eos does.
    out.stop_token_ids.clear();
    if (v.is_null()) return std::nullopt;
    if (!v.is_array()) return invalid("'stop_token_ids' must be an array of token ids.", key);
    for (const json& t : v) {
      if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= (1 << 24))
        return invalid("'stop_token_ids' must hold token ids (integers from 0 to 16777215).", key);
      out.stop_token_ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
    }
    std::sort(out.stop_token_ids.begin(), out.stop_token_ids.end());
    out.stop_token_ids.erase(std::unique(out.stop_token_ids.begin(), out.stop_token_ids.end()), out.stop_token_ids.end());
  } else if (key == "min_tokens") {
    if (v.is_null()) return std::nullopt;
    if (auto e = read_int(v, "min_tokens", 0, 1 << 24, out.min_tokens)) return e;
  } else if (key == "ignore_eos") {
    if (!v.is_null() && !v.is_boolean()) return invalid("'ignore_eos' must be a boolean.", key);
    out.ignore_eos = v.is_boolean() && v.get<bool>();
  } else if (key == "logprobs") {
    if (!v.is_null() && !v.is_boolean()) return invalid("'logprobs' must be a boolean.", "logprobs");
    out.logprobs_asked = v.is_boolean() && v.get<bool>();
  } else if (key == "top_logprobs") {
    if (v.is_null()) return std::nullopt;
    if (auto e = read_int(v, "top_logprobs", 0, 20, out.logprobs)) return e;
  } else {
    return invalid("Unrecognized request argument supplied: " + key, key);
  }
  return std::nullopt;
}

void put_usage(std::string& out, const completion_usage& u) {
  out += "\"usage\":{\"prompt_tokens\":" + std::to_string(u.prompt_tokens) +
         ",\"completion_tokens\":" + std::to_string(u.completion_tokens) +
         ",\"total_tokens\":" + std::to_string(u.prompt_tokens + u.completion_tokens) +
         ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(u.cached_tokens) +
         "}},\"model_version\":" + json_quote(u.model_version) +
         ",\"region\":" + json_quote(u.region) + ",\"replica_id\":" + json_quote(u.replica_id);
  char ttft[80];
  std::snprintf(ttft, sizeof ttft, ",\"kiln\":{\"engine_ttft_ms\":%.3f,\"attempts\":%d}", u.engine_ttft_ms, u.attempts);
  out += ttft;
}

std::string chunk_head(const completion_meta& m) {
  return "{\"id\":" + json_quote(m.id) + (m.text_completion ? ",\"object\":\"text_completion\",\"created\":" : ",\"object\":\"chat.completion.chunk\",\"created\":") +
         std::to_string(m.created) + ",\"model\":" + json_quote(m.model) + ",\"choices\":[";
}

}  // namespace

std::size_t utf8_len(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n;
  std::uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; }
  else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; }
  else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; }
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  const bool overlong = (n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void append_json_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_len(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
          out.append(esc, sizeof esc);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_quoted(out, s);
  return out;
}

namespace {

// The body as a JSON object, or the error OpenAI gives for anything else.
std::optional<api_error> parse_object(std::string_view body, json& doc) {
  if (auto why = parse_json_object(body, doc)) return invalid(std::move(*why), "", "invalid_json");
  return std::nullopt;
}

}  // namespace

std::variant<chat_params, api_error> parse_chat_request(std::string_view body) {
  json doc;
  if (auto e = parse_object(body, doc)) return *e;
  chat_params out;
  template_parts tp;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (auto e = read_field(it.key(), it.value(), out, tp)) return *e;
  }
  if (out.model.empty()) return invalid("you must provide a model parameter", "model");
  if (out.messages.empty()) return invalid("'messages' is a required property.", "messages");
  if (out.logprobs > 0 && !out.logprobs_asked)
    return invalid("'top_logprobs' needs 'logprobs' set to true.", "top_logprobs");
  if (auto e = check_min_tokens(out)) return *e;
  out.logprobs = out.logprobs_asked ? std::max(0, out.logprobs) : -1;
  for (auto it = tp.kwargs.begin(); it != tp.kwargs.end(); ++it) tp.input[it.key()] = it.value();
  out.template_json = tp.input.dump(-1, ' ', false, json::error_handler_t::replace);
  return out;
}

std::variant<completion_params, api_error> parse_completion_request(std::string_view body) {
  json doc;
  if (auto e = parse_object(body, doc)) return *e;
  completion_params out;
  template_parts unused;
  bool has_prompt = false;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "prompt") {
      has_prompt = true;
      // A string, or token ids; a list of one of either (one prompt per request).
      if (v.is_array() && v.size() > 1 && (v[0].is_string() || v[0].is_array()))
        return invalid("'prompt' holds " + std::to_string(v.size()) +
                           " prompts; kiln takes one prompt per request (send each as its own request, or use the batch API).",
                       "prompt");
      const json& one = v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array()) ? v[0] : v;
      if (one.is_string()) {
        out.prompt_text = one.get<std::string>();
        if (out.prompt_text.empty()) return invalid("'prompt' must not be empty.", "prompt");
      } else if (one.is_array() && !one.empty()) {
        for (const json& t : one) {
          if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= (1 << 24))
            return invalid("'prompt' token ids must be integers from 0 to 16777215.", "prompt");
          out.prompt_ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
        }
      } else {
        return invalid("'prompt' must be a non-empty string or array of token ids (one prompt per request).", "prompt");
      }
    } else if (key == "echo") {
      if (!v.is_null() && !v.is_boolean()) return invalid("'echo' must be a boolean.", "echo");
      out.echo = v.is_boolean() && v.get<bool>();
    } else if (key == "add_special_tokens") {
      if (!v.is_null() && !v.is_boolean()) return invalid("'add_special_tokens' must be a boolean.", key);
      out.add_special_tokens = !v.is_boolean() || v.get<bool>();
    } else if (key == "logprobs") {
      if (!v.is_null())
        if (auto e = read_int(v, "logprobs", 0, 20, out.common.logprobs)) return *e;
    } else if (key == "best_of") {
      if (!v.is_null() && !(v.is_number_integer() && v.get<std::int64_t>() == 1)) return invalid("Only best_of = 1 is supported.", key);
    } else if (key == "suffix") {
      if (!v.is_null()) return invalid("'suffix' is not supported.", key);
    } else if (key == "messages" || key == "tools" || key == "tool_choice" || key == "parallel_tool_calls" ||
               key == "response_format" || key == "chat_template_kwargs" || key == "top_logprobs" ||
               key == "max_completion_tokens") {
      return invalid("Unrecognized request argument supplied: " + key, key);
    } else if (auto e = read_field(key, v, out.common, unused)) {
      return *e;
    }
  }
  if (out.common.max_tokens == 0) out.common.max_tokens = 16;  // OpenAI's default for completions
  if (auto e = check_min_tokens(out.common)) return *e;
  if (out.common.model.empty()) return invalid("you must provide a model parameter", "model");
  if (!has_prompt) return invalid("'prompt' is a required property.", "prompt");
  if (out.echo && out.prompt_text.empty())
    return invalid("'echo' needs the prompt as text; kiln does not echo token ids.", "echo");
  out.prompt_logprobs = out.echo && out.common.logprobs >= 0;
  return out;
}

std::string error_json(const api_error& e) {
  auto opt = [](const std::string& s) { return s.empty() ? std::string("null") : json_quote(s); };
  return "{\"error\":{\"message\":" + json_quote(e.message) + ",\"type\":" + json_quote(e.type) +
         ",\"param\":" + opt(e.param) + ",\"code\":" + opt(e.code) + "}}";
}

std::string chunk_role_json(const completion_meta& m) {
  return chunk_head(m) + "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}";
}

std::string chunk_content_json(const completion_meta& m, std::string_view text) {
  std::string out = content_event_prefix(m).substr(6);  // without "data: "
  append_json_quoted(out, text);
  out += content_suffix(m);
  return out;
}

std::string content_event_prefix(const completion_meta& m) {
  return "data: " + chunk_head(m) + (m.text_completion ? "{\"index\":0,\"text\":" : "{\"index\":0,\"delta\":{\"content\":");
}

std::string_view content_suffix(const completion_meta& m) { return m.text_completion ? kTextSuffix : kContentSuffix; }

void append_content_event(std::string& out, std::string_view prefix, std::string_view text, std::string_view suffix) {
  out += prefix;
  append_json_quoted(out, text);
  out += suffix;
  out += "\n\n";
}

std::string chunk_finish_json(const completion_meta& m, std::string_view finish_reason) {
  if (m.text_completion)
    return chunk_head(m) + "{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":" + json_quote(finish_reason) + "}]}";
  return chunk_head(m) + "{\"index\":0,\"delta\":{},\"finish_reason\":" + json_quote(finish_reason) + "}]}";
}

std::string chunk_usage_json(const completion_meta& m, const completion_usage& u) {
  std::string out = chunk_head(m) + "],";
  put_usage(out, u);
  out += "}";
  return out;
}

namespace {

// [{"index", "id", "type": "function", "function": {"name", "arguments"}}, ...]
std::string tool_calls_json(const std::vector<tool_call>& calls) {
  std::string out = "[";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    out += (i ? ",{\"index\":" : "{\"index\":") + std::to_string(i) + ",\"id\":" + json_quote(calls[i].id) +
           ",\"type\":\"function\",\"function\":{\"name\":" + json_quote(calls[i].name) +
           ",\"arguments\":" + json_quote(calls[i].arguments) + "}}";
  }
  return out + "]";
}

}  // namespace

std::string chunk_tool_calls_json(const completion_meta& m, const std::vector<tool_call>& calls) {
  return chunk_head(m) + "{\"index\":0,\"delta\":{\"tool_calls\":" + tool_calls_json(calls) + "},\"finish_reason\":null}]}";
}

std::string completion_json(const completion_meta& m, std::string_view text,
                            std::string_view finish_reason, const completion_usage& u, const std::vector<tool_call>& calls,
                            std::string_view logprobs) {
  if (m.text_completion) {
    std::string out = "{\"id\":" + json_quote(m.id) + ",\"object\":\"text_completion\",\"created\":" +
                      std::to_string(m.created) + ",\"model\":" + json_quote(m.model) + ",\"choices\":[{\"index\":0,\"text\":" +
                      json_quote(text) + ",\"logprobs\":" + std::string(logprobs.empty() ? "null" : logprobs) +
                      ",\"finish_reason\":" + json_quote(finish_reason) + "}],";
    put_usage(out, u);
    return out + "}";
  }
  const std::string content = calls.empty() || !text.empty() ? json_quote(text) : std::string("null");
  std::string out = "{\"id\":" + json_quote(m.id) + ",\"object\":\"chat.completion\",\"created\":" +
                    std::to_string(m.created) + ",\"model\":" + json_quote(m.model) +
                    ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":" + content +
                    (calls.empty() ? std::string() : ",\"tool_calls\":" + tool_calls_json(calls)) + "}" +
                    (logprobs.empty() ? std::string() : ",\"logprobs\":" + std::string(logprobs)) +
                    ",\"finish_reason\":" + json_quote(finish_reason) + "}],";
  put_usage(out, u);
  out += "}";
  return out;
}

namespace {

json model_object(const config::kiln_config& cfg, const config::model_config& m, std::int64_t created) {
  json versions = json::array();
  for (const auto& p : cfg.pools)
    if (p.model == m.name) versions.push_back({{"version", p.version}, {"id", p.model + "@" + p.version}, {"replicas", p.replicas}});
  return {{"id", m.name}, {"object", "model"}, {"created", created}, {"owned_by", "kiln"},
          {"live_version", m.live_version}, {"versions", versions}};
}

}  // namespace

std::string models_json(const config::kiln_config& cfg, std::int64_t created) {
  json data = json::array();
  for (const auto& m : cfg.models) data.push_back(model_object(cfg, m, created));
  return json{{"object", "list"}, {"data", data}}.dump();
}

std::optional<std::string> model_json(const config::kiln_config& cfg, std::string_view id, std::int64_t created) {
  const auto [name, version] = config::split_model_ref(std::string(id));
  for (const auto& m : cfg.models) {
    if (m.name != name) continue;
    if (!version.empty() && !cfg.pool_for(name, version)) return std::nullopt;
    json out = model_object(cfg, m, created);
    out["id"] = std::string(id);  // as asked: a version's id names that version
    return out.dump();
  }
  return std::nullopt;
}

}  // namespace kiln::net
