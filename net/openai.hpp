#pragma once
// OpenAI wire format: request validation and the JSON kiln answers with. No networking here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.hpp"
#include "engine/tokenizer.hpp"
#include "net/tool_calls.hpp"

namespace kiln::net {

/// An error as the client sees it: HTTP status plus the OpenAI error object's fields.
struct api_error {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  ///< empty: null
  std::string code;   ///< empty: null
  int retry_after_s = 0;  ///< > 0: sent as Retry-After
};

/// A validated POST /v1/chat/completions body.
struct chat_params {
  std::string model;
  std::vector<engine::chat_message> messages;
  bool stream = false;
  int max_tokens = 0;  ///< 0: the pool's default
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;  ///< an extension OpenAI lacks; 0: off
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  /// What the chat template renders, as JSON text in the client's key order: messages (text
  /// content, tool-call arguments as objects), tools, and chat_template_kwargs' variables.
  std::string template_json;
  bool include_usage = true;  ///< stream_options.include_usage: false leaves out the usage chunk
  bool tool_choice_none = false;
  bool has_tools = false;
  /// -1: no log-probabilities; else each token's and this many alternatives (chat: logprobs
  /// true with top_logprobs; /v1/completions: logprobs N)
  int logprobs = -1;
  bool logprobs_asked = false;  ///< chat's logprobs: true (read before top_logprobs may be)
  double presence_penalty = 0;
  double frequency_penalty = 0;
  double repetition_penalty = 1;  ///< vLLM's; 1: none
  std::vector<std::pair<std::int32_t, float>> logit_bias;  ///< by token id, each once
  std::optional<engine::priority> tier;  ///< from service_tier; an x-priority header wins
  std::vector<std::int32_t> stop_token_ids;  ///< vLLM's: sorted, each once
  int min_tokens = 0;       ///< vLLM's: no eos before this many tokens
  bool ignore_eos = false;  ///< vLLM's: only max_tokens (or a stop string) ends the answer
};

std::variant<chat_params, api_error> parse_chat_request(std::string_view body);

/// POST /v1/completions: a prompt as text or token ids; echo; no messages or tools.
struct completion_params {
  chat_params common;  ///< model, stream, sampling, stop, include_usage (messages empty)
  std::string prompt_text;
  std::vector<std::int32_t> prompt_ids;
  bool echo = false;
  bool add_special_tokens = true;  ///< vLLM's: a text prompt gets its tokenizer's BOS (if any)
  bool prompt_logprobs = false;  ///< echo with logprobs: the prompt's tokens' too
};
std::variant<completion_params, api_error> parse_completion_request(std::string_view body);

/// {"error":{"message","type","param","code"}}
std::string error_json(const api_error& e);
/// Length in bytes of the UTF-8 character starting at s[i], or 0 where none valid starts.
std::size_t utf8_len(std::string_view s, std::size_t i);
/// JSON string literal (quotes included) of arbitrary bytes; invalid UTF-8 becomes U+FFFD.
std::string json_quote(std::string_view s);
/// Appends `s` as a JSON string (quotes included; invalid UTF-8 becomes U+FFFD).
void append_json_quoted(std::string& out, std::string_view s);

/// What every chunk and completion of one request has in common.
struct completion_meta {
  std::string id;       ///< "chatcmpl-..." (or "cmpl-...")
  std::int64_t created = 0;
  std::string model;
  bool text_completion = false;  ///< /v1/completions' shapes: "text_completion" objects, choices[].text
};

struct completion_usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::string model_version;
  std::string region;
  std::string replica_id;
  double engine_ttft_ms = 0;
  int attempts = 1;  ///< replicas the request was sent to
};

std::string chunk_role_json(const completion_meta& m);
std::string chunk_content_json(const completion_meta& m, std::string_view text);
/// A content event without building a chunk: "data: " and the chunk up to its content,
/// rendered once per stream ...
std::string content_event_prefix(const completion_meta& m);
/// ... then, per token, appended to the stream's reused buffer with the content quoted and
/// the chunk's end: the same bytes as append_sse_event(chunk_content_json(m, text)).
inline constexpr std::string_view kContentSuffix = "},\"finish_reason\":null}]}";
inline constexpr std::string_view kTextSuffix = ",\"logprobs\":null,\"finish_reason\":null}]}";
/// What follows the quoted text in a content event of this shape.
std::string_view content_suffix(const completion_meta& m);
void append_content_event(std::string& out, std::string_view prefix, std::string_view text,
                          std::string_view suffix = kContentSuffix);
std::string chunk_finish_json(const completion_meta& m, std::string_view finish_reason);
std::string chunk_usage_json(const completion_meta& m, const completion_usage& u);
/// `logprobs`: the choice's logprobs object (logprobs_writer), or empty when not asked.
std::string completion_json(const completion_meta& m, std::string_view text,
                            std::string_view finish_reason, const completion_usage& u,
                            const std::vector<tool_call>& calls = {}, std::string_view logprobs = {});
/// A chunk whose delta carries the answer's tool calls, whole.
std::string chunk_tool_calls_json(const completion_meta& m, const std::vector<tool_call>& calls);
/// The models this node serves, each with its versions and live version.
std::string models_json(const config::kiln_config& cfg, std::int64_t created);
/// GET /v1/models/{id}: the model (`name`, or `name@version` for one of its versions) as the
/// list shows it, with the id as asked; nullopt for none.
std::optional<std::string> model_json(const config::kiln_config& cfg, std::string_view id, std::int64_t created);

}  // namespace kiln::net
