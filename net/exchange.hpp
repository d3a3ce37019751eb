#pragma once
// One HTTP request and its answer, as a handler sees it: no Beast here. The connection that
// read the request implements it. Every method runs on the connection's strand (`post` gets
// there from any thread); once the exchange has ended, further calls do nothing.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::net {

using header_list = std::vector<std::pair<std::string, std::string>>;

struct http_request {
  std::string method;
  std::string path;   ///< without the query
  std::string query;
  unsigned version = 11;  ///< 10: HTTP/1.0
  header_list headers;    ///< names lower-cased
  std::string body;

  /// The value of a header ("" when absent); `name` lower-case.
  std::string header(std::string_view name) const;
};

/// Who is calling, as authentication found (set before the handler runs).
struct caller {
  std::string team;  ///< a team key's team
  bool admin = false;
  /// A batch line's request id, the same each time the line runs (origin 0: a new id), so
  /// that usage counts it once whatever a restart repeats.
  std::uint64_t id_origin = 0;
  std::uint64_t id_seq = 0;
};

/// What the access log line says about a request beyond method, path, status and timing.
struct log_fields {
  std::string team;
  std::string model;
  std::string version;
  std::string replica;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double ttft_ms = -1;         ///< request read to first token handed to the socket
  double engine_ttft_ms = -1;  ///< of which the engine's: the request's arrival there to its first token
};

/// Why a request in progress is being ended from outside its handler.
enum class interruption {
  client_gone,  ///< closed, reset, too slow to read, or too far behind: nothing more can be written
  shutdown,     ///< the server stops: answer now (an error event), then the connection closes
};

class exchange {
 public:
  virtual ~exchange() = default;
  virtual const http_request& request() const = 0;
  virtual const caller& who() const = 0;
  /// A whole answer with Content-Length.
  virtual void respond(int status, std::string body, std::string_view content_type = "application/json",
                       const header_list& extra = {}) = 0;
  /// The head of a 200 text/event-stream answer (chunked for HTTP/1.1, close-delimited for 1.0).
  virtual void begin_stream(const header_list& extra = {}) = 0;
  /// SSE bytes (whole events) to append to the stream.
  virtual void stream(std::string_view sse) = 0;
  /// The stream is complete after `last` (its final events, written with the end in one go,
  /// so a client that closes on [DONE] has had everything); `status` is what the access log
  /// records.
  virtual void end_stream(int status, std::string_view last = {}) = 0;
  virtual bool streaming() const = 0;
  /// Runs `fn` on the connection's strand if this exchange is still in progress then.
  virtual void post(std::function<void()> fn) = 0;
  /// Called (on the strand) if the exchange is ended from outside; once at most.
  virtual void on_interrupt(std::function<void(interruption)> fn) = 0;
  /// Runs `fn` on the strand after `ms` if the exchange is still in progress then.
  virtual void after(int ms, std::function<void()> fn) = 0;
  virtual log_fields& log() = 0;
  /// Starts loading what stream() touches, one link deeper per `depth` (see
  /// stream_target::warm); nothing by default.
  virtual void warm(int /*depth*/) const {}
};

}  // namespace kiln::net
