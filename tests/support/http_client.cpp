#include "tests/support/http_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <cctype>

#include <nlohmann/json.hpp>
#include <cstring>
#include <utility>

namespace kiln::test {

http_conn::http_conn(int port, int timeout_ms, int rcvbuf) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) close();
}

http_conn::~http_conn() { close(); }

void http_conn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void http_conn::send_raw(const std::string& bytes) {
  std::size_t off = 0;
  while (fd_ >= 0 && off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

bool http_conn::fill() {
  if (fd_ < 0) return false;
  char tmp[16384];
  const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) return false;
  buf_.append(tmp, static_cast<std::size_t>(n));
  return true;
}

std::string http_conn::read_some() {
  if (buf_.empty()) fill();
  return std::exchange(buf_, {});
}

std::string http_conn::take_line() {
  std::size_t pos;
  while ((pos = buf_.find("\r\n")) == std::string::npos)
    if (!fill()) return std::exchange(buf_, {});
  std::string line = buf_.substr(0, pos);
  buf_.erase(0, pos + 2);
  return line;
}

std::string http_conn::take(std::size_t n) {
  while (buf_.size() < n)
    if (!fill()) break;
  std::string out = buf_.substr(0, std::min(n, buf_.size()));
  buf_.erase(0, out.size());
  return out;
}

http_response http_conn::read_head() {
  http_response r;
  std::string status = take_line();
  if (status.size() < 12) return r;
  r.status = std::atoi(status.c_str() + 9);
  for (std::string line = take_line(); !line.empty(); line = take_line()) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    r.headers[name] = value;
  }
  return r;
}

http_response http_conn::read_response() {
  http_response r = read_head();
  if (r.status == 0) return r;
  if (r.headers.count("content-length")) {
    r.body = take(std::stoul(r.headers["content-length"]));
  } else if (r.headers["transfer-encoding"] == "chunked") {
    while (true) {
      const std::string size_line = take_line();
      if (size_line.empty()) break;
      const std::size_t n = std::stoul(size_line, nullptr, 16);
      if (n == 0) {
        take_line();
        break;
      }
      r.body += take(n);
      take_line();
    }
  }
  return r;
}

bool http_conn::closed_within(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  char c;
  return ::recv(fd_, &c, 1, MSG_PEEK) == 0;
}

std::string make_request(const std::string& method, const std::string& path, const std::string& body,
                         const std::vector<std::string>& headers, bool keep_alive) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST") req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return req + body;
}

http_response request(int port, const std::string& method, const std::string& path, const std::string& body,
                      const std::vector<std::string>& headers) {
  http_conn c(port);
  c.send_raw(make_request(method, path, body, headers));
  return c.read_response();
}

std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    std::size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    const std::string line = body.substr(pos, end - pos);
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
    pos = end + 1;
  }
  return out;
}

}  // namespace kiln::test

namespace kiln::test {

double metric_sum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (name.find('{') == std::string::npos && next != ' ' && next != '{') continue;
    sum += std::atof(line.c_str() + line.rfind(' ') + 1);
  }
  return sum;
}

double metric(int port, const std::string& name) { return metric_sum(request(port, "GET", "/metrics").body, name); }

bool eventually(const std::function<bool()>& ok, std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ok();
}

bool is_answer(const http_response& r) {
  if (r.status == 200) return true;
  if (r.status < 400 || r.status >= 600) return false;
  const auto e = nlohmann::json::parse(r.body, nullptr, false);
  return !e.is_discarded() && e.is_object() && e.contains("error");
}

}  // namespace kiln::test
