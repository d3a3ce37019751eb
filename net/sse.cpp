#include "net/sse.hpp"

namespace kiln::net {

void append_sse_event(std::string& out, std::string_view payload) {
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = payload.find('\n', start);
    out += "data: ";
    out += payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
}

std::string_view http_chunk_head(std::size_t size, char (&buf)[20]) {
  // Hex digits from the right end of buf, then CRLF (no printf per token).
  char* end = buf + sizeof buf;
  char* at = end - 2;
  at[0] = '\r';
  at[1] = '\n';
  do {
    *--at = "0123456789abcdef"[size & 0xf];
    size >>= 4;
  } while (size != 0);
  return {at, static_cast<std::size_t>(end - at)};
}

void append_http_chunk(std::string& out, std::string_view bytes) {
  if (bytes.empty()) return;
  char head[20];
  out += http_chunk_head(bytes.size(), head);
  out += bytes;
  out += "\r\n";
}

}  // namespace kiln::net
