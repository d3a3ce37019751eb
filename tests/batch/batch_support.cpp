#include "tests/batch/batch_support.hpp"

#include <chrono>
#include <thread>

#include "tests/support/kiln_process.hpp"

namespace kiln::test {

using nlohmann::json;

store_guard::~store_guard() { remove_store(path); }

std::string batch_input_line(const std::string& custom_id, int max_tokens, const std::string& model) {
  return json{{"custom_id", custom_id},
              {"method", "POST"},
              {"url", "/v1/chat/completions"},
              {"body",
               {{"model", model},
                {"max_tokens", max_tokens},
                {"seed", 7},
                {"messages", json::array({{{"role", "user"}, {"content", "batch line " + custom_id}}})}}}}
      .dump();
}

http_response upload_file(int port, const std::string& key, const std::string& content, const std::string& purpose) {
  const std::string b = "----kilnBatchBoundary7";
  std::string body = "--" + b + "\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose + "\r\n";
  body += "--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\n";
  body += "Content-Type: application/octet-stream\r\n\r\n" + content + "\r\n--" + b + "--\r\n";
  return request(port, "POST", "/v1/files", body,
                 {"Authorization: Bearer " + key, "Content-Type: multipart/form-data; boundary=" + b});
}

http_response create_batch(int port, const std::string& key, const std::string& file_id, const std::string& window,
                           const std::string& endpoint) {
  return request(port, "POST", "/v1/batches",
                 json{{"input_file_id", file_id}, {"endpoint", endpoint}, {"completion_window", window},
                      {"metadata", {{"job", "test"}}}}
                     .dump(),
                 {"Authorization: Bearer " + key, "Content-Type: application/json"});
}

json wait_batch(int port, const std::string& key, const std::string& id, int seconds) {
  json last;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    const http_response r = request(port, "GET", "/v1/batches/" + id, "", {"Authorization: Bearer " + key});
    if (r.status == 200) {
      last = json::parse(r.body, nullptr, false);
      const std::string s = last.value("status", "");
      if (s == "completed" || s == "failed" || s == "expired" || s == "cancelled") return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

std::map<std::string, json> lines_by_id(int port, const std::string& key, const std::string& file_id, int& repeats) {
  std::map<std::string, json> out;
  repeats = 0;
  const http_response r = request(port, "GET", "/v1/files/" + file_id + "/content", "", {"Authorization: Bearer " + key});
  if (r.status != 200) return out;
  std::size_t pos = 0;
  while (pos < r.body.size()) {
    auto eol = r.body.find('\n', pos);
    if (eol == std::string::npos) eol = r.body.size();
    json j = json::parse(r.body.substr(pos, eol - pos), nullptr, false);
    pos = eol + 1;
    if (j.is_discarded()) {
      ++repeats;  // a broken line counts against the file too
      continue;
    }
    const std::string id = j.value("custom_id", "");
    if (out.count(id)) ++repeats;
    out[id] = std::move(j);
  }
  return out;
}

}  // namespace kiln::test
