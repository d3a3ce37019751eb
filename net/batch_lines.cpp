#include "net/batch_lines.hpp"

#include <nlohmann/json.hpp>

namespace kiln::net {

namespace {

using json = nlohmann::json;
constexpr std::size_t kMostErrors = 10;

}  // namespace

std::variant<batch_input, std::vector<batch_input_error>> read_batch_input(std::string_view jsonl, const std::string& endpoint,
                                                                           int max_lines, bool loose, const std::string& model) {
  batch_input in;
  in.model = model;
  std::vector<batch_input_error> errors;
  std::set<std::string> ids;
  auto fail = [&](std::string code, std::string message, std::string param, int line) {
    if (errors.size() < kMostErrors) errors.push_back({std::move(code), std::move(message), std::move(param), line});
  };
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < jsonl.size()) {
    auto eol = jsonl.find('\n', pos);
    if (eol == std::string_view::npos) eol = jsonl.size();
    std::string_view text = jsonl.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (static_cast<int>(in.lines.size()) >= max_lines) {
      fail("too_many_requests", "A batch holds at most " + std::to_string(max_lines) + " requests.", "", line_no);
      break;
    }
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      fail("invalid_json_line", "This line is not valid JSON.", "", line_no);
      continue;
    }
    batch_line l;
    json body;
    const bool wrapped = j.contains("custom_id") || j.contains("body") || j.contains("url") || j.contains("method");
    if (wrapped || !loose) {
      if (!j.contains("custom_id") || !j["custom_id"].is_string() || j["custom_id"].get<std::string>().empty()) {
        fail("missing_required_parameter", "Each line needs a non-empty string custom_id.", "custom_id", line_no);
        continue;
      }
      l.custom_id = j["custom_id"];
      const std::string method = j.value("method", json("POST")).is_string() ? j.value("method", "POST") : "";
      if (method != "POST") {
        fail("invalid_method", "The method must be POST.", "method", line_no);
        continue;
      }
      const std::string url = j.value("url", json(endpoint)).is_string() ? j.value("url", endpoint) : "";
      if (url != endpoint) {
        fail("mismatched_endpoint", "The url must be the batch's endpoint, " + endpoint + ".", "url", line_no);
        continue;
      }
      if (!j.contains("body") || !j["body"].is_object()) {
        fail("missing_required_parameter", "Each line needs a body object.", "body", line_no);
        continue;
      }
      body = std::move(j["body"]);
    } else {
      l.custom_id = "line-" + std::to_string(line_no);
      body = std::move(j);
    }
    if (!ids.insert(l.custom_id).second) {
      fail("duplicate_custom_id", "The custom_id " + l.custom_id + " appears more than once.", "custom_id", line_no);
      continue;
    }
    if (body.contains("stream") && body["stream"] != false) {
      fail("invalid_request", "Batch requests cannot stream.", "body.stream", line_no);
      continue;
    }
    if (!body.contains("model") && loose && !in.model.empty()) body["model"] = in.model;
    if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty()) {
      fail("missing_required_parameter", "Each request needs a model.", "body.model", line_no);
      continue;
    }
    const std::string m = body["model"];
    if (in.model.empty()) in.model = m;
    else if (m != in.model) {
      fail("model_mismatch", "Every request of a batch must use the same model (" + in.model + ").", "body.model", line_no);
      continue;
    }
    l.body = body.dump();
    in.lines.push_back(std::move(l));
  }
  if (errors.empty() && in.lines.empty()) fail("empty_file", "The input file holds no request.", "", 0);
  if (!errors.empty()) return errors;
  return in;
}

std::string answer_line(const std::string& line_id, const std::string& custom_id, int status, const std::string& request_id,
                        std::string_view body) {
  std::string out = R"({"id":)" + json(line_id).dump() + R"(,"custom_id":)" + json(custom_id).dump() +
                    R"(,"response":{"status_code":)" + std::to_string(status) + R"(,"request_id":)" + json(request_id).dump() +
                    R"(,"body":)";
  out += body.empty() ? std::string_view("null") : body;
  out += "},\"error\":null}\n";
  return out;
}

std::string unrun_line(const std::string& line_id, const std::string& custom_id, const std::string& code,
                       const std::string& message) {
  return json{{"id", line_id}, {"custom_id", custom_id}, {"response", nullptr}, {"error", {{"code", code}, {"message", message}}}}
             .dump() +
         "\n";
}

answered answered_lines(std::string_view file) {
  answered out;
  std::size_t pos = 0;
  while (pos < file.size()) {
    const auto eol = file.find('\n', pos);
    if (eol == std::string_view::npos) break;  // cut short: not whole
    const json j = json::parse(file.substr(pos, eol - pos), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("custom_id") || !j["custom_id"].is_string()) break;
    out.custom_ids.insert(j["custom_id"].get<std::string>());
    ++out.lines;
    pos = eol + 1;
    out.whole_bytes = pos;
  }
  return out;
}

}  // namespace kiln::net
