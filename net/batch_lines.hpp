#pragma once
// The lines of OpenAI's batch files: reading an input file (one request per line, each with a
// custom_id, method, url and body), writing the output and error files' lines, and finding
// which lines a batch has answered already (to resume it after a restart). Pure functions.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::net {

struct batch_line {
  std::string custom_id;
  std::string body;  ///< the request's JSON, as the endpoint takes it
};

struct batch_input {
  std::string model;  ///< every line's
  std::vector<batch_line> lines;
};

/// Why the input cannot run: OpenAI's batch errors (code, message, param, line from 1).
struct batch_input_error {
  std::string code;
  std::string message;
  std::string param;
  int line = 0;
};

/// Reads a JSONL input for `endpoint`. `loose` (seed 000's form): a line may be a bare request
/// body (its custom_id is then "line-N") and may leave out the model (`model` is used).
/// At most `max_lines` lines; the first errors (up to 10) when it cannot run.
std::variant<batch_input, std::vector<batch_input_error>> read_batch_input(std::string_view jsonl, const std::string& endpoint,
                                                                           int max_lines, bool loose = false,
                                                                           const std::string& model = "");

/// An output line: the endpoint answered `status` with `body` (JSON text) for request `request_id`.
std::string answer_line(const std::string& line_id, const std::string& custom_id, int status,
                        const std::string& request_id, std::string_view body);
/// An error-file line for a request that did not run: code batch_expired or batch_cancelled.
std::string unrun_line(const std::string& line_id, const std::string& custom_id, const std::string& code,
                       const std::string& message);

/// What an output or error file holds already: its whole lines' custom_ids, and the bytes
/// they take (a last line cut short by a crash lies past it and is to be cut off).
struct answered {
  std::set<std::string> custom_ids;
  std::size_t whole_bytes = 0;
  std::int64_t lines = 0;
};
answered answered_lines(std::string_view file);

}  // namespace kiln::net
