#pragma once
// A small blocking HTTP/1.1 client over loopback for the end-to-end tests: raw sockets,
// Content-Length and chunked bodies, and SSE event splitting.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::test {

struct http_response {
  int status = 0;
  std::map<std::string, std::string> headers;  ///< names lower-cased
  std::string body;
};

class http_conn {
 public:
  /// `rcvbuf` > 0: the socket's receive buffer, set before connecting (a slow reader's window).
  explicit http_conn(int port, int timeout_ms = 10000, int rcvbuf = 0);
  ~http_conn();
  http_conn(const http_conn&) = delete;
  http_conn& operator=(const http_conn&) = delete;

  bool ok() const { return fd_ >= 0; }
  void send_raw(const std::string& bytes);
  /// Reads one whole response; status 0 if the connection ended first.
  http_response read_response();
  /// Reads the status line and headers only.
  http_response read_head();
  std::string read_some();
  /// True if the peer closes the connection within timeout_ms.
  bool closed_within(int timeout_ms);
  void close();

 private:
  bool fill();
  std::string take_line();
  std::string take(std::size_t n);
  int fd_ = -1;
  std::string buf_;
};

std::string make_request(const std::string& method, const std::string& path, const std::string& body,
                         const std::vector<std::string>& headers = {}, bool keep_alive = false);
http_response request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                      const std::vector<std::string>& headers = {});
/// The sum of a metric's samples in Prometheus text: `name` with any labels, or, when `name`
/// has a '{', the series that start with it (kiln_requests_total{status="499"}).
double metric_sum(const std::string& text, const std::string& name);
/// metric_sum over the server's /metrics now.
double metric(int port, const std::string& name);
/// Polls `ok` until it holds or `within` has passed; its last answer.
bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds within);
/// The payloads of every "data:" line of an SSE body.
std::vector<std::string> sse_data(const std::string& body);
/// A 200, or a 4xx/5xx whose body is an OpenAI error object: what any request must get.
bool is_answer(const http_response& r);

}  // namespace kiln::test
