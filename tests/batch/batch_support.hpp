#pragma once
// What the batch tests share: uploading a file as the OpenAI SDK does (multipart), making a
// batch, waiting for its end, and reading its output by custom_id.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/http_client.hpp"

namespace kiln::test {

/// Removes a store and its files when the test ends, passed or not.
struct store_guard {
  std::string path;
  ~store_guard();
};

/// One line of a batch input file: a chat completion of `max_tokens` with a fixed seed.
std::string batch_input_line(const std::string& custom_id, int max_tokens, const std::string& model = "chat-7b");
/// POST /v1/files as multipart/form-data.
http_response upload_file(int port, const std::string& key, const std::string& content, const std::string& purpose = "batch");
/// POST /v1/batches for an uploaded file.
http_response create_batch(int port, const std::string& key, const std::string& file_id, const std::string& window = "24h",
                           const std::string& endpoint = "/v1/chat/completions");
/// GET /v1/batches/{id}, polled until it has ended or `seconds` passed: its last state.
nlohmann::json wait_batch(int port, const std::string& key, const std::string& id, int seconds);
/// A file's content split into JSON lines, by custom_id; `repeats` counts ids seen more than once.
std::map<std::string, nlohmann::json> lines_by_id(int port, const std::string& key, const std::string& file_id, int& repeats);

}  // namespace kiln::test
