// floor_server: the floor for kiln's streaming cost. One thread, epoll, non-blocking sockets:
// it answers each POST with the SSE stream kiln would send (the same chunk shapes and HTTP
// chunk framing, one send per event) at a fixed pace: the first token `--ttft-ms` after the
// request, then one every `--token-ms`, `max_tokens` of them. Its usage chunk reports that
// first-token time as kiln.engine_ttft_ms, so stream_load's overhead is what the server adds.
//   floor_server --port 0 [--ttft-ms 60] [--token-ms 34]
// prints "serving on http://127.0.0.1:PORT"; run stream_load against it with --pid.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct stream {
  std::string in;
  bool streaming = false;
  int max_tokens = 0;
  int sent = 0;
  clock_type::time_point arrived;
  std::string out;  ///< reused for every event
};

struct due {
  clock_type::time_point at;
  int fd;
  bool operator>(const due& o) const { return at > o.at; }
};

int max_tokens_of(const std::string& body) {
  const auto at = body.find("\"max_tokens\":");
  return at == std::string::npos ? 16 : std::max(1, std::atoi(body.c_str() + at + 13));
}

// One SSE event in one HTTP chunk, written with one send.
bool send_event(int fd, std::string& out, const std::string& sse) {
  out.clear();
  char head[20];
  const int n = std::snprintf(head, sizeof head, "%zx\r\n", sse.size());
  out.append(head, static_cast<std::size_t>(n));
  out += sse;
  out += "\r\n";
  return ::send(fd, out.data(), out.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
}

std::string chunk(const char* choices_and_rest) {
  return std::string("data: {\"id\":\"chatcmpl-0123456789abcdef0123456789abcdef\",\"object\":\"chat.completion.chunk\","
                     "\"created\":1764547200,\"model\":\"chat-7b\",\"choices\":[") +
         choices_and_rest + "\n\n";
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  double ttft_ms = 60, token_ms = 34;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--port") port = std::atoi(argv[i + 1]);
    else if (f == "--ttft-ms") ttft_ms = std::atof(argv[i + 1]);
    else if (f == "--token-ms") token_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: floor_server [--port N] [--ttft-ms MS] [--token-ms MS]\n");
      return 2;
    }
  }
  const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 4096) != 0) {
    std::perror("floor_server: bind/listen");
    return 1;
  }
  socklen_t len = sizeof addr;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("floor_server: serving on http://127.0.0.1:%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);

  const int ep = ::epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  std::unordered_map<int, stream> streams;
  std::priority_queue<due, std::vector<due>, std::greater<>> timers;
  const auto ttft = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(ttft_ms));
  const auto pace = std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double, std::milli>(token_ms));
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n";
  const std::string role = chunk("{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}");
  const std::string token = chunk("{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}");
  auto close_fd = [&](int fd) {
    ::close(fd);
    streams.erase(fd);
  };
  std::vector<epoll_event> events(1024);
  for (;;) {
    int wait_ms = -1;
    if (!timers.empty()) {
      const auto left = timers.top().at - clock_type::now();
      wait_ms = std::max<int>(0, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    }
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), wait_ms);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == lfd) {
        for (int c; (c = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK)) >= 0;) {
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          epoll_event cev{};
          cev.events = EPOLLIN;
          cev.data.fd = c;
          ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
          streams[c];
        }
        continue;
      }
      auto it = streams.find(fd);
      if (it == streams.end()) continue;
      stream& s = it->second;
      char buf[8192];
      const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
      if (got <= 0) {
        close_fd(fd);
        continue;
      }
      if (s.streaming) continue;
      s.in.append(buf, static_cast<std::size_t>(got));
      const auto end = s.in.find("\r\n\r\n");
      if (end == std::string::npos) continue;
      const auto cl = s.in.find("Content-Length: ");
      const std::size_t body_len = cl == std::string::npos ? 0 : std::strtoul(s.in.c_str() + cl + 16, nullptr, 10);
      if (s.in.size() < end + 4 + body_len) continue;
      s.max_tokens = max_tokens_of(s.in.substr(end + 4));
      s.streaming = true;
      s.arrived = clock_type::now();
      ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
      timers.push({s.arrived + ttft, fd});
    }
    const auto now = clock_type::now();
    while (!timers.empty() && timers.top().at <= now) {
      const due d = timers.top();
      timers.pop();
      auto it = streams.find(d.fd);
      if (it == streams.end()) continue;
      stream& s = it->second;
      bool ok = true;
      if (s.sent == 0) ok = send_event(d.fd, s.out, role);
      ok = ok && send_event(d.fd, s.out, token);
      ++s.sent;
      if (ok && s.sent < s.max_tokens) {
        timers.push({d.at + pace, d.fd});
        continue;
      }
      if (ok) {
        char usage[256];
        std::snprintf(usage, sizeof usage,
                      "],\"usage\":{\"prompt_tokens\":200,\"completion_tokens\":%d,\"total_tokens\":%d},"
                      "\"kiln\":{\"engine_ttft_ms\":%.3f,\"attempts\":1}}",
                      s.sent, s.sent + 200, ttft_ms);
        send_event(d.fd, s.out, chunk("{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}"));
        send_event(d.fd, s.out, chunk(usage));
        send_event(d.fd, s.out, "data: [DONE]\n\n");
        ::send(d.fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
      }
      close_fd(d.fd);
    }
  }
}
