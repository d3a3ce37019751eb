#pragma once
// A small OpenAI-compatible upstream for the remote executor's tests, speaking as vLLM does:
// streamed chat completions and completions over HTTP/1.1 keep-alive (chunked SSE, a usage
// chunk with cached tokens, [DONE]), /health, and /metrics with vLLM's metric names. Its
// behaviour can be changed while it runs: unhealthy, an error status, dying mid-stream,
// slow tokens. A thread per connection; for tests only.
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::test {

class fake_upstream {
 public:
  fake_upstream();
  ~fake_upstream();
  fake_upstream(const fake_upstream&) = delete;
  fake_upstream& operator=(const fake_upstream&) = delete;

  int port() const { return port_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

  // What it does (may change while it runs).
  std::atomic<bool> healthy{true};
  std::atomic<int> tokens{6};            ///< content chunks per answer (at most max_tokens)
  std::atomic<int> token_delay_ms{2};
  std::atomic<int> status{200};          ///< an error status answers every completion with it
  std::atomic<int> die_after{-1};        ///< >= 0: the connection closes after this many tokens
  std::atomic<int> running_metric{3};    ///< vllm:num_requests_running it reports
  std::atomic<bool> close_silently{false};
  std::atomic<bool> endless_event{false};  ///< a hostile answer: one event that never ends (2 MiB, no newline)  ///< close each connection after its answer, unannounced

  // What it saw.
  std::atomic<int> requests{0};      ///< completions asked
  std::atomic<int> connections{0};   ///< connections accepted
  std::atomic<int> finished{0};      ///< answers sent to their end
  std::atomic<int> abandoned{0};     ///< answers whose client closed before their end
  std::atomic<int> polls{0};         ///< /health asked
  std::string last_body() const;
  std::string last_auth() const;

 private:
  void accept_loop();
  void serve(int fd);
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<int> open_fds_;
  std::string last_body_;
  std::string last_auth_;
};

}  // namespace kiln::test
