#include "engine/upstream_protocol.hpp"

#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

namespace kiln::engine::upstream {

void sse_reader::feed(std::string_view bytes, std::vector<std::string>& out) {
  buf_.append(bytes);
  std::size_t pos = 0;
  while (true) {
    const auto eol = buf_.find('\n', pos);
    if (eol == std::string::npos) break;
    std::string_view line(buf_.data() + pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // the event ends
      if (has_data_) out.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
      continue;
    }
    if (line.front() == ':') continue;  // a comment (keep-alive)
    const auto colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (field != "data") continue;  // event, id, retry: not used
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  }
  buf_.erase(0, pos);
}

std::optional<endpoint> parse_endpoint(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (!url.starts_with(scheme)) return std::nullopt;
  url.remove_prefix(scheme.size());
  endpoint e;
  const auto slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  e.base = slash == std::string_view::npos ? "" : std::string(url.substr(slash));
  while (!e.base.empty() && e.base.back() == '/') e.base.pop_back();
  const auto colon = authority.rfind(':');
  e.host = std::string(authority.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string digits(authority.substr(colon + 1));
    if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    e.port = std::stoi(digits);
    if (e.port < 1 || e.port > 65535) return std::nullopt;
  }
  if (e.host.empty()) return std::nullopt;
  return e;
}

std::optional<chunk> parse_chunk(std::string_view data) {
  chunk c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  const auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  if (j.contains("error")) {
    const auto& e = j["error"];
    c.is_error = true;
    if (e.is_object()) {
      if (e.contains("message") && e["message"].is_string()) c.error_message = e["message"];
      if (e.contains("code") && e["code"].is_string()) c.error_code = e["code"];
      else if (e.contains("type") && e["type"].is_string()) c.error_code = e["type"];
    } else if (e.is_string()) {
      c.error_message = e;
    }
    return c;
  }
  if (!j.contains("choices") || !j["choices"].is_array()) return std::nullopt;
  for (const auto& ch : j["choices"]) {
    if (!ch.is_object()) continue;
    if (ch.contains("delta") && ch["delta"].is_object() && ch["delta"].contains("content") && ch["delta"]["content"].is_string())
      c.content += ch["delta"]["content"].get<std::string>();
    if (ch.contains("text") && ch["text"].is_string()) c.content += ch["text"].get<std::string>();  // completions
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) c.finish_reason = ch["finish_reason"];
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const auto& u = j["usage"];
    c.has_usage = true;
    c.prompt_tokens = u.value("prompt_tokens", 0);
    c.completion_tokens = u.value("completion_tokens", 0);
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      c.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
  }
  return c;
}

load_report parse_load(std::string_view text) {
  // Each figure under the names the upstreams give it: counts summed over label sets, the
  // KV fraction averaged.
  static const std::map<std::string, int, std::less<>> names = {
      {"vllm:num_requests_running", 0},  {"sglang:num_running_reqs", 0},  {"kiln_engine_running_sequences", 0},
      {"vllm:num_requests_waiting", 1},  {"sglang:num_queue_reqs", 1},    {"kiln_engine_waiting_sequences", 1},
      {"vllm:gpu_cache_usage_perc", 2},  {"vllm:kv_cache_usage_perc", 2}, {"sglang:token_usage", 2}};
  double sum[3] = {0, 0, 0};
  int count[3] = {0, 0, 0};
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line.front() == '#') continue;
    const auto name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    auto it = names.find(line.substr(0, name_end));
    if (it == names.end()) continue;
    // The value follows the labels (if any) and a space; a timestamp may follow it.
    std::size_t v = name_end;
    if (line[v] == '{') {
      v = line.find('}', v);
      if (v == std::string_view::npos) continue;
      ++v;
    }
    const std::string value(line.substr(v));
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) continue;
    sum[it->second] += x;
    ++count[it->second];
  }
  load_report r;
  if (count[0]) r.running = sum[0];
  if (count[1]) r.waiting = sum[1];
  if (count[2]) r.kv_usage = sum[2] / count[2];  // a fraction: the mean over label sets
  return r;
}

}  // namespace kiln::engine::upstream
