#include "tests/support/fake_upstream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

namespace kiln::test {

namespace {

using nlohmann::json;

bool send_all(int fd, const std::string& s) {
  for (std::size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

std::string chunk(const std::string& payload) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", payload.size());
  return size + payload + "\r\n";
}

std::string sse(const json& j) { return chunk("data: " + j.dump() + "\n\n"); }

std::string header(const std::string& head, const std::string& name) {
  std::string lower = head;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto at = lower.find("\r\n" + name + ":");
  if (at == std::string::npos) return {};
  auto v = at + 3 + name.size();
  while (v < head.size() && head[v] == ' ') ++v;
  return head.substr(v, head.find("\r\n", v) - v);
}

// Whether the peer has closed (readable with nothing to read), without waiting.
bool peer_closed(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

fake_upstream::fake_upstream() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::listen(listen_fd_, 128);
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

fake_upstream::~fake_upstream() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  ::close(listen_fd_);
  acceptor_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

std::string fake_upstream::last_body() const {
  std::lock_guard lock(mu_);
  return last_body_;
}

std::string fake_upstream::last_auth() const {
  std::lock_guard lock(mu_);
  return last_auth_;
}

void fake_upstream::accept_loop() {
  while (!stop_) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (stop_) return;
      continue;
    }
    ++connections;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    open_fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void fake_upstream::serve(int fd) {
  std::string buf;
  char tmp[8192];
  auto forget = [&] {
    std::lock_guard lock(mu_);
    std::erase(open_fds_, fd);
    ::close(fd);
  };
  while (!stop_) {
    auto end = buf.find("\r\n\r\n");
    while (end == std::string::npos) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return forget();
      buf.append(tmp, static_cast<std::size_t>(n));
      end = buf.find("\r\n\r\n");
    }
    const std::string head = buf.substr(0, end);
    const std::string length = header(head, "content-length");
    const std::size_t body_len = length.empty() ? 0 : std::stoul(length);
    while (buf.size() < end + 4 + body_len) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) return forget();
      buf.append(tmp, static_cast<std::size_t>(n));
    }
    const std::string body = buf.substr(end + 4, body_len);
    buf.erase(0, end + 4 + body_len);
    const std::string line = head.substr(0, head.find("\r\n"));
    const bool close_after = header(head, "connection") == "close";
    std::string out;
    if (line.rfind("GET /health ", 0) == 0) {
      ++polls;
      const std::string text = healthy ? "" : "{\"error\":\"unhealthy\"}";
      out = std::string(healthy ? "HTTP/1.1 200 OK" : "HTTP/1.1 503 Service Unavailable") +
            "\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
    } else if (line.rfind("GET /metrics ", 0) == 0) {
      const std::string text = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                               "# TYPE vllm:num_requests_running gauge\n"
                               "vllm:num_requests_running{model_name=\"fake\"} " + std::to_string(running_metric.load()) +
                               "\nvllm:num_requests_waiting{model_name=\"fake\"} 1\n"
                               "vllm:gpu_cache_usage_perc{model_name=\"fake\"} 0.25\n";
      out = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
            std::to_string(text.size()) + "\r\n\r\n" + text;
    } else if (line.rfind("POST /v1/chat/completions ", 0) == 0 || line.rfind("POST /v1/completions ", 0) == 0) {
      ++requests;
      {
        std::lock_guard lock(mu_);
        last_body_ = body;
        last_auth_ = header(head, "authorization");
      }
      const bool chat = line.find("/chat/") != std::string::npos;
      const json req = json::parse(body, nullptr, false);
      if (status != 200) {
        const std::string text = json{{"error", {{"message", "the fake upstream refuses"}, {"type", "BadRequestError"}, {"code", status.load()}}}}.dump();
        out = "HTTP/1.1 " + std::to_string(status.load()) + " Error\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(text.size()) + "\r\n\r\n" + text;
      } else {
        const int max_tokens = req.is_object() ? req.value("max_tokens", 16) : 16;
        const int n = std::min(tokens.load(), max_tokens);
        if (!send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"))
          return forget();
        bool gone = false;
        if (endless_event) {
          const std::string piece = chunk("data: " + std::string(65536, 'x'));
          for (int i = 0; i < 32 && !gone; ++i) gone = !send_all(fd, piece);
          return forget();
        }
        for (int i = 0; i < n && !gone; ++i) {
          if (die_after >= 0 && i >= die_after) return forget();  // killed mid-stream
          std::this_thread::sleep_for(std::chrono::milliseconds(token_delay_ms.load()));
          const std::string word = "tok" + std::to_string(i) + " ";
          const json delta = chat ? json{{"index", 0}, {"delta", {{"content", word}}}, {"finish_reason", nullptr}}
                                  : json{{"index", 0}, {"text", word}, {"finish_reason", nullptr}};
          gone = peer_closed(fd) || !send_all(fd, sse({{"id", "cmpl-fake"}, {"object", "chat.completion.chunk"}, {"choices", {delta}}}));
        }
        if (gone) {
          ++abandoned;
          return forget();
        }
        const char* reason = n < tokens.load() ? "length" : "stop";
        const json last = chat ? json{{"index", 0}, {"delta", json::object()}, {"finish_reason", reason}}
                               : json{{"index", 0}, {"text", ""}, {"finish_reason", reason}};
        std::string tail = sse({{"id", "cmpl-fake"}, {"choices", {last}}});
        tail += sse({{"id", "cmpl-fake"},
                     {"choices", json::array()},
                     {"usage", {{"prompt_tokens", 11}, {"completion_tokens", n}, {"total_tokens", 11 + n},
                                {"prompt_tokens_details", {{"cached_tokens", 3}}}}}});
        tail += chunk("data: [DONE]\n\n") + "0\r\n\r\n";
        if (!send_all(fd, tail)) {
          ++abandoned;
          return forget();
        }
        ++finished;
        if (close_after || close_silently) return forget();
        continue;
      }
    } else {
      out = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    }
    if (!send_all(fd, out) || close_after) return forget();
  }
  forget();
}

}  // namespace kiln::test
