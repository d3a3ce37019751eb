#pragma once
// A client of one OpenAI-compatible upstream (vLLM, SGLang, another kiln): streamed chat
// completions over HTTP/1.1 keep-alive connections, at most `max_connections` at once (more
// requests queue), and the upstream's health and Prometheus metrics on demand. Its sockets run
// on a thread of its own (Boost.Asio); what they bring is handed to `on_events` on that
// thread, one call per read, so the caller (an actor) turns each call into one message.
// No CAF here.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/upstream_protocol.hpp"

namespace kiln::engine::upstream {

/// How a stream ended without its [DONE].
enum class failure : std::uint8_t {
  refused,   ///< no connection (refused, unresolvable, connect timeout): nothing was sent
  status,    ///< the upstream answered with an error status (see http_status, message)
  broken,    ///< the connection broke or the stream was malformed mid-answer
  stalled,   ///< nothing arrived for the stall timeout
};

/// One thing a stream brought.
struct stream_event {
  std::uint64_t id = 0;
  bool failed = false;
  chunk data;           ///< !failed: one event of the stream ([DONE] has data.done)
  failure why = failure::broken;
  int http_status = 0;  ///< failure::status
  std::string message;  ///< failed: what went wrong (the upstream's own message for a status)
};

/// The upstream's answer to a poll: /health (any 2xx), then /metrics (optional).
struct health {
  bool ok = false;
  std::string error;  ///< !ok: why
  load_report load;   ///< from /metrics where it answers
};

struct client_options {
  endpoint where;
  std::string api_key;       ///< bearer key ("": none)
  int max_connections = 64;  ///< streams at once; more queue
  int connect_timeout_ms = 3000;
  int stall_timeout_ms = 60000;  ///< a stream silent this long fails
  int poll_timeout_ms = 900;     ///< a health poll not answered by then fails
};

class client {
 public:
  using events_fn = std::function<void(std::vector<stream_event>&&)>;
  client(client_options opts, events_fn on_events);
  ~client();  ///< closes every connection and stops its thread; no events after it returns
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// POSTs `json_body` to base + `path` ("/chat/completions") as stream `id`. Thread-safe.
  void start(std::uint64_t id, std::string path, std::string json_body);
  /// Ends stream `id` at once (its connection closes); no events for it after this. Thread-safe.
  void cancel(std::uint64_t id);
  /// Asks /health and /metrics (at the upstream's root); `done` runs on the client's thread.
  void poll(std::function<void(health)> done);

  struct counts {
    std::size_t open = 0;    ///< connections open
    std::size_t busy = 0;    ///< of them carrying a stream
    std::size_t queued = 0;  ///< streams waiting for a connection
    std::uint64_t connects = 0;  ///< connections made so far
  };
  /// Waits for the client's thread to say (for tests and gauges; not from an actor).
  counts snapshot() const;
  /// The same, as last published by the client's thread (never waits).
  counts last_counts() const;

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace kiln::engine::upstream
