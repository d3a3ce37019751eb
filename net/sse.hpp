#pragma once
// Server-sent events over HTTP/1.1 chunked transfer encoding.
#include <string>
#include <string_view>

namespace kiln::net {

/// "data: <payload>\n\n"; a payload with newlines becomes several data lines.
void append_sse_event(std::string& out, std::string_view payload);
/// One HTTP/1.1 chunk: hex size, CRLF, bytes, CRLF. Empty input appends nothing.
void append_http_chunk(std::string& out, std::string_view bytes);
/// The size line that opens an HTTP chunk of `size` bytes ("1a\r\n"), written into `buf`.
std::string_view http_chunk_head(std::size_t size, char (&buf)[20]);
/// The last chunk that ends a chunked body.
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";
inline constexpr std::string_view kSseDone = "[DONE]";

}  // namespace kiln::net
