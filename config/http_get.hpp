#pragma once
// A small blocking HTTP/1.1 client for work off the actors' threads (pulling model files,
// kiln's own commands): one request per connection, the body streamed to a callback.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::config {

/// "http://host[:port][/path]" split; false if it is not one (path "" when none).
bool split_http_url(std::string_view url, std::string& host, int& port, std::string& path);

/// A connected TCP socket with send/receive timeouts, or -1 and why in `error`.
int connect_tcp(const std::string& host, int port, int timeout_ms, std::string& error);

struct http_head {
  int status = 0;
  std::int64_t content_length = -1;  ///< -1: none given (the body runs to the close)
  std::string content_range;         ///< a 206's Content-Range
};

/// Sends `method path` with `headers` and `body`, reads the head into `head` and streams the
/// body to `sink` (which may stop it by returning false). "" on success (any status), else
/// why the exchange failed.
std::string http_exchange(const std::string& host, int port, const std::string& method, const std::string& path,
                          const std::vector<std::string>& headers, const std::string& body, http_head& head,
                          const std::function<bool(const char*, std::size_t)>& sink, int timeout_ms = 10000);

}  // namespace kiln::config
