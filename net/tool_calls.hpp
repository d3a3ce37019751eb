#pragma once
// Tool calls in a model's output, in the formats open models are trained to write:
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen 2.5 / 3, Hermes)
//   llama3_json  the whole answer a JSON object {"name": ..., "parameters": {...}}, perhaps after
//                <|python_tag|>, several separated by ';' (Llama 3.1 / 3.2)
// A pool's config names its format (tool_call_format); tools in the request turn parsing on.
// The streaming form holds back only what may be the start of a call.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::net {

enum class tool_format { none, hermes, llama3_json };

/// "hermes", "llama3_json" or "none"; nullopt for anything else.
std::optional<tool_format> tool_format_named(std::string_view name);

struct tool_call {
  std::string id;         ///< "call_" + a per-request counter
  std::string name;
  std::string arguments;  ///< JSON text of an object, as OpenAI sends it
};

struct parsed_output {
  std::string content;  ///< the text outside the calls (empty: none)
  std::vector<tool_call> calls;
};

/// Splits a whole answer into its text and calls; text that is not a well-formed call stays
/// text. `id_prefix` makes the call ids unique (the completion's id).
parsed_output parse_tool_calls(std::string_view text, tool_format f, std::string_view id_prefix);

/// Streams an answer's text while watching for calls: feed() returns the text that is safe to
/// send now; finish() parses what was held back.
class tool_call_stream {
 public:
  tool_call_stream(tool_format f, std::string id_prefix) : format_(f), id_prefix_(std::move(id_prefix)) {}
  std::string feed(std::string_view delta);
  parsed_output finish();

 private:
  tool_format format_;
  std::string id_prefix_;
  std::string held_;       ///< text not yet sent: a call, or what may begin one
  bool in_call_ = false;   ///< a call has begun: everything from here is held to the end
  bool sent_any_ = false;  ///< text has gone out (llama3_json: then no call can follow)
};

}  // namespace kiln::net
