#include "net/tool_calls.hpp"

#include <nlohmann/json.hpp>

namespace kiln::net {

namespace {

using json = nlohmann::ordered_json;
constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kPythonTag = "<|python_tag|>";

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// {"name": string, "arguments" | "parameters": object or JSON text of one}.
std::optional<tool_call> call_of(const json& j, std::string_view args_key, std::string id) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  json args = j.contains(args_key) ? j[std::string(args_key)] : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return std::nullopt;
  return tool_call{std::move(id), j["name"].get<std::string>(), args.dump(-1, ' ', false, json::error_handler_t::replace)};
}

std::string call_id(std::string_view prefix, std::size_t n) { return "call_" + std::string(prefix) + "_" + std::to_string(n); }

parsed_output parse_hermes(std::string_view text, std::string_view id_prefix) {
  parsed_output out;
  std::size_t at = 0;
  while (true) {
    const auto open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    const auto close = text.find(kClose, open + kOpen.size());
    const auto body = trim(text.substr(open + kOpen.size(), close == std::string_view::npos ? std::string_view::npos
                                                                                          : close - open - kOpen.size()));
    auto call = call_of(json::parse(body, nullptr, false), "arguments", call_id(id_prefix, out.calls.size()));
    if (!call) break;  // not a well-formed call: the rest stays text
    out.content += text.substr(at, open - at);
    out.calls.push_back(std::move(*call));
    at = close == std::string_view::npos ? text.size() : close + kClose.size();
  }
  out.content += text.substr(at);
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

parsed_output parse_llama3(std::string_view text, std::string_view id_prefix) {
  parsed_output out;
  std::string_view body = trim(text);
  if (body.starts_with(kPythonTag)) body = trim(body.substr(kPythonTag.size()));
  if (!body.starts_with("{")) return {std::string(text), {}};
  // One object, or several separated by ';' (which may also stand inside a string: a piece
  // joins the next until the whole parses).
  std::string pending;
  std::size_t at = 0;
  while (at <= body.size()) {
    const auto semi = body.find(';', at);
    const std::string_view piece = body.substr(at, semi == std::string_view::npos ? std::string_view::npos : semi - at);
    pending += pending.empty() ? std::string(piece) : ";" + std::string(piece);
    const json j = json::parse(trim(pending), nullptr, false);
    if (!j.is_discarded()) {
      auto call = call_of(j, j.is_object() && j.contains("parameters") ? "parameters" : "arguments",
                          call_id(id_prefix, out.calls.size()));
      if (!call) return {std::string(text), {}};
      out.calls.push_back(std::move(*call));
      pending.clear();
    }
    if (semi == std::string_view::npos) break;
    at = semi + 1;
  }
  if (!trim(pending).empty() || out.calls.empty()) return {std::string(text), {}};
  return out;
}

}  // namespace

std::optional<tool_format> tool_format_named(std::string_view name) {
  if (name == "none" || name.empty()) return tool_format::none;
  if (name == "hermes") return tool_format::hermes;
  if (name == "llama3_json") return tool_format::llama3_json;
  return std::nullopt;
}

parsed_output parse_tool_calls(std::string_view text, tool_format f, std::string_view id_prefix) {
  switch (f) {
    case tool_format::hermes: return parse_hermes(text, id_prefix);
    case tool_format::llama3_json: return parse_llama3(text, id_prefix);
    case tool_format::none: break;
  }
  return {std::string(text), {}};
}

std::string tool_call_stream::feed(std::string_view delta) {
  if (format_ == tool_format::none) return std::string(delta);
  held_ += delta;
  if (in_call_) return {};
  if (format_ == tool_format::llama3_json) {
    // A call is the whole answer: hold it while it may still be one.
    if (sent_any_) return std::exchange(held_, {});
    const std::string_view t = trim(held_);
    if (t.empty()) return {};
    if (t.starts_with("{") || t.starts_with(kPythonTag) || std::string_view(kPythonTag).starts_with(t)) {
      in_call_ = t.starts_with("{") || t.starts_with(kPythonTag);
      return {};
    }
    sent_any_ = true;
    return std::exchange(held_, {});
  }
  // hermes: send up to a call's opening, and hold a tail that may begin one.
  if (const auto open = held_.find(kOpen); open != std::string::npos) {
    in_call_ = true;
    std::string out = held_.substr(0, open);
    held_.erase(0, open);
    return out;
  }
  std::size_t keep = 0;
  for (std::size_t n = std::min(held_.size(), kOpen.size() - 1); n > 0; --n)
    if (std::string_view(held_).substr(held_.size() - n) == kOpen.substr(0, n)) {
      keep = n;
      break;
    }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

parsed_output tool_call_stream::finish() {
  parsed_output out = parse_tool_calls(held_, format_, id_prefix_);
  held_.clear();
  return out;
}

}  // namespace kiln::net
