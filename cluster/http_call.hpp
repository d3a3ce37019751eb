#pragma once
// A small blocking HTTP/1.1 client for kiln's own commands (kiln chaos): one request per
// connection over TCP, the answer read to the end.
#include <string>
#include <variant>
#include <vector>

namespace kiln::cluster {

struct http_reply {
  int status = 0;
  std::string body;
};

/// Splits "http://host:port" (a path after it is ignored); false if it is not one.
bool parse_url(const std::string& url, std::string& host, int& port);

/// The reply, or why there is none.
std::variant<http_reply, std::string> http_call(const std::string& host, int port, const std::string& method,
                                                const std::string& path, const std::vector<std::string>& headers,
                                                const std::string& body, int timeout_ms = 5000);

}  // namespace kiln::cluster
