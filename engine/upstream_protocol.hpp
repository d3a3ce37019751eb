#pragma once
// What a remote replica reads from an OpenAI-compatible upstream server (vLLM, SGLang, or
// another kiln): its server-sent events, each event's chat.completion.chunk (content, finish
// reason, usage with cached tokens, or an error), and its Prometheus metrics as a load report.
// Pure parsing: no I/O, no CAF.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::engine::upstream {

/// "http://host[:port][/base]" parted; nullopt when it is not one. The one parser of upstream
/// URLs: the config's check and the admin API use it too (config::upstream_url_problem).
struct endpoint {
  std::string host;
  int port = 80;
  std::string base;  ///< the path before /chat/completions, no trailing slash ("/v1")
};
std::optional<endpoint> parse_endpoint(std::string_view base_url);

/// Splits an SSE byte stream into the data of its events, however the bytes arrive.
class sse_reader {
 public:
  /// Appends the data of every event completed by `bytes` to `out` ("[DONE]" included).
  void feed(std::string_view bytes, std::vector<std::string>& out);
  /// Bytes held for an event not yet complete.
  std::size_t pending() const { return buf_.size(); }

 private:
  std::string buf_;
  std::string data_;  ///< the data lines of the event being read
  bool has_data_ = false;
};

/// What one event of an upstream's chat completion stream says.
struct chunk {
  bool done = false;           ///< data: [DONE]
  std::string content;         ///< the delta's content ("" for none)
  std::string finish_reason;   ///< "" while the answer goes on
  bool has_usage = false;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;       ///< prompt_tokens_details.cached_tokens (0 when not reported)
  bool is_error = false;       ///< an error event: {"error": {...}}
  std::string error_message;
  std::string error_code;
};

/// One event's data as a chunk; nullopt when it is not JSON of a chunk, [DONE] or an error.
std::optional<chunk> parse_chunk(std::string_view data);

/// An upstream's load, from its Prometheus text: vLLM's vllm:num_requests_running,
/// vllm:num_requests_waiting and vllm:gpu_cache_usage_perc (or vllm:kv_cache_usage_perc),
/// SGLang's sglang:num_running_reqs, sglang:num_queue_reqs and sglang:token_usage, or kiln's
/// own kiln_engine_* gauges; summed over label sets. -1 where the text does not say.
struct load_report {
  double running = -1;
  double waiting = -1;
  double kv_usage = -1;  ///< 0..1
  bool any() const { return running >= 0 || waiting >= 0 || kv_usage >= 0; }
};
load_report parse_load(std::string_view prometheus_text);

}  // namespace kiln::engine::upstream
