#include "config/http_get.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace kiln::config {

bool split_http_url(std::string_view url, std::string& host, int& port, std::string& path) {
  constexpr std::string_view scheme = "http://";
  if (!url.starts_with(scheme)) return false;
  std::string_view rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  path = slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  const std::string_view authority = rest.substr(0, slash);
  const auto colon = authority.rfind(':');
  if (colon == std::string_view::npos) {
    host = std::string(authority);
    port = 80;
  } else {
    host = std::string(authority.substr(0, colon));
    const std::string digits(authority.substr(colon + 1));
    char* end = nullptr;
    const long p = std::strtol(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || p <= 0 || p > 65535) return false;
    port = static_cast<int>(p);
  }
  return !host.empty();
}

int connect_tcp(const std::string& host, int port, int timeout_ms, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = "cannot resolve " + host + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  int why = 0;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) error = "cannot connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(why);
  return fd;
}

namespace {

// The value of header `name` in a head's lines ("" when absent).
std::string header_value(const std::string& head, std::string_view name) {
  std::size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const std::size_t start = pos + 2;
    const std::size_t end = head.find("\r\n", start);
    const std::string line = head.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const auto colon = line.find(':');
    if (colon == name.size() && ::strncasecmp(line.c_str(), name.data(), name.size()) == 0) {
      std::size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      return line.substr(v);
    }
    pos = end;
  }
  return {};
}

}  // namespace

std::string http_exchange(const std::string& host, int port, const std::string& method, const std::string& path,
                          const std::vector<std::string>& headers, const std::string& body, http_head& head,
                          const std::function<bool(const char*, std::size_t)>& sink, int timeout_ms) {
  std::string error;
  const int fd = connect_tcp(host, port, timeout_ms, error);
  if (fd < 0) return error;
  std::string req = method + " " + (path.empty() ? "/" : path) + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t off = 0; off < req.size();) {
    const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      const int why = errno;
      ::close(fd);
      return std::string("sending to ") + host + " failed: " + std::strerror(why);
    }
    off += static_cast<std::size_t>(n);
  }
  std::string raw;
  std::size_t head_end = std::string::npos;
  std::int64_t received = 0;
  char buf[1 << 16];
  bool stopped = false;
  while (!stopped) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      const int why = errno;
      ::close(fd);
      return std::string("reading from ") + host + " failed: " + std::strerror(why);
    }
    if (n == 0) break;
    if (head_end == std::string::npos) {
      raw.append(buf, static_cast<std::size_t>(n));
      head_end = raw.find("\r\n\r\n");
      if (head_end == std::string::npos) {
        if (raw.size() > 65536) break;
        continue;
      }
      const std::string text = raw.substr(0, head_end + 2);
      if (text.rfind("HTTP/1.", 0) != 0 || text.size() < 12) break;
      head.status = std::atoi(text.c_str() + 9);
      const std::string length = header_value(text, "Content-Length");
      head.content_length = length.empty() ? -1 : std::strtoll(length.c_str(), nullptr, 10);
      head.content_range = header_value(text, "Content-Range");
      const std::string rest = raw.substr(head_end + 4);
      received += static_cast<std::int64_t>(rest.size());
      if (!rest.empty()) stopped = !sink(rest.data(), rest.size());
    } else {
      received += n;
      stopped = !sink(buf, static_cast<std::size_t>(n));
    }
    if (head.content_length >= 0 && received >= head.content_length) break;
  }
  ::close(fd);
  if (head_end == std::string::npos || head.status == 0) return "no HTTP answer from " + host + ":" + std::to_string(port);
  if (!stopped && head.content_length >= 0 && received < head.content_length)
    return "the answer from " + host + " ended after " + std::to_string(received) + " of " +
           std::to_string(head.content_length) + " bytes";
  return {};
}

}  // namespace kiln::config
