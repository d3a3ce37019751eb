#include "cluster/http_call.hpp"

#include "config/http_get.hpp"

namespace kiln::cluster {

bool parse_url(const std::string& url, std::string& host, int& port) {
  std::string path;
  return config::split_http_url(url, host, port, path);
}

std::variant<http_reply, std::string> http_call(const std::string& host, int port, const std::string& method,
                                                const std::string& path, const std::vector<std::string>& headers,
                                                const std::string& body, int timeout_ms) {
  config::http_head head;
  http_reply r;
  const std::string error = config::http_exchange(host, port, method, path, headers, body, head,
                                                   [&](const char* p, std::size_t n) {
                                                     r.body.append(p, n);
                                                     return true;
                                                   },
                                                   timeout_ms);
  if (!error.empty()) return error;
  r.status = head.status;
  return r;
}

}  // namespace kiln::cluster
